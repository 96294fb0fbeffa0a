"""The ``sloopctl`` command line: parse, make one call, render.

Every command sends one request through ``call`` (``post`` sends one per
path), and one handler turns what can go wrong into a message and an exit
code, so scripts can tell "the daemon said no" from "there is no daemon".
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, TypeVar

import click
import orjson

from sloopctl import init_template, locate
from sloopctl.client import Client, ClientError, DaemonNotAnswering, DaemonNotRunning, Reply
from sloopctl.layout import colour_enabled
from sloopctl.render import error_line, render
from sloopctl.when import HELP as WHEN_HELP
from sloopctl.when import now_ms, parse_when
from sloopd import api

EXIT_OK: Final = 0
EXIT_DAEMON_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_RUNNING: Final = 3
EXIT_NOT_ANSWERING: Final = 4
EXIT_PROTOCOL: Final = 5
EXIT_RUN_FAILED: Final = 10
EXIT_RUN_NEEDS_REVIEW: Final = 11
EXIT_RUN_ABORTED: Final = 12
EXIT_INTERRUPTED: Final = 130

EXIT_CODES: Final = (
    (EXIT_OK, "success"),
    (
        EXIT_DAEMON_ERROR,
        "the daemon answered with an error: not_found, conflict, invalid_arguments, "
        "unauthorized, cooldown_active, internal, invalid_request or unknown_verb; "
        "or 'init' refused to overwrite a file",
    ),
    (EXIT_USAGE, "usage error"),
    (EXIT_NOT_RUNNING, "daemon not running: no socket (daemon_unavailable)"),
    (EXIT_NOT_ANSWERING, "daemon not answering: refused, timed out (daemon_unavailable)"),
    (EXIT_PROTOCOL, "protocol version mismatch or unreadable reply"),
    (EXIT_RUN_FAILED, "the run failed (show --follow --quiet)"),
    (EXIT_RUN_NEEDS_REVIEW, "the run needs review (show --follow --quiet)"),
    (EXIT_RUN_ABORTED, "the run was aborted (show --follow --quiet)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)

# Error codes of an answer that mean something other than "the daemon said no".
_ERROR_EXITS: Final = {
    api.ErrorCode.UNSUPPORTED_VERSION: EXIT_PROTOCOL,
    api.ErrorCode.DAEMON_UNAVAILABLE: EXIT_NOT_ANSWERING,
}

# "\b" keeps click from rewrapping the table.
EPILOG: Final = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>3}  " + "\n".join(textwrap.wrap(meaning, 64, subsequent_indent=" " * 7))
    for code, meaning in EXIT_CODES
)

F = TypeVar("F", bound=Callable[..., Any])
# Which socket a verb goes to: see locate for the rules.
Endpoint = Literal["operator", "worker", "show"]


@dataclass(slots=True)
class Options:
    """The global options, set from before or after the command name."""

    json: bool = False
    socket: str | None = None


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Only a given flag sets it, so `sloopctl --json show` is not undone by show.
    if value:
        ctx.ensure_object(Options).json = True


def _set_socket(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.ensure_object(Options).socket = value


def common_options(f: F) -> F:
    """--json and --socket, accepted before or after the command name."""
    f = click.option(
        "--socket",
        metavar="PATH",
        expose_value=False,
        callback=_set_socket,
        help=f"Operator socket (default: ${locate.OPERATOR_SOCKET_ENV}, or this repository's).",
    )(f)
    return click.option(
        "--json",
        is_flag=True,
        expose_value=False,
        callback=_set_json,
        help="Print the daemon's response envelope verbatim, one JSON line.",
    )(f)


def _parse_at(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """--at WHEN, converted to epoch milliseconds here, as the wire wants."""
    if value is None:
        return None
    try:
        return parse_when(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def at_option(f: F) -> F:
    return click.option(
        "--at",
        "at_ms",
        metavar="WHEN",
        callback=_parse_at,
        help=f"Make the trigger due later. {WHEN_HELP}",
    )(f)


def limit_option(f: F) -> F:
    return click.option(
        "--limit", type=click.IntRange(min=1), help="At most N rows (recent runs, matches)."
    )(f)


# --- the one error handler -----------------------------------------------------


def _options() -> Options:
    return click.get_current_context().ensure_object(Options)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(error_line(None, message, _colour(True)), err=True)
    raise click.exceptions.Exit(code)


def _colour(err: bool = False) -> bool:
    return colour_enabled(sys.stderr if err else sys.stdout)


def no_answer(exc: ClientError, json: bool) -> NoReturn:
    """Report a request that got no usable answer, and exit with its code."""
    if json:
        click.echo(orjson.dumps(exc.envelope()))
    else:
        click.echo(error_line(str(exc.code), exc.message, _colour(True)), err=True)
    if isinstance(exc, DaemonNotRunning):
        raise click.exceptions.Exit(EXIT_NOT_RUNNING)
    if isinstance(exc, DaemonNotAnswering):
        raise click.exceptions.Exit(EXIT_NOT_ANSWERING)
    raise click.exceptions.Exit(EXIT_PROTOCOL)


@contextmanager
def connected(endpoint: Endpoint = "operator") -> Iterator[Client]:
    """A client for this invocation; every failure to get an answer exits here."""
    opts = _options()
    try:
        if endpoint == "worker":
            where = locate.worker_endpoint(opts.socket)
        elif endpoint == "show":
            where = locate.show_endpoint(opts.socket)
        else:
            where = locate.operator_endpoint(opts.socket)
    except locate.LocateError as exc:
        fail(str(exc))
    try:
        with Client(where.socket, where.token) as client:
            yield client
    except ClientError as exc:
        no_answer(exc, opts.json)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def answer(verb: str, reply: Reply) -> int:
    """Print one reply and return its exit code."""
    if _options().json:
        click.echo(reply.line)
    elif reply.ok:
        click.echo(render(verb, reply.data, now_ms(), _colour()))
    else:
        message = error_line(reply.error["code"], reply.error["message"], _colour(True))
        click.echo(message, err=True)
    if reply.ok:
        return EXIT_OK
    return _ERROR_EXITS.get(reply.error["code"], EXIT_DAEMON_ERROR)


def call(verb: str, args: dict[str, Any], endpoint: Endpoint = "operator") -> NoReturn:
    """One command, one request: send it, print the answer, exit with its code."""
    with connected(endpoint) as client:
        code = answer(verb, client.call(verb, args))
    raise click.exceptions.Exit(code)


def _present(**args: Any) -> dict[str, Any]:
    """Optional arguments are left out rather than sent as null."""
    return {k: v for k, v in args.items() if v is not None and v is not False}


def _trigger(at_ms: int | None) -> dict[str, int] | None:
    return None if at_ms is None else {"at_ms": at_ms}


def _deprecated(name: str) -> None:
    if not _options().json:
        click.echo(f"warning: 'sloopctl {name}' is deprecated; use 'sloopctl show'", err=True)


# --- commands --------------------------------------------------------------------


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def main() -> None:
    """Sloop's operator client: one request to the repository's daemon per command.

    Start the daemon with 'sloopctl daemon'.  Inside a run (SLOOP_SOCKET and
    SLOOP_TOKEN set) brief, note, verdict and show talk to the run's worker
    socket.
    """


@main.command()
@click.argument("ref", required=False)
@limit_option
@common_options
def show(ref: str | None, limit: int | None) -> None:
    """The dashboard, or a ticket, run, project or ticket pattern."""
    call("show", _present(ref=ref, limit=limit), "show")


@main.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option("--hold", is_flag=True, help="Register the ticket held; queue nothing.")
@click.option("--manual", is_flag=True, help="Queue no trigger; start it with 'run'.")
@at_option
@common_options
def post(paths: tuple[str, ...], hold: bool, manual: bool, at_ms: int | None) -> None:
    """Register or refresh ticket files (one request per file)."""
    worst = EXIT_OK
    with connected() as client:
        for path in paths:
            # Absolute from here: the daemon resolves relative paths against the
            # repository root, not against this shell's directory.  Only the
            # directory is resolved, so a symlinked ticket keeps its own name.
            absolute = os.path.abspath(path)
            absolute = os.path.join(
                os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute)
            )
            args = _present(path=absolute, hold=hold, manual=manual, trigger=_trigger(at_ms))
            worst = max(worst, answer("post", client.call("post", args)))
    raise click.exceptions.Exit(worst)


@main.command()
@click.argument("ref")
@common_options
def hold(ref: str) -> None:
    """Keep a ticket's triggers from being claimed."""
    call("hold", {"ref": ref})


