"""How a ``sloopctl`` command calls the daemon: options, one call, exit codes.

Every command sends one request through ``call`` (``post`` sends one per
path), and ``no_answer``/``answer`` turn what can go wrong into a message and
an exit code, so scripts can tell "the daemon said no" from "there is no
daemon".  The command modules (``cli``, ``feeds_cli``, ``follow``) import this
one and nothing imports them back.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn, TypeVar

import click
import orjson

from sloopctl import locate
from sloopctl.client import Client, ClientError, DaemonNotAnswering, DaemonNotRunning, Reply
from sloopctl.fold import fold_for
from sloopctl.layout import colour_enabled
from sloopctl.render import error_line, render
from sloopctl.when import HELP as WHEN_HELP
from sloopctl.when import now_ms, parse_when
from sloopd.wire import api

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
    (
        EXIT_NOT_ANSWERING,
        "daemon not answering: refused, busy, hung up, timed out (daemon_unavailable)",
    ),
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
    raw: bool = False


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Only a given flag sets it, so `sloopctl --json show` is not undone by show.
    if value:
        ctx.ensure_object(Options).json = True


def _set_raw(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Options).raw = True
        # click.echo drops CSI sequences when stdout is no terminal; --raw means
        # as stored.  A command's context inherits this from the group's.
        ctx.color = True


def _set_socket(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.ensure_object(Options).socket = value


RAW_HELP: Final = (
    "Print agents' and tickets' text as stored, terminal control sequences included. "
    "By default escape sequences are removed and other control characters, bidi "
    "overrides included, are shown as \N{REPLACEMENT CHARACTER}, on a terminal or not."
)


def common_options(f: F) -> F:
    """--json, --raw and --socket, accepted before or after the command name."""
    f = click.option("--raw", is_flag=True, expose_value=False, callback=_set_raw, help=RAW_HELP)(f)
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


def options() -> Options:
    return click.get_current_context().ensure_object(Options)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    say_error(error_line(None, message, colour(True)))
    raise click.exceptions.Exit(code)


def say_error(line: str) -> None:
    """An error on standard error, folded at words on a terminal (sloopctl.fold)."""
    click.echo(fold_for(sys.stderr, line), err=True)


def colour(err: bool = False) -> bool:
    return colour_enabled(sys.stderr if err else sys.stdout)


def no_answer(exc: ClientError, json: bool) -> NoReturn:
    """Report a request that got no usable answer, and exit with its code."""
    if json:
        click.echo(orjson.dumps(exc.envelope()))
    else:
        say_error(error_line(str(exc.code), exc.message, colour(True)))
    if isinstance(exc, DaemonNotRunning):
        raise click.exceptions.Exit(EXIT_NOT_RUNNING)
    if isinstance(exc, DaemonNotAnswering):
        raise click.exceptions.Exit(EXIT_NOT_ANSWERING)
    raise click.exceptions.Exit(EXIT_PROTOCOL)


WORKER_SERVES: Final = "the worker socket serves brief, show, note and verdict"


def refuse_inside_run(socket: str | None) -> None:
    """Inside a run, an operator command without a socket named for it stops here.

    The run's agent has no operator socket (the sandbox hides it, and the daemon
    refuses every connection from inside a run), so looking for one could only end
    in "start it with 'sloopctl daemon'", or start one: wrong advice for an agent.
    An explicit ``--socket`` or ``$SLOOP_OPERATOR_SOCKET`` is still tried.
    """
    if socket or os.environ.get(locate.OPERATOR_SOCKET_ENV) or not locate.in_run():
        return
    name = click.get_current_context().info_name or "this"
    fail(
        f"inside a run sloopctl talks to the run's worker socket: {WORKER_SERVES}; "
        f"'{name}' is an operator verb, for people (why an earlier execution was sent "
        "back is in 'sloopctl brief', under feedback)"
    )


@contextmanager
def connected(endpoint: Endpoint = "operator") -> Iterator[Client]:
    """A client for this invocation; every failure to get an answer exits here."""
    opts = options()
    if endpoint == "operator":
        refuse_inside_run(opts.socket)
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
        # --json prints reply lines as received; --raw keeps their text as stored.
        with Client(where.socket, where.token, verbatim=opts.raw or opts.json) as client:
            yield client
    except ClientError as exc:
        no_answer(exc.for_worker() if where.token is not None else exc, opts.json)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def answer(verb: str, reply: Reply) -> int:
    """Print one reply and return its exit code."""
    if options().json:
        click.echo(reply.line)
    elif reply.ok:
        click.echo(render(verb, reply.data, now_ms(), colour()))
    else:
        say_error(error_line(reply.error["code"], reply.error["message"], colour(True)))
    if reply.ok:
        return EXIT_OK
    return _ERROR_EXITS.get(reply.error["code"], EXIT_DAEMON_ERROR)


def call(verb: str, args: dict[str, Any], endpoint: Endpoint = "operator") -> NoReturn:
    """One command, one request: send it, print the answer, exit with its code."""
    with connected(endpoint) as client:
        code = answer(verb, client.call(verb, args))
    raise click.exceptions.Exit(code)


def present_args(**args: Any) -> dict[str, Any]:
    """Optional arguments are left out rather than sent as null."""
    return {k: v for k, v in args.items() if v is not None and v is not False}


def trigger_arg(at_ms: int | None) -> dict[str, int] | None:
    return None if at_ms is None else {"at_ms": at_ms}


def deprecated(name: str) -> None:
    if not options().json:
        click.echo(f"warning: 'sloopctl {name}' is deprecated; use 'sloopctl show'", err=True)


# --- commands --------------------------------------------------------------------
