"""The commands that read feeds and follow runs: ``logs``, ``events``, ``show --follow``.

Also ``pause`` and ``resume``, the gate's two verbs.  Every request is still
one client call, made on the one connection ``cli.connected`` keeps open for
the whole command, and every failure goes through the same handler as the
one-shot commands (``cli.connected`` for no answer, ``cli.answer`` for an
error answer), so the messages and exit codes are the same.

A follower derives nothing: ``logs --follow`` stops on the first page that is
both ``complete`` and ``terminal`` (the protocol text's loop), ``show
--follow`` on the first answer whose run is ``terminal``, and the run's
``state`` alone picks the exit code.

``sloopctl.cli`` imports this module at its end and registers the commands,
so import ``sloopctl.cli`` (not this module) first.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, TextIO

import click
import orjson

from sloopctl.cli import (
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_RUN_ABORTED,
    EXIT_RUN_FAILED,
    EXIT_RUN_NEEDS_REVIEW,
    EXIT_USAGE,
    Options,
    answer,
    common_options,
    connected,
    fail,
)
from sloopctl.client import Client, Reply
from sloopctl.layout import Paint, colour_enabled, painter, text
from sloopctl.render import ends, paint_state, stages_summary, waiting_text
from sloopctl.when import now_ms

# How long a follower waits before asking again once it has caught up: the
# shortest wait right after news, growing while nothing happens.
POLL_MIN_S: Final = 0.2
POLL_MAX_S: Final = 0.5
POLL_GROWTH: Final = 1.5

# The exit code of ``show --follow`` for each terminal run state (0 only for merged).
OUTCOME_EXITS: Final[Mapping[str, int]] = {
    "merged": EXIT_OK,
    "failed": EXIT_RUN_FAILED,
    "needs_review": EXIT_RUN_NEEDS_REVIEW,
    "aborted": EXIT_RUN_ABORTED,
}

_STREAM_STYLE: Final = {"stderr": "yellow", "note": "cyan", "system": "dim"}

Sleep = Callable[[float], None]


def _json() -> bool:
    return click.get_current_context().ensure_object(Options).json


def _present(**args: Any) -> dict[str, Any]:
    """Optional arguments are left out rather than sent as null."""
    return {k: v for k, v in args.items() if v is not None}


def _data(reply: Reply, *fields: str) -> dict[str, Any]:
    """A page's data; a page without the fields the loop relies on is unreadable."""
    data = reply.data
    if not isinstance(data, dict) or any(f not in data for f in fields):
        fail(f"unreadable reply: the page lacks one of {', '.join(fields)}", EXIT_PROTOCOL)
    return data


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


class Pace:
    """The wait between polls once caught up: short after news, longer while idle."""

    def __init__(self) -> None:
        self.delay = POLL_MIN_S

    def after(self, news: bool) -> float:
        if news:
            self.delay = POLL_MIN_S
            return self.delay
        current = self.delay
        self.delay = min(POLL_MAX_S, self.delay * POLL_GROWTH)
        return current


# --- rendering (pure) -----------------------------------------------------------


def record_line(record: Mapping[str, Any], paint: Paint) -> str:
    """``[stage#attempt stream] text``; only the stream is painted, stdout never."""
    stage, attempt = record.get("stage"), record.get("attempt")
    where = text(stage) + ("" if attempt is None else f"#{attempt}")
    stream = text(record.get("stream"))
    style = _STREAM_STYLE.get(stream, "")
    label = paint(stream, style) if style else stream
    body = record.get("text")
    return f"[{where} {label}] {body if isinstance(body, str) else text(body)}"


def elided_line(count: int) -> str:
    return f"… {count} earlier record{'' if count == 1 else 's'} elided"


def _brief(value: Any) -> str:
    if isinstance(value, str):
        plain = value and not any(c.isspace() for c in value)
        return value if plain else orjson.dumps(value).decode()
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return text(value)


def event_line(event: Mapping[str, Any]) -> str:
    """``time kind ticket run data`` with the data as ``key=value`` pairs (nulls left out)."""
    at_ms = event.get("at_ms")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at_ms / 1000))
        if isinstance(at_ms, int) and not isinstance(at_ms, bool)
        else "-"
    )
    data = event.get("data")
    summary = (
        " ".join(f"{k}={_brief(v)}" for k, v in data.items() if v is not None)
        if isinstance(data, dict)
        else _brief(data)
    )
    columns = [
        when,
        text(event.get("kind")).ljust(14),
        text(event.get("ticket")).ljust(5),
        text(event.get("run")).ljust(5),
        summary,
    ]
    return " ".join(columns).rstrip()


