"""``sloopd``: ``serve`` runs the daemon; ``store`` maintains its store offline."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from sloopd.core import config, diskfull, paths
from sloopd.store import LockHeld, StoreLock, StoreTooNew, StoreUnavailable, db, migrations
from sloopd.wire import api

_repo = click.option(
    "--repo",
    type=click.Path(path_type=Path, file_okay=False),
    help="Repository (default: the git top level of the current directory).",
)
_state = click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="State directory (default: sloop/ in the git common directory).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(api.SOFTWARE_VERSION, prog_name="sloopd")
def main() -> None:
    """The Sloop daemon: one per repository, owner of all its state."""


@main.command()
@_repo
@_state
@click.option(
    "--socket-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Socket directory (default: $SLOOP_SOCKET_DIR, else "
    "$XDG_RUNTIME_DIR/sloop/<repo-id>, else /tmp/sloop-<uid>/<repo-id>).",
)
@click.option("--metrics", metavar="HOST:PORT", help="Serve Prometheus metrics here.")
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    help="Where stages run, over [executor] backend in sloop.toml (ray: pip install 'sloop[ray]').",
)
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="The Ray cluster (HOST:PORT, or auto), over [executor] address in sloop.toml.",
)
def serve(
    repo: Path | None,
    state_dir: Path | None,
    socket_dir: Path | None,
    metrics: str | None,
    executor: str | None,
    ray_address: str | None,
) -> None:
    """Run the daemon in the foreground.

    Prints the operator socket path alone on the first line of standard
    output once it listens; logs go to standard error.  SIGTERM or SIGINT
    stop it cleanly, SIGHUP reloads sloop.toml.
    """
    from sloopd.ops.process import configure_logging
    from sloopd.server import ServeOptions, Server

    configure_logging()
    # Every load of sloop.toml (start-up and each SIGHUP) applies these over the file.
    if executor is not None:
        os.environ[config.EXECUTOR_OVERRIDE] = executor
    if ray_address is not None:
        os.environ[config.RAY_ADDRESS_OVERRIDE] = ray_address
    try:
        server = Server(ServeOptions(repo, state_dir, socket_dir, metrics))
    except paths.RepoError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(server.run())


@main.group()
def store() -> None:
    """Maintain the store; each command takes the store's lock and refuses
    while a daemon holds it."""


def _state_dir_of(repo: Path | None) -> Path:
    try:
        return paths.resolve(repo, None, None).state_dir
    except paths.RepoError as exc:
        raise click.ClickException(str(exc)) from exc


def _locked_state_dir(
    repo: Path | None, state_dir: Path | None, role: str
) -> tuple[Path, StoreLock]:
    try:
        state = state_dir or paths.resolve(repo, None, None).state_dir
    except paths.RepoError as exc:
        raise click.ClickException(str(exc)) from exc
    lock = StoreLock(state, role)
    try:
        with _one_line(role, state):
            lock.acquire()
    except LockHeld as exc:
        raise click.ClickException(str(exc)) from exc
    return state, lock


@contextmanager
def _one_line(role: str, state: Path) -> Iterator[None]:
    """A store command's failure to read or write ends in one line, never a traceback:
    exit 75 (EX_TEMPFAIL, as ``serve``) when the disk has no room, else 1."""
    try:
        yield
    except (OSError, db.DatabaseError, StoreUnavailable) as exc:
        if diskfull.no_room(exc, state):
            click.echo(f"Error: {diskfull.maintenance_message(role, state)}", err=True)
            sys.exit(diskfull.DISK_FULL_EXIT)
        raise click.ClickException(f"{role}: {exc}") from exc


@store.command()
@_repo
@_state
def migrate(repo: Path | None, state_dir: Path | None) -> None:
    """Migrate the store to this binary's schema version (after a backup)."""
    role = "sloopd store migrate"
    state, lock = _locked_state_dir(repo, state_dir, role)
    try:
        with _one_line(role, state):
            before = db.peek_version(state)
            opened = db.Store.open(state, migrate=True)
            after = opened.version()
            opened.close()
    except StoreTooNew as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        lock.release()
    if before == after:
        click.echo(f"store is at schema version {after}; nothing to do")
    else:
        click.echo(f"store migrated from schema version {before or 0} to {after}")


@store.command()
@_repo
@_state
def backup(repo: Path | None, state_dir: Path | None) -> None:
    """Write a consistent copy of the store into <state dir>/backups."""
    role = "sloopd store backup"
    state, lock = _locked_state_dir(repo, state_dir, role)
    try:
        with _one_line(role, state):
            if db.peek_version(state) is None:
                raise click.ClickException(f"no store in {state}")
            saved = db.backup_store(state)
    finally:
        lock.release()
    click.echo(saved)


@store.command()
@_repo
@_state
@click.argument("backup_file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
def restore(repo: Path | None, state_dir: Path | None, backup_file: Path) -> None:
    """Replace the store with BACKUP_FILE (the current one is backed up first)."""
    role = "sloopd store restore"
    state, lock = _locked_state_dir(repo, state_dir, role)
    try:
        with _one_line(role, state):
            if db.peek_version(state) is not None:
                saved = db.backup_store(state)
                click.echo(f"current store saved as {saved}")
            db.restore(state, backup_file)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        lock.release()
    click.echo(f"store restored from {backup_file}")


@store.command()
@_repo
@_state
def check(repo: Path | None, state_dir: Path | None) -> None:
    """Check the store read-only; exit 1 when a problem is found."""
    target = state_dir or _state_dir_of(repo)
    if not (target / db.STORE_FILE).exists():
        raise click.ClickException(f"no store in {target}")
    role = "sloopd store check"
    state, lock = _locked_state_dir(repo, state_dir, role)
    try:
        with _one_line(role, state):
            problems = db.check(state)
            version = db.peek_version(state)
    finally:
        lock.release()
    for problem in problems:
        click.echo(f"problem: {problem}", err=True)
    if problems:
        sys.exit(1)
    click.echo(
        f"store ok (schema version {version}, this sloopd supports {migrations.SCHEMA_VERSION})"
    )
