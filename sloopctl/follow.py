"""``show`` (with ``--follow``), and the gate's two verbs ``pause`` and ``resume``.

Every request is still one client call, made on the one connection
``cli.connected`` keeps open for the whole command, and every failure goes
through the same handler as the one-shot commands (``cli.connected`` for no
answer, ``cli.answer`` for an error answer), so the messages and exit codes
are the same.

A follower derives nothing: ``show --follow`` stops on the first answer whose
run is ``terminal``, and the run's ``state`` alone picks the exit code.

``show`` is defined here whole: without ``--follow`` it is one request like any
command of ``sloopctl.cli``, with it the follower below.  ``sloopctl.cli`` imports
this module at its end and registers ``COMMANDS``, so import ``sloopctl.cli`` (not
this module) first.

The transitions printed on standard error off the live view live in
``sloopctl.progress``, the live view in ``sloopctl.watch``.  ``logs`` and ``events``
live in ``sloopctl.feeds_cli``; their line renderers
and the poll constants are re-exported here for code that imported them from
this module before the split.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any, Final, NoReturn

import click

from sloopctl.client import Client, Reply
from sloopctl.feeds_cli import event_line as event_line
from sloopctl.feeds_cli import record_line as record_line
from sloopctl.fold import fold, fold_for
from sloopctl.invoke import (
    EXIT_OK,
    EXIT_RUN_ABORTED,
    EXIT_RUN_FAILED,
    EXIT_RUN_NEEDS_REVIEW,
    EXIT_USAGE,
    answer,
    call,
    common_options,
    connected,
    fail,
    limit_option,
    present_args,
)
from sloopctl.layout import Paint, colour_enabled, painter, text
from sloopctl.longpoll import LongPoll, epoch_of
from sloopctl.next_steps import next_lines
from sloopctl.polling import (
    LIVE_WAIT_MS,
    SHOW_WAIT_MS,
    Sleep,
    json_wanted,
    page_data,
    present,
    rows,
)
from sloopctl.polling import POLL_MAX_S as POLL_MAX_S
from sloopctl.polling import POLL_MIN_S as POLL_MIN_S
from sloopctl.progress import Progress as Progress
from sloopctl.progress import live_terminal as live_terminal
from sloopctl.progress import progress_line as progress_line
from sloopctl.progress import stage_states as stage_states
from sloopctl.progress import transitions as transitions
from sloopctl.render import paint_state, render
from sloopctl.tickets_view import ends, waiting_text
from sloopctl.watch import LiveTable
from sloopctl.when import now_ms

# The live view redraws at most this often, however fast a stage prints.
FRAME_MIN_S: Final = 0.1

# The exit code of ``show --follow`` for each terminal run state (0 only for merged).
OUTCOME_EXITS: Final[Mapping[str, int]] = {
    "merged": EXIT_OK,
    "failed": EXIT_RUN_FAILED,
    "needs_review": EXIT_RUN_NEEDS_REVIEW,
    "aborted": EXIT_RUN_ABORTED,
}


# --- rendering (pure) -----------------------------------------------------------


def gate_line(gate: Any, now: int, paint: Paint) -> str:
    g = gate if isinstance(gate, dict) else {}
    words = "gate " + paint_state(g.get("state"), paint) + ends(g.get("until_ms"), now)
    return words + (f" ({g['reason']})" if g.get("reason") else "")


def outcome_line(run: Mapping[str, Any], paint: Paint) -> str:
    """``R3 merged``, ``R3 failed: <reason>``."""
    line = f"{text(run.get('id'))} {paint_state(run.get('state'), paint)}"
    return line + (f": {run['reason']}" if run.get("reason") else "")


# --- pause, resume ----------------------------------------------------------------


def gate_call(verb: str, args: dict[str, Any]) -> NoReturn:
    with connected() as client:
        reply = client.call(verb, args)
    if reply.ok and not json_wanted() and isinstance(reply.data, dict):
        click.echo(gate_line(reply.data.get("gate"), now_ms(), painter(colour_enabled(sys.stdout))))
        raise click.exceptions.Exit(EXIT_OK)
    raise click.exceptions.Exit(answer(verb, reply))


@click.command()
@click.option("--reason", metavar="TEXT", help="Why, shown with the gate.")
@common_options
def pause(reason: str | None) -> None:
    """Close the gate: no trigger is claimed until 'resume' (runs in flight go on)."""
    gate_call("pause", present(reason=reason))


@click.command()
@common_options
def resume() -> None:
    """Reopen the gate, ending a pause (or a cooldown) early."""
    gate_call("resume", {})


# --- show --follow ----------------------------------------------------------------


class RunFollower:
    """Asks ``show`` until a run is terminal; a ticket reference waits for its newest run.

    Each ask after the first passes the last reply's ``epoch`` as ``since`` (0.7.0), so
    the daemon answers as soon as something moved instead of the follower polling;
    a daemon that sends no epoch is polled every POLL_MIN_S as before.
    """

    def __init__(
        self,
        client: Client,
        ref: str,
        quiet: bool,
        as_json: bool,
        progress: Progress | LiveTable,
        sleep: Sleep,
        wait_ms: int = SHOW_WAIT_MS,
    ) -> None:
        self.client = client
        self.ref = ref
        self.quiet = quiet
        self.as_json = as_json
        self.progress = progress
        self.sleep = sleep
        self.longpoll = LongPoll()
        self.epoch: int | None = None  # the last reply's, which the next show waits past
        self.wait_ms = wait_ms
        self.skip: str | None = None  # a ticket's settled run that a queued trigger supersedes
        self.looked = False
        self.printed: Any = None  # what the last printed --json envelope showed
        self.waiting = ""

    def run(self) -> int:
        target = self.ref
        fresh = True  # a first look at a target (or right after a wait) never waits
        try:
            while True:
                held = {} if fresh else self.longpoll.held("show", self.wait_ms, self.epoch)
                reply = self.longpoll.call(self.client, "show", {"ref": target, **held})
                if not reply.ok:
                    self.progress.clear()
                    return answer("show", reply)
                data = page_data(reply, "kind")
                self.epoch = epoch_of(data)
                value = data.get("value")
                value = value if isinstance(value, dict) else {}
                if data["kind"] == "ticket":
                    self.emit(reply, ("ticket", value.get("state"), value.get("waiting")))
                    chosen = self.pick(value)
                    if chosen is not None:
                        target, fresh = chosen, True
                        continue
                    self.wait_for_run(value)
                elif data["kind"] == "run":
                    self.emit(reply, ("run", sorted(stage_states(value)), _states(value)))
                    if not self.quiet and not self.as_json:
                        self.progress.show(value)
                    if value.get("terminal") is True:
                        return self.settled(value)
                else:
                    fail(*unfollowable(self.ref, data))
                fresh = self.pause(value if data["kind"] == "run" else None)
        finally:
            self.progress.clear()

    def pause(self, run: Mapping[str, Any] | None) -> bool:
        """Between two looks: the live view reads the running stage's output (held by
        the daemon until a line comes, where it can); else the next ``show`` is held
        until news, or, with a daemon that holds nothing, a short sleep.  True when
        this already waited, so the next ``show`` must answer at once."""
        if run is not None and isinstance(self.progress, LiveTable):
            args = self.progress.tail.request(run)
            if args is not None:
                held = self.longpoll.held("logs", LIVE_WAIT_MS) if "after" in args else {}
                started = time.monotonic()
                reply = self.longpoll.call(self.client, "logs", {**args, **held})
                if reply.ok:
                    self.progress.tail.take(reply.data)
                if held and self.longpoll.supported("logs"):
                    self.sleep(max(0.0, FRAME_MIN_S - (time.monotonic() - started)))
                    return True
        if not self.longpoll.held("show", self.wait_ms, self.epoch):
            self.sleep(POLL_MIN_S)
        return False

    def pick(self, ticket: Mapping[str, Any]) -> str | None:
        """The run to follow: the ticket's newest, unless a queued trigger will start another."""
        runs = rows(ticket.get("runs"))  # newest attempt first
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
            # Folded at words on a terminal; a pipe gets the one line a CI script reads.
            outcome = outcome_line(run, painter(colour_enabled(sys.stdout)))
            click.echo(fold_for(sys.stdout, outcome))
            # On stderr: stdout stays the one outcome line a CI script reads.
            for line in next_lines(run, details=True):
                click.echo(fold_for(sys.stderr, line), err=True)
        return OUTCOME_EXITS.get(text(run.get("state")), EXIT_RUN_FAILED)


