"""The ``sloopctl`` command line: one command per verb, registered on ``main``.

Each command parses its arguments and makes one call through ``invoke``;
rendering lives in ``render``; ``show`` and its following in ``follow``, feeds in
``feeds_cli``.
"""

from __future__ import annotations

import getpass
import shlex
from pathlib import Path

import click

from sloopctl import diff_cli, feeds_cli, follow, init_template, locate, ticket_paths
from sloopctl.client import (
    Client,
    ClientError,
    DaemonBusy,
    DaemonHungUp,
    DaemonNotAnswering,
    DaemonNotRunning,
)
from sloopctl.doctor import doctor
from sloopctl.invoke import (
    EPILOG,
    EXIT_DAEMON_ERROR,
    EXIT_OK,
    answer,
    at_option,
    call,
    colour,
    common_options,
    connected,
    deprecated,
    fail,
    limit_option,
    no_answer,
    options,
    present_args,
    refuse_inside_run,
    say_error,
    trigger_arg,
)
from sloopctl.render import error_line
from sloopctl.safe_text import clean
from sloopctl.web.command import web
from sloopd.wire import api


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
# The installed distribution's version, so a bug report names the client it came from.
@click.version_option(package_name="sloop", prog_name="sloopctl", message="%(prog)s %(version)s")
@common_options
def main() -> None:
    """Sloop's operator client: one request to the repository's daemon per command.

    Start the daemon with 'sloopctl daemon'.  Inside a run (SLOOP_SOCKET and
    SLOOP_TOKEN, or the file SLOOP_TOKEN_FILE names, set) brief, note, verdict
    and show talk to the run's worker socket.
    """


@main.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option("--hold", is_flag=True, help="Register the ticket held; queue nothing.")
@click.option("--manual", is_flag=True, help="Queue no trigger; start it with 'run'.")
@at_option
@common_options
def post(paths: tuple[str, ...], hold: bool, manual: bool, at_ms: int | None) -> None:
    """Register or refresh ticket files (one request per file).

    \b
    A ticket is a Markdown file inside the repository, outside its .git and the
    state directory (symlinks resolved), at most repo.max_ticket_bytes (1 MiB by
    default); docs/tickets.md.

    \b
    Each PATH is sent relative to its repository's root, with the SHA-256 of
    the file: a daemon that sees the repository at another path (a container's
    /repo) finds it, and one serving another repository refuses it.
    """
    worst = EXIT_OK
    with connected() as client:
        for path in paths:
            # Relative to the file's repository root, with its digest: the daemon
            # may see the repository elsewhere (sloopctl.ticket_paths).
            sent, sha256 = ticket_paths.posted(path)
            args = present_args(
                path=sent, sha256=sha256, hold=hold, manual=manual, trigger=trigger_arg(at_ms)
            )
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
    call("run", present_args(ref=ref, trigger=trigger_arg(at_ms)))


@main.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--reason", metavar="TEXT", help="Why, kept in the run's reason.")
@common_options
def abort(run_ref: str, reason: str | None) -> None:
    """Stop a run, settle it aborted and hold its ticket.

    A merge that has already started is let finish: the run then reads merged.
    """
    call("abort", present_args(run=run_ref, reason=reason))


