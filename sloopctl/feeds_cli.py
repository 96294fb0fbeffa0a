"""The commands that read the daemon's feeds: ``logs`` and ``events``.

Every request is still one client call, made on the one connection
``cli.connected`` keeps open for the whole command, and every failure goes
through the same handler as the one-shot commands (``cli.connected`` for no
answer, ``cli.answer`` for an error answer), so the messages and exit codes
are the same.

A follower derives nothing: ``logs --follow`` stops on the first page that is
both ``complete`` and ``terminal`` (the protocol text's loop).

``sloopctl.cli`` imports this module at its end and registers ``COMMANDS``,
so import ``sloopctl.cli`` (not this module) first.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, Final

import click
import orjson

from sloopctl import streams
from sloopctl.client import Client
from sloopctl.invoke import EXIT_OK, answer, common_options, connected, options
from sloopctl.layout import Paint, colour_enabled, painter, text
from sloopctl.polling import FeedWait, Pace, Sleep, json_wanted, page_data, present, rows

_STREAM_STYLE: Final = {"stderr": "yellow", "note": "cyan", "system": "dim"}


# --- rendering (pure) -----------------------------------------------------------


def record_line(record: Mapping[str, Any], paint: Paint, *, events: bool = True) -> str:
    """``[stage#attempt stream] text``; only the stream is painted, stdout never.

    With ``events``, an agent CLI's JSON event on stdout is shown as a person reads
    it (``sloopctl.streams``); ``--raw`` turns that off and shows the stored JSON.
    """
    stage, attempt = record.get("stage"), record.get("attempt")
    where = text(stage) + ("" if attempt is None else f"#{attempt}")
    stream = text(record.get("stream"))
    style = _STREAM_STYLE.get(stream, "")
    label = paint(stream, style) if style else stream
    body = record.get("text")
    if isinstance(body, str):
        shown = streams.readable(body) if events and stream == "stdout" else None
        if shown is not None:
            # Several lines (an assistant turn) keep the prefix on each.
            return "\n".join(f"[{where} {label}] {part}" for part in shown.splitlines() or [""])
        return f"[{where} {label}] {body}"
    return f"[{where} {label}] {text(body)}"


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


# --- logs -------------------------------------------------------------------------


def read_logs(
    client: Client, base: dict[str, Any], tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page (and with ``follow`` poll) a run's log; the exit code."""
    as_json = json_wanted()
    paint = painter(colour_enabled(sys.stdout))
    args = {**base, "tail": tail} if tail is not None else dict(base)
    pace, poll = Pace(), FeedWait()
    first, caught_up = True, False
    while True:
        reply = client.call("logs", poll.args(args, caught_up))
        if poll.refused(reply):
            continue  # an older daemon: the same request without wait_ms, then polls
        if not reply.ok:
            return answer("logs", reply)
        page = page_data(reply, "records", "next_cursor", "complete")
        records = rows(page["records"])
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
            readable_events = not options().raw
            for record in records:
                click.echo(record_line(record, paint, events=readable_events))
        if done:
            return EXIT_OK
        args = {**base, "after": page["next_cursor"]}
        first = False
        # Caught up with a run still in flight: the next request waits for news
        # in the daemon (long-poll) or, with an older daemon, after a pause here.
        caught_up = complete
        if complete and not poll.supported:
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
    with --follow it keeps reading and exits 0 once the run has settled and
    its last record was printed.  Once caught up, each request waits in the
    daemon until a new line is stored (long-poll), so a line shows as soon as
    it is printed; an older daemon is polled instead.
    """
    base = present(run=run_ref, stage=stage)
    with connected() as client:
        code = read_logs(client, base, tail, follow, time.sleep)
    raise click.exceptions.Exit(code)


# --- events -----------------------------------------------------------------------


def read_events(
    client: Client, scope: str | None, tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page the activity feed up to its end (with ``follow``: for ever); the exit code."""
    as_json = json_wanted()
    base = present(scope=scope)
    args = {**base, "tail": tail} if tail is not None else dict(base)
    pace, poll = Pace(), FeedWait()
    first, waiting = True, False
    while True:
        reply = client.call("events", poll.args(args, waiting))
        if poll.refused(reply):
            continue  # an older daemon: the same request without wait_ms, then polls
        if not reply.ok:
            return answer("events", reply)
        page = page_data(reply, "events", "next_cursor")
        events = rows(page["events"])
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
        # Following, every later request may wait in the daemon: with news it is
        # answered at once anyway, so a full page costs no extra round trip.
        first, waiting = False, follow
        if caught_up and not poll.supported:
            sleep(pace.after(bool(events)))


@click.command()
@click.option(
    "--scope",
    metavar="REF",
    help="Only the events of a ticket (with its runs), a run, a project or a ticket pattern.",
)
@click.option("--tail", type=click.IntRange(min=1), metavar="N", help="Start at the newest N.")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep reading new events until Ctrl-C (each request waits in the daemon for news).",
)
@common_options
def events(scope: str | None, tail: int | None, follow: bool) -> None:
    """The activity feed: one 'time kind ticket run data' line per event.

    Without --scope it includes the repository-wide events (daemon started
    or stopped, gate changes); with one, only the scope's own.
    """
    with connected() as client:
        code = read_events(client, scope, tail, follow, time.sleep)
    raise click.exceptions.Exit(code)


# Registered by sloopctl.cli (typed here: the import cycle hides the decorators' types).
COMMANDS: Final[tuple[click.Command, ...]] = (logs, events)