@main.command()
@click.argument("ref")
@common_options
def ready(ref: str) -> None:
    """Release a held ticket."""
    call("ready", {"ref": ref})


@main.command()
@click.argument("ref")
@at_option
@common_options
def run(ref: str, at_ms: int | None) -> None:
    """Queue a run of a ticket now (or --at WHEN), even a --manual one."""
    call("run", _present(ref=ref, trigger=_trigger(at_ms)))


@main.command()
@click.argument("run_ref", metavar="RUN")
@common_options
def abort(run_ref: str) -> None:
    """Stop a run, settle it aborted and hold its ticket."""
    call("abort", {"run": run_ref})


@main.command()
@common_options
def brief() -> None:
    """(Agents) What this stage was assigned."""
    call("brief", {}, "worker")


@main.command()
@click.argument("text")
@common_options
def note(text: str) -> None:
    """(Agents) Leave an advisory note in the run's log."""
    call("note", {"text": text}, "worker")


@main.command()
@click.argument("verdict_value", metavar="pass|fail", type=click.Choice(api.VERDICTS))
@click.option("--reason", help="Why (required from a panel reviewer).")
@click.option("--confidence", type=click.Choice(api.CONFIDENCES), help="Default: medium.")
@common_options
def verdict(verdict_value: str, reason: str | None, confidence: str | None) -> None:
    """(Agents) Report this stage's verdict; the first report wins."""
    call("verdict", _present(verdict=verdict_value, reason=reason, confidence=confidence), "worker")


