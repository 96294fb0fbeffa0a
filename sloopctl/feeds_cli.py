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
from collections.abc import Callable, Mapping
from typing import Any, Final

import click
import orjson

from sloopctl import queue_view, streams
from sloopctl.attention import resolution_of, resolution_words
from sloopctl.client import Client
from sloopctl.feedwalk import EVENTS, LOGS, FeedWalk
from sloopctl.invoke import EXIT_OK, answer, common_options, connected, options
from sloopctl.layout import Paint, colour_enabled, painter, text
from sloopctl.longpoll import LongPoll
from sloopctl.polling import FOLLOW_WAIT_MS, Pace, Sleep, json_wanted, page_data, present

_STREAM_STYLE: Final = {"stderr": "yellow", "note": "cyan", "system": "dim"}


# --- rendering (pure) -----------------------------------------------------------


def record_line(record: Mapping[str, Any], paint: Paint, *, events: bool = True) -> str:
    """``[stage#attempt stream] text`` (``[review#1 seat 0 stdout]`` for a panel seat);
    only the stream is painted, stdout never.

    With ``events``, an agent CLI's JSON event on stdout is shown as a person reads
    it (``sloopctl.streams``, the renderer the web gateway uses too); ``--raw`` turns
    that off and shows the stored JSON.
    """
    where = streams.where(record)
    stream = text(record.get("stream"))
    style = _STREAM_STYLE.get(stream, "")
    label = paint(stream, style) if style else stream
    body = record.get("text")
    if isinstance(body, str):
        shown = streams.rendered(record) if events else None
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


def resolved_words(kind: Any, data: Any) -> str | None:
    """``run_resolved`` (0.9) in words: ``resolved: merged by hand (by alice): why``."""
    if (
        kind != "run_resolved"
        or not isinstance(data, dict)
        or resolution_of({"resolution": data}) is None
    ):
        return None
    return "resolved: " + resolution_words(data)


def event_line(event: Mapping[str, Any]) -> str:
    """``time kind ticket run data`` with the data as ``key=value`` pairs (nulls left out)."""
    at_ms = event.get("at_ms")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at_ms / 1000))
        if isinstance(at_ms, int) and not isinstance(at_ms, bool)
        else "-"
    )
    data = event.get("data")
    # The merge queue's events (0.9) in words; every other kind as key=value pairs.
    summary = (
        queue_view.event_words(event.get("kind"), data)
        or resolved_words(event.get("kind"), data)
        or (
            " ".join(f"{k}={_brief(v)}" for k, v in data.items() if v is not None)
            if isinstance(data, dict)
            else _brief(data)
        )
    )
    columns = [
        when,
        text(event.get("kind")).ljust(14),
        text(event.get("ticket")).ljust(5),
        text(event.get("run")).ljust(5),
        summary,
    ]
    return " ".join(columns).rstrip()


# --- the one follow loop ------------------------------------------------------------

ShowPage = Callable[[Mapping[str, Any], list[dict[str, Any]]], None]


def read_feed(client: Client, walk: FeedWalk, show: ShowPage, sleep: Sleep) -> int:
    """Page (and with ``follow`` keep reading) a feed; the exit code.

    With --json each envelope is printed as it came, except, while following, one
    that brought nothing new; else ``show`` prints a page's news.
    """
    as_json = json_wanted()
    verb = walk.kind.verb
    pace = Pace()
    while True:
        reply = walk.polls.call(client, verb, walk.request())
        if not reply.ok:
            return answer(verb, reply)
        page = page_data(reply, *walk.kind.fields)
        step = walk.take(page)
        if as_json:
            if step.items or step.done or step.first or not walk.follow:
                click.echo(reply.line)
        else:
            show(page, step.items)
        if step.done:
            return EXIT_OK
        # Caught up: the next request waits for news in the daemon (long-poll) or,
        # with an older daemon, after a pause here.
        if step.caught_up and not walk.polls.supported(verb):
            sleep(pace.after(bool(step.items)))


# --- logs -------------------------------------------------------------------------


def read_logs(
    client: Client, base: dict[str, Any], tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page (and with ``follow`` poll) a run's log; the exit code."""
    paint = painter(colour_enabled(sys.stdout))
    readable_events = not options().raw

    def show(page: Mapping[str, Any], records: list[dict[str, Any]]) -> None:
        elided = page.get("elided")
        if isinstance(elided, int) and elided > 0:
            click.echo(elided_line(elided), err=True)
        for record in records:
            click.echo(record_line(record, paint, events=readable_events))

    walk = FeedWalk(LOGS, base, LongPoll(), FOLLOW_WAIT_MS, tail=tail, follow=follow)
    return read_feed(client, walk, show, sleep)


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
    "--all",
    "everything",
    is_flag=True,
    help="Every record from the first (the default without --tail), however long the log.",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep reading until the run has settled and every record was printed.",
)
@common_options
def logs(run_ref: str, stage: str | None, tail: int | None, everything: bool, follow: bool) -> None:
    """A run's output, one '[stage#attempt stream] text' line per record.

    A panel seat's records say which seat printed them ('[review#1 seat 1
    stdout]'); an agent CLI's JSON events are shown as a person reads them,
    and with --raw as stored.

    RUN is a run id or alias.  Without --follow it prints what is there now;
    with --follow it keeps reading and exits 0 once the run has settled and
    its last record was printed.  Once caught up, each request waits in the
    daemon until a new line is stored (long-poll), so a line shows as soon as
    it is printed; an older daemon is polled instead.
    """
    if everything and tail is not None:
        raise click.UsageError("--all reads every record; it cannot be given with --tail")
    base = present(run=run_ref, stage=stage)
    with connected() as client:
        code = read_logs(client, base, tail, follow, time.sleep)
    raise click.exceptions.Exit(code)


# --- events -----------------------------------------------------------------------


def read_events(
    client: Client, scope: str | None, tail: int | None, follow: bool, sleep: Sleep
) -> int:
    """Page the activity feed up to its end (with ``follow``: for ever); the exit code."""

    def show(page: Mapping[str, Any], events: list[dict[str, Any]]) -> None:
        for event in events:
            click.echo(event_line(event))

    walk = FeedWalk(
        EVENTS, present(scope=scope), LongPoll(), FOLLOW_WAIT_MS, tail=tail, follow=follow
    )
    return read_feed(client, walk, show, sleep)


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