def gate_line(gate: Any, now: int, paint: Paint) -> str:
    g = gate if isinstance(gate, dict) else {}
    words = "gate " + paint_state(g.get("state"), paint) + ends(g.get("until_ms"), now)
    return words + (f" ({g['reason']})" if g.get("reason") else "")


def outcome_line(run: Mapping[str, Any], paint: Paint) -> str:
    """``R3 merged``, ``R3 failed: <reason>``."""
    line = f"{text(run.get('id'))} {paint_state(run.get('state'), paint)}"
    return line + (f": {run['reason']}" if run.get("reason") else "")


def progress_line(run: Mapping[str, Any]) -> str:
    """The one-line live view: ``R3 running · implement✓ test▶ sync· merge·``."""
    stall = " (stalled)" if run.get("stall") else ""
    stages = stages_summary(run.get("stages"))
    return f"{text(run.get('id'))} {text(run.get('state'))}{stall}" + (
        f" · {stages}" if stages else ""
    )


StageKey = tuple[str, int]


def stage_states(run: Mapping[str, Any]) -> dict[StageKey, dict[str, Any]]:
    """Stage executions by (stage, attempt); rows the walk has not reached are left out."""
    found = {}
    for row in _rows(run.get("stages")):
        attempt = row.get("attempt")
        if row.get("state") != "pending" and isinstance(attempt, int) and attempt > 0:
            found[(text(row.get("stage")), attempt)] = row
    return found