def local_user() -> str | None:
    """Who is resolving: the local user name (``$LOGNAME``, ``$USER``, else the
    password database), or None when none can be found."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError):
        return None


@main.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--merged", is_flag=True, help="Its work reached main by hand.")
@click.option("--dismissed", is_flag=True, help="Its work is not wanted.")
@click.option("--reason", metavar="TEXT", help="Why, kept with the resolution.")
@common_options
def resolve(run_ref: str, merged: bool, dismissed: bool, reason: str | None) -> None:
    """Resolve a needs_review run: --merged (by hand) or --dismissed.

    The run keeps its state and gains a resolution (what, who, why, when); its
    ticket becomes merged or failed, and the run leaves Needs attention.
    """
    if merged == dismissed:
        fail("give one of --merged or --dismissed")
    resolution = "merged" if merged else "dismissed"
    call(
        "resolve",
        present_args(run=run_ref, resolution=resolution, reason=reason, by=local_user()),
    )


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
    call(
        "verdict",
        present_args(verdict=verdict_value, reason=reason, confidence=confidence),
        "worker",
    )


@main.command()
@common_options
def gc() -> None:
    """Remove the worktrees that settled runs kept for inspection."""
    with connected() as client:
        reply = client.call("gc", {})
    if reply.ok and not options().json:
        removed = reply.data.get("removed") if isinstance(reply.data, dict) else None
        if isinstance(removed, list) and removed:
            click.echo("removed worktrees of: " + ", ".join(str(r) for r in removed))
        else:
            click.echo("nothing to collect")
        raise click.exceptions.Exit(EXIT_OK)
    raise click.exceptions.Exit(answer("gc", reply))


@main.command()
@click.option("--force", is_flag=True, help="Overwrite an existing sloop.toml.")
@click.option(
    "--agent",
    "agent",
    type=click.Choice(init_template.AGENT_PRESETS),
    default="claude",
    show_default=True,
    help="The agent preset [agent] uses: Claude Code, Codex, Gemini CLI, or the bundled "
    "example agent (no vendor account needed).",
)
@click.option(
    "--test-command",
    "test_command",
    metavar="CMD",
    help="Your test command (split like a shell would, run without one, e.g. 'make test'): "
    "the merge queue's gate stage after sync runs it.  Without it that stage is written "
    "commented out.",
)
def init(force: bool, agent: str, test_command: str | None) -> None:
    """Write a commented default sloop.toml and an example ticket.

    Needs no daemon.  sloop.toml goes to the repository root and documents
    every key with its default; the tickets folder gets tickets/example.md
    (left alone when it exists).  Review both, then commit them.
    """
    try:
        test_argv = shlex.split(test_command) if test_command is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--test-command") from exc
    if test_argv is not None and (not test_argv or not all(test_argv)):
        raise click.BadParameter("needs a command", param_hint="--test-command")
    repo = locate.find_repo()
    if repo is None:
        fail("not inside a git repository: run 'sloopctl init' in the repository to set up")
    config = repo.toplevel / init_template.CONFIG_FILE
    if config.exists() and not force:
        fail(f"{config} exists; pass --force to overwrite it", EXIT_DAEMON_ERROR)
    tickets = repo.toplevel / init_template.TICKETS_FOLDER
    example = tickets / init_template.EXAMPLE_TICKET
    try:
        config.write_text(init_template.sloop_toml(agent, test_argv), encoding="utf-8")
        tickets.mkdir(parents=True, exist_ok=True)
        wrote_example = not example.exists()
        if wrote_example:
            example.write_text(init_template.EXAMPLE_TICKET_TEXT, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {exc.filename}: {exc.strerror}", EXIT_DAEMON_ERROR)
    click.echo(f"wrote {config}")
    kept = "wrote" if wrote_example else "kept the existing"
    click.echo(f"{kept} {example}")
    gate = (
        f"the merge queue's gate runs {shlex.join(test_argv)!r}"
        if test_argv
        else "put your test command in the gate stage after sync"
    )
    click.echo(
        f"next: review sloop.toml (agent preset {agent!r}; {gate}), commit both, then "
        "'sloopctl daemon' and 'sloopctl post "
        f"{Path(init_template.TICKETS_FOLDER, init_template.EXAMPLE_TICKET).as_posix()}'"
    )


@main.command(hidden=True)
@common_options
def status() -> None:
    """Daemon status (deprecated: use show)."""
    deprecated("status")
    call("status", {})


@main.command(name="list", hidden=True)
@click.argument("ref", required=False)
@limit_option
@common_options
def list_(ref: str | None, limit: int | None) -> None:
    """Ticket rows (deprecated: use show)."""
    deprecated("list")
    call("list", present_args(ref=ref, limit=limit))


@main.command(hidden=True)
@click.argument("run_ref", metavar="RUN")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Give up after N ms.")
@common_options
def wait(run_ref: str, timeout_ms: int | None) -> None:
    """Wait for a run to finish (deprecated: use show)."""
    deprecated("wait")
    call("wait", present_args(run=run_ref, timeout_ms=timeout_ms))


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

    opts = options()
    refuse_inside_run(opts.socket)  # an agent must never start a daemon of its own
    try:
        where = locate.operator_endpoint(opts.socket, socket_dir=socket_dir)
    except locate.LocateError as exc:
        fail(str(exc))
    try:
        # Any envelope proves a daemon is there, even one refusing show.
        with Client(where.socket, read_timeout=5.0) as client:
            client.call("show", {})
    except DaemonBusy:
        click.echo(str(where.socket))  # alive, only too busy to accept just now
        return
    except DaemonHungUp as exc:
        no_answer(exc, json=False)  # a daemon is there: a second one could not start
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
        # The log quotes tickets and agents too.
        log_tail = exc.log_tail if opts.raw else clean(exc.log_tail)
        tail = f"\n{log_tail}" if log_tail else ""
        say_error(error_line(None, exc.message, colour(True)) + tail)
        raise click.exceptions.Exit(EXIT_DAEMON_ERROR) from None
    click.echo(started.socket)


# Where the other commands live: logs and events in feeds_cli.py; show (with
# --follow), pause and resume in follow.py; doctor in doctor.py; diff in diff_cli.py;
# web in web/command.py, which imports the gateway only when it runs.
for _command in (*feeds_cli.COMMANDS, *follow.COMMANDS, doctor, *diff_cli.COMMANDS, web):
    main.add_command(_command)