def unfollowable(ref: str, data: Mapping[str, Any]) -> tuple[str, int]:
    """Why ``ref`` cannot be followed, and the exit code.  A name nothing carries yet is
    refused at once, as ``kubectl wait`` refuses a resource that does not exist: waiting
    for a ticket to be posted would hang a CI job on a typo for ever, and ``post``
    answers only once the ticket exists, so ``post`` then ``show --follow`` never races."""
    if data.get("kind") == "matches":
        tickets = rows(data.get("tickets"))
        if not tickets:
            return (
                f"no ticket or run is called '{ref}' (yet): post the ticket first "
                "(sloopctl post PATH), then follow it; --follow does not wait for a name "
                "to appear",
                EXIT_USAGE,
            )
        names = ", ".join(text(t.get("name")) for t in tickets[:5])
        total = data.get("total")
        more = f" and {total - 5} more" if isinstance(total, int) and total > 5 else ""
        return (
            f"'{ref}' names no ticket or run exactly, it matches tickets ({names}{more}); "
            "--follow follows one run: give one ticket's name, or a run id or alias",
            EXIT_USAGE,
        )
    return (
        f"'{ref}' names no run or ticket (the daemon answered with {text(data.get('kind'))}); "
        "--follow follows one run",
        EXIT_USAGE,
    )