def transitions(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """One line per change between two views of a run: its state, then each stage execution."""
    run_id = text(after.get("id"))
    lines = []
    if before is None or before.get("state") != after.get("state"):
        lines.append(f"{run_id} {text(after.get('state'))}")
    old = stage_states(before or {})
    for (stage, attempt), row in stage_states(after).items():
        previous = old.get((stage, attempt))
        if previous is not None and previous.get("state") == row.get("state"):
            continue
        line = f"{run_id} {stage}#{attempt} {text(row.get('state'))}"
        if row.get("state") == "failed" and row.get("reason"):
            line += f": {row['reason']}"
        lines.append(line)
    # The run's settling comes after its last stage's.
    if lines and after.get("terminal") is True and lines[0] == f"{run_id} {after.get('state')}":
        lines.append(lines.pop(0))
    return lines


# --- logs -------------------------------------------------------------------------


def read_logs(
    client: Client, base: dict[str, Any], tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page (and with ``follow`` poll) a run's log; the exit code."""
    as_json = _json()
    paint = painter(colour_enabled(sys.stdout))
    args = {**base, "tail": tail} if tail is not None else dict(base)
    pace = Pace()
    first = True
    while True:
        reply = client.call("logs", args)
        if not reply.ok:
            return answer("logs", reply)
        page = _data(reply, "records", "next_cursor", "complete")
        records = _rows(page["records"])
        complete = page["complete"] is True
        done = complete and (page.get("terminal") is True or not follow)
        if as_json:
            # While following, a page that brought nothing new is left out.
            if records or done or first or not follow:
                click.echo(reply.line)
        else:
            elided = page.get("elided")
            if isinstance(elided, int) and elided > 0:
                click.echo(elided_line(elided), err=True)
            for record in records:
                click.echo(record_line(record, paint))
        if done:
            return EXIT_OK
        args = {**base, "after": page["next_cursor"]}
        first = False
        if complete:  # caught up with a run still in flight
            sleep(pace.after(bool(records)))


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--stage",
    metavar="STAGE[#N]",
    help="Only this stage: every execution of it, or with #N its Nth execution.",
)
@click.option(
    "--tail",
    type=click.IntRange(min=1),
    metavar="N",
    help="Only the last N matching records (the earlier ones are counted on stderr).",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep reading until the run has settled and every record was printed.",
)
@common_options
def logs(run_ref: str, stage: str | None, tail: int | None, follow: bool) -> None:
    """A run's output, one '[stage#attempt stream] text' line per record.

    RUN is a run id or alias.  Without --follow it prints what is there now;
    with --follow it keeps polling and exits 0 once the run has settled and
    its last record was printed.
    """
    base = _present(run=run_ref, stage=stage)
    with connected() as client:
        code = read_logs(client, base, tail, follow, time.sleep)
    raise click.exceptions.Exit(code)


# --- events -----------------------------------------------------------------------


def read_events(
    client: Client, scope: str | None, tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page the activity feed up to its end (with ``follow``: for ever); the exit code."""
    as_json = _json()
    base = _present(scope=scope)
    args = {**base, "tail": tail} if tail is not None else dict(base)
    pace = Pace()
    first = True
    while True:
        reply = client.call("events", args)
        if not reply.ok:
            return answer("events", reply)
        page = _data(reply, "events", "next_cursor")
        events = _rows(page["events"])
        if as_json:
            if events or first or not follow:
                click.echo(reply.line)
        else:
            for event in events:
                click.echo(event_line(event))
        # The feed has no "complete": an empty page says the end was reached,
        # and a tail page ends at the newest event by definition.
        caught_up = not events or (first and tail is not None)
        if caught_up and not follow:
            return EXIT_OK
        args = {**base, "after": page["next_cursor"]}
        first = False
        if caught_up:
            sleep(pace.after(bool(events)))


@click.command()
@click.option(
    "--scope",
    metavar="REF",
    help="Only the events of a ticket (with its runs), a run, a project or a ticket pattern.",
)
@click.option("--tail", type=click.IntRange(min=1), metavar="N", help="Start at the newest N.")
@click.option("-f", "--follow", is_flag=True, help="Keep polling for new events until Ctrl-C.")
@common_options
def events(scope: str | None, tail: int | None, follow: bool) -> None:
    """The activity feed: one 'time kind ticket run data' line per event.

    Without --scope it includes the repository-wide events (daemon started
    or stopped, gate changes); with one, only the scope's own.
    """
    with connected() as client:
        code = read_events(client, scope, tail, follow, time.sleep)
    raise click.exceptions.Exit(code)


# --- pause, resume ----------------------------------------------------------------


def gate_call(verb: str, args: dict[str, Any]) -> NoReturn:
    with connected() as client:
        reply = client.call(verb, args)
    if reply.ok and not _json() and isinstance(reply.data, dict):
        click.echo(gate_line(reply.data.get("gate"), now_ms(), painter(colour_enabled(sys.stdout))))
        raise click.exceptions.Exit(EXIT_OK)
    raise click.exceptions.Exit(answer(verb, reply))


@click.command()
@click.option("--reason", metavar="TEXT", help="Why, shown with the gate.")
@common_options
def pause(reason: str | None) -> None:
    """Close the gate: no trigger is claimed until 'resume' (runs in flight go on)."""
    gate_call("pause", _present(reason=reason))


@click.command()
@common_options
def resume() -> None:
    """Reopen the gate, ending a pause (or a cooldown) early."""
    gate_call("resume", {})


# --- show --follow ----------------------------------------------------------------


class Progress:
    """Stage transitions on stderr: redrawn in place on a terminal, else one line each."""

    def __init__(self, stream: TextIO, live: bool) -> None:
        self.stream = stream
        self.live = live
        self.drawn = ""
        self.seen: Mapping[str, Any] | None = None

    @classmethod
    def for_stderr(cls) -> Progress:
        isatty = getattr(sys.stderr, "isatty", None)
        live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        return cls(sys.stderr, live)

    def show(self, run: Mapping[str, Any]) -> None:
        if self.live:
            width = max(20, shutil.get_terminal_size().columns - 1)
            line = progress_line(run)[:width]
            if line != self.drawn:
                self.stream.write("\r\x1b[K" + line)
                self.stream.flush()
                self.drawn = line
        else:
            for line in transitions(self.seen, run):
                self.stream.write(line + "\n")
            self.stream.flush()
        self.seen = run

    def say(self, line: str) -> None:
        self.clear()
        self.stream.write(line + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.live and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = ""


class RunFollower:
    """Polls ``show`` until a run is terminal; a ticket reference waits for its newest run."""

    def __init__(
        self, client: Client, ref: str, quiet: bool, as_json: bool, progress: Progress, sleep: Sleep
    ) -> None:
        self.client = client
        self.ref = ref
        self.quiet = quiet
        self.as_json = as_json
        self.progress = progress
        self.sleep = sleep
        self.skip: str | None = None  # a ticket's settled run that a queued trigger supersedes
        self.looked = False
        self.printed: Any = None  # what the last printed --json envelope showed
        self.waiting = ""

    def run(self) -> int:
        target = self.ref
        try:
            while True:
                reply = self.client.call("show", {"ref": target})
                if not reply.ok:
                    self.progress.clear()
                    return answer("show", reply)
                data = _data(reply, "kind")
                value = data.get("value")
                value = value if isinstance(value, dict) else {}
                if data["kind"] == "ticket":
                    self.emit(reply, ("ticket", value.get("state"), value.get("waiting")))
                    chosen = self.pick(value)
                    if chosen is not None:
                        target = chosen
                        continue
                    self.wait_for_run(value)
                elif data["kind"] == "run":
                    self.emit(reply, ("run", sorted(stage_states(value)), _states(value)))
                    if not self.quiet and not self.as_json:
                        self.progress.show(value)
                    if value.get("terminal") is True:
                        return self.settled(value)
                else:
                    fail(
                        f"'{self.ref}' names no run or ticket (the daemon answered with "
                        f"{text(data['kind'])}); --follow follows one run",
                        EXIT_USAGE,
                    )
                self.sleep(POLL_MIN_S)
        finally:
            self.progress.clear()

    def pick(self, ticket: Mapping[str, Any]) -> str | None:
        """The run to follow: the ticket's newest, unless a queued trigger will start another."""
        runs = _rows(ticket.get("runs"))  # newest attempt first
        newest = runs[0] if runs else None
        if not self.looked:
            self.looked = True
            if newest is not None and newest.get("terminal") is True and ticket.get("trigger"):
                self.skip = text(newest.get("id"))
        if newest is None or text(newest.get("id")) == self.skip:
            return None
        return text(newest.get("id"))

    def wait_for_run(self, ticket: Mapping[str, Any]) -> None:
        if self.quiet or self.as_json:
            return
        why = waiting_text(ticket.get("waiting"), now_ms())
        line = f"{text(ticket.get('id'))} waiting for a run" + (f": {why}" if why else "")
        if line != self.waiting:
            self.waiting = line
            self.progress.say(line)

    def emit(self, reply: Reply, view: Any) -> None:
        """With --json, each envelope that shows a change (the last one always does)."""
        if self.as_json and not self.quiet and view != self.printed:
            self.printed = view
            click.echo(reply.line)

    def settled(self, run: Mapping[str, Any]) -> int:
        self.progress.clear()
        if not self.quiet and not self.as_json:
            click.echo(outcome_line(run, painter(colour_enabled(sys.stdout))))
        return OUTCOME_EXITS.get(text(run.get("state")), EXIT_RUN_FAILED)


def _states(run: Mapping[str, Any]) -> tuple[Any, ...]:
    rows = stage_states(run)
    return (run.get("state"), tuple(rows[k].get("state") for k in sorted(rows)))


def follow_run(ref: str | None, quiet: bool) -> NoReturn:
    if ref is None:
        fail("--follow needs a run or ticket reference: sloopctl show REF --follow")
    with connected("show") as client:
        follower = RunFollower(client, ref, quiet, _json(), Progress.for_stderr(), time.sleep)
        code = follower.run()
    raise click.exceptions.Exit(code)


FOLLOW_HELP: Final = (
    "With --follow, REF is a run, or a ticket whose newest run is followed (waiting for "
    "one to be claimed): stage transitions go to stderr, the outcome to stdout, and the "
    "exit code is 0 only for merged (10 failed, 11 needs_review, 12 aborted)."
)


def extend_show(command: click.Command) -> None:
    """Give the existing ``show`` command --follow and --quiet without touching its body."""
    original = command.callback
    assert original is not None
    at = next(i for i, p in enumerate(command.params) if p.name == "limit") + 1
    command.params[at:at] = [
        click.Option(
            ["-f", "--follow"], is_flag=True, help="Follow the run until it settles (CI gate)."
        ),
        click.Option(
            ["-q", "--quiet"], is_flag=True, help="With --follow: print nothing but errors."
        ),
    ]

    @functools.wraps(original)
    def callback(*, follow: bool, quiet: bool, **params: Any) -> Any:
        if follow:
            if params.get("limit") is not None:
                fail("--limit does not go with --follow")
            follow_run(params.get("ref"), quiet)
        if quiet:
            fail("--quiet only goes with --follow")
        return original(**params)

    command.callback = callback
    command.help = f"{command.help or ''}\n\n{FOLLOW_HELP}"


# Registered by sloopctl.cli (typed here: the import cycle hides the decorators' types).
COMMANDS: Final[tuple[click.Command, ...]] = (logs, events, pause, resume)