@main.command()
@common_options
def gc() -> None:
    """Remove the worktrees that settled runs kept for inspection."""
    with connected() as client:
        reply = client.call("gc", {})
    if reply.ok and not _options().json:
        removed = reply.data.get("removed") if isinstance(reply.data, dict) else None
        if isinstance(removed, list) and removed:
            click.echo("removed worktrees of: " + ", ".join(str(r) for r in removed))
        else:
            click.echo("nothing to collect")
        raise click.exceptions.Exit(EXIT_OK)
    raise click.exceptions.Exit(answer("gc", reply))


@main.command()
@click.option("--force", is_flag=True, help="Overwrite an existing sloop.toml.")
def init(force: bool) -> None:
    """Write a commented default sloop.toml and an example ticket.

    Needs no daemon.  sloop.toml goes to the repository root and documents
    every key with its default; the tickets folder gets tickets/example.md
    (left alone when it exists).  Review both, then commit them.
    """
    repo = locate.find_repo()
    if repo is None:
        fail("not inside a git repository: run 'sloopctl init' in the repository to set up")
    config = repo.toplevel / init_template.CONFIG_FILE
    if config.exists() and not force:
        fail(f"{config} exists; pass --force to overwrite it", EXIT_DAEMON_ERROR)
    tickets = repo.toplevel / init_template.TICKETS_FOLDER
    example = tickets / init_template.EXAMPLE_TICKET
    try:
        config.write_text(init_template.SLOOP_TOML, encoding="utf-8")
        tickets.mkdir(parents=True, exist_ok=True)
        wrote_example = not example.exists()
        if wrote_example:
            example.write_text(init_template.EXAMPLE_TICKET_TEXT, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {exc.filename}: {exc.strerror}", EXIT_DAEMON_ERROR)
    click.echo(f"wrote {config}")
    kept = "wrote" if wrote_example else "kept the existing"
    click.echo(f"{kept} {example}")
    click.echo(
        "next: review sloop.toml (agent.command), commit both, then "
        "'sloopctl daemon' and 'sloopctl post "
        f"{Path(init_template.TICKETS_FOLDER, init_template.EXAMPLE_TICKET).as_posix()}'"
    )


@main.command(hidden=True)
@common_options
def status() -> None:
    """Daemon status (deprecated: use show)."""
    _deprecated("status")
    call("status", {})


@main.command(name="list", hidden=True)
@click.argument("ref", required=False)
@limit_option
@common_options
def list_(ref: str | None, limit: int | None) -> None:
    """Ticket rows (deprecated: use show)."""
    _deprecated("list")
    call("list", _present(ref=ref, limit=limit))


@main.command(hidden=True)
@click.argument("run_ref", metavar="RUN")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Give up after N ms.")
@common_options
def wait(run_ref: str, timeout_ms: int | None) -> None:
    """Wait for a run to finish (deprecated: use show)."""
    _deprecated("wait")
    call("wait", _present(run=run_ref, timeout_ms=timeout_ms))


@main.command()
@click.option(
    "--socket-dir",
    metavar="DIR",
    help="Passed to 'sloopd serve' when a daemon is started here.",
)
@common_options
def daemon(socket_dir: str | None) -> None:
    """Start this repository's daemon unless one answers; print its socket.

    The socket path is printed alone (with or without --json), so scripts can
    use SOCK=$(sloopctl daemon).  The daemon logs to daemon.log in the sloop/
    directory of the repository's git common directory.
    """
    # Imported here: only this command spawns processes.
    from sloopctl.start import StartError, start_daemon

    opts = _options()
    try:
        where = locate.operator_endpoint(opts.socket, socket_dir=socket_dir)
    except locate.LocateError as exc:
        fail(str(exc))
    try:
        # Any envelope proves a daemon is there, even one refusing show.
        with Client(where.socket, read_timeout=5.0) as client:
            client.call("show", {})
    except (DaemonNotRunning, DaemonNotAnswering):
        pass  # nobody home (or a stale socket): start one
    except ClientError as exc:
        no_answer(exc, json=False)
    else:
        click.echo(str(where.socket))
        return
    repo = locate.find_repo()
    if repo is None:
        fail("not inside a git repository: nothing to start a daemon for")
    try:
        started = start_daemon(repo, socket_dir)
    except StartError as exc:
        tail = f"\n{exc.log_tail}" if exc.log_tail else ""
        click.echo(error_line(None, exc.message, _colour(True)) + tail, err=True)
        raise click.exceptions.Exit(EXIT_DAEMON_ERROR) from None
    click.echo(started.socket)


# logs and events (sloopctl/feeds_cli.py); pause, resume and show --follow
# (sloopctl/follow.py).  Both import this module, so they are imported last.
from sloopctl import feeds_cli, follow  # noqa: E402

for _command in (*feeds_cli.COMMANDS, *follow.COMMANDS):
    main.add_command(_command)
follow.extend_show(show)


from sloopctl.doctor import doctor  # noqa: E402  (its own module; registered here)

main.add_command(doctor)