def _states(run: Mapping[str, Any]) -> tuple[Any, ...]:
    rows = stage_states(run)
    return (run.get("state"), tuple(rows[k].get("state") for k in sorted(rows)))


def follow_run(ref: str | None, quiet: bool) -> NoReturn:
    if ref is None:
        fail("--follow needs a run or ticket reference: sloopctl show REF --follow")
    as_json = json_wanted()
    progress: Progress | LiveTable = Progress.for_stderr()
    wait_ms = SHOW_WAIT_MS
    if not quiet and not as_json and live_terminal(sys.stdout):
        progress, wait_ms = LiveTable.for_stdout(sys.stdout, now_ms), LIVE_WAIT_MS
    with connected("show") as client:
        follower = RunFollower(client, ref, quiet, as_json, progress, time.sleep, wait_ms)
        code = follower.run()
    raise click.exceptions.Exit(code)


SHOW_HELP: Final = "The dashboard, or a ticket, run, project or ticket pattern."
FOLLOW_HELP: Final = (
    "With --follow, REF is a run, or a ticket whose newest run is followed (waiting for "
    "one to be claimed). When stdout is a terminal, the run's stages with their state and "
    "time and the running stage's last output lines are redrawn in place there (colour "
    "unless NO_COLOR; agents' text cleaned even with --raw); otherwise stage transitions "
    "go to stderr. The outcome line goes to stdout, and the exit code is 0 only for merged "
    "(10 failed, 11 needs_review, 12 aborted)."
)


@click.command(help=f"{SHOW_HELP}\n\n{FOLLOW_HELP}")
@click.argument("ref", required=False)
@limit_option
@click.option("-f", "--follow", is_flag=True, help="Follow the run until it settles (CI gate).")
@click.option("-q", "--quiet", is_flag=True, help="With --follow: print nothing but errors.")
@common_options
def show(ref: str | None, limit: int | None, follow: bool, quiet: bool) -> None:
    # Its help is SHOW_HELP and FOLLOW_HELP (one text, so the flags' rules are told once).
    if follow:
        if limit is not None:
            fail("--limit does not go with --follow")
        follow_run(ref, quiet)
    if quiet:
        fail("--quiet only goes with --follow")
    if json_wanted() or not live_terminal(sys.stdout):
        call("show", present_args(ref=ref, limit=limit), "show")
    with connected("show") as client:
        reply = client.call("show", present_args(ref=ref, limit=limit))
    if not reply.ok:
        raise click.exceptions.Exit(answer("show", reply))
    # On a terminal, folded at words to its width (sloopctl.fold); a pipe gets whole lines.
    shown = render("show", reply.data, now_ms(), colour_enabled(sys.stdout))
    click.echo(fold(shown, shutil.get_terminal_size().columns - 1))
    raise click.exceptions.Exit(EXIT_OK)


# Registered by sloopctl.cli (typed here: the import cycle hides the decorators' types).
COMMANDS: Final[tuple[click.Command, ...]] = (show, pause, resume)
