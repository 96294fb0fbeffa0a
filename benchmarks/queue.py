"""13. ``queue``: the merge queue: no-op tickets landing through a gate after ``sync``.

Why: a flow that tests the commit it merges (a gate stage between ``sync`` and
``ff_only``, the only flow where ``main`` holds exactly what its tests passed on) got
at most one landing per gate duration before the merge queue (issue 32), whatever
``parallel`` said, and left runs ``needs_review`` whose work had passed.  The queue
gates main + A, main + A + B, ... at once, up to ``[repo] merge_window`` (its default,
``parallel``, is what this benchmark runs with), and lands them in order.

Each case drains the same tickets (48; 16 with ``--quick``) through a real daemon,
``sandbox = "bwrap"``: the flow is ``implement`` (the drain benchmark's ``sh``
one-liner: it commits one file, ``notes/<ticket>.txt``, so no two tickets conflict) →
``sync`` → ``gate`` (a command stage, ``sleep G``, ``network = false``) → ``merge``
(``ff_only``, ``return_to = "sync"``, ``returns = 3``).  Cases: G = 2 s and 10 s, each
at ``parallel`` 8 and 16 (``--quick``: only the 2 s gate).  The gate is paused while
the tickets are posted, then resumed; the clock runs from ``resume`` to the last
landing.

Figures, read afterwards from the store (read-only, as ``drain_phases`` does):
landings per minute (merged runs over resume → last landing) against the serial floor
(one gate at a time: 60 / G) and the ideal (the window's gates at once: window / G *
60); gate executions per landing (every execution of ``gate``, those a rebuild cut short
included); time in the queue of each merged run, from its first ``sync`` execution's
start to its ``merge`` finishing (p50/p99); how the runs settled.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import orjson

from benchmarks.common import (
    Client,
    Row,
    Table,
    load_average,
    make_repo,
    percentile,
    ratio,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)
from benchmarks.drain import AGENT, write_tickets
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.store.db import STORE_FILE

GATES_S = (2, 10)
PARALLELS = (8, 16)
RETURNS = 3
POLL_S = 0.2
# Issue 32's goals: landings per minute at least this share of the ideal for a 10 s
# gate at parallel 8, and (its 24-ticket test) at most this many gate executions per
# merged run.
GOAL_IDEAL_SHARE = 0.6
GOAL_GATES_PER_LANDING = 1.5


def toml_config(parallel: int, gate_s: int) -> str:
    """sloop.toml: the drain's agent (a TOML literal string: it holds double quotes)."""
    argv = ", ".join(f"'''{a}'''" for a in AGENT)
    return (
        f'sandbox = "bwrap"\n\n[repo]\nparallel = {parallel}\n\n[agent]\ncommand = [{argv}]\n\n'
        '[[flows.default.stages]]\nname = "implement"\naction = "agent"\n\n'
        '[[flows.default.stages]]\nname = "sync"\naction = "sync"\n\n'
        '[[flows.default.stages]]\nname = "gate"\naction = "command"\n'
        f'command = ["sleep", "{gate_s}"]\nnetwork = false\n\n'
        '[[flows.default.stages]]\nname = "merge"\naction = "ff_only"\n'
        f'return_to = "sync"\nreturns = {RETURNS}\n'
    )


class Probe(threading.Thread):
    """``show`` every ``POLL_S``: when the drain is over, and the deepest queue seen."""

    def __init__(self, socket: Path, tickets: int) -> None:
        super().__init__(daemon=True)
        self.client = Client(socket, timeout=60)
        self.tickets = tickets
        self.stop = threading.Event()
        self.drained = threading.Event()
        self.max_queue: int | None = None  # None: the dashboard has no ``queue``
        self.window: int | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            data = self.client.call("show")
            queue = data.get("queue")
            if isinstance(queue, list):
                self.max_queue = max(self.max_queue or 0, len(queue))
            if isinstance(data.get("merge_window"), int):
                self.window = data["merge_window"]
            if data.get("recent_total", 0) >= self.tickets and not data.get("runs"):
                self.drained.set()
            self.stop.wait(POLL_S)
        self.client.close()


@dataclass
class Case:
    gate_s: int
    parallel: int
    tickets: int
    resumed_ms: float = 0.0
    states: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    gate_executions: int = 0
    gate_rebuilt: int = 0  # gate executions a rebuild cut short (ended_by "rebuilt")
    sync_executions: int = 0
    merge_moved: int = 0  # ff_only executions that failed because main moved
    waits_s: list[float] = field(default_factory=list)  # merged runs: sync start → landed
    landings_ms: list[int] = field(default_factory=list)
    max_queue: int | None = None
    window: int | None = None  # the dashboard's merge_window, when it has one

    @property
    def merged(self) -> int:
        return self.states.get("merged", 0)

    @property
    def label(self) -> str:
        return f"gate {self.gate_s} s, parallel {self.parallel}"

    def per_minute(self) -> float:
        """Landings per minute, resume → last landing."""
        if not self.landings_ms:
            return 0.0
        span = (max(self.landings_ms) - self.resumed_ms) / 1000
        return self.merged / span * 60 if span > 0 else 0.0

    def steady_per_minute(self) -> float:
        """Landings per minute, first landing → last (the implement stages left out)."""
        if len(self.landings_ms) < 2:
            return 0.0
        span = (max(self.landings_ms) - min(self.landings_ms)) / 1000
        return (len(self.landings_ms) - 1) / span * 60 if span > 0 else 0.0


def drain(root: Path, case: Case, timeout: float) -> None:
    files = {"sloop.toml": toml_config(case.parallel, case.gate_s), ".gitignore": "tickets/\n"}
    repo = make_repo(root, files)
    paths = write_tickets(repo, case.tickets)
    with sandbox() as box:
        daemon = start_daemon(box, repo, root)
        try:
            client = Client(daemon.socket, timeout=60)
            client.call("pause", {"reason": "posting the queue benchmark's tickets"})
            for path in paths:
                client.call("post", {"path": path})
            probe = Probe(daemon.socket, case.tickets)
            case.resumed_ms = time.time() * 1000
            client.call("resume")
            probe.start()
            drained = probe.drained.wait(timeout)
            probe.stop.set()
            probe.join()
            client.close()
            if not drained:
                raise RuntimeError(f"{case.label}: not drained within {timeout:.0f} s")
        finally:
            stop_daemon(box, daemon)
    case.max_queue, case.window = probe.max_queue, probe.window
    read_store(root / "state", case)


def read_store(state_dir: Path, case: Case) -> None:
    db = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        steps: dict[str, list[tuple[str, str | None, int, dict[str, Any]]]] = defaultdict(list)
        for run, kind, stage, at, data in db.execute(
            "SELECT run, kind, stage, at_ms, data FROM stage_log ORDER BY run, seq"
        ):
            steps[run].append((kind, stage, at, orjson.loads(data or "{}")))
        for run, state in db.execute("SELECT id, state FROM runs"):
            case.states[state] += 1
            _one_run(case, steps[run], state == "merged")
    finally:
        db.close()


def _one_run(
    case: Case, steps: list[tuple[str, str | None, int, dict[str, Any]]], merged: bool
) -> None:
    joined: int | None = None
    landed: int | None = None
    for kind, stage, at, data in steps:
        if kind == "stage_started" and stage == "sync":
            case.sync_executions += 1
            joined = at if joined is None else joined
        elif kind == "stage_started" and stage == "gate":
            case.gate_executions += 1
        elif kind == "stage_finished" and stage == "gate" and data.get("ended_by") == "rebuilt":
            case.gate_rebuilt += 1
        elif kind == "stage_finished" and stage == "merge":
            if data.get("passed") is True:
                landed = at
            elif "main moved" in str(data.get("reason") or ""):
                case.merge_moved += 1
    if merged and landed is not None:
        case.landings_ms.append(landed)
        if joined is not None:
            case.waits_s.append((landed - joined) / 1000)


def cases(quick: bool) -> list[Case]:
    tickets = 16 if quick else 48
    gates = GATES_S[:1] if quick else GATES_S
    return [Case(gate, parallel, tickets) for gate in gates for parallel in PARALLELS]


def add_rows(table: Table, case: Case) -> None:
    window = case.window if case.window is not None else case.parallel
    rate = case.per_minute()
    floor = 60 / case.gate_s
    ideal = window / case.gate_s * 60
    goal = ""
    met = ""
    if case.gate_s == 10 and case.parallel == 8:
        goal = f"≥ {GOAL_IDEAL_SHARE}x ideal"
        met = verdict(rate >= GOAL_IDEAL_SHARE * ideal)
    table.add(
        Row(
            f"landings/min, {case.label}",
            f"{rate:.1f}/min",
            f"serial floor: one gate at a time (60 / {case.gate_s} s)",
            f"{floor:.1f}/min",
            ratio(rate, floor),
        )
    )
    table.add(
        Row(
            f"landings/min, {case.label}",
            f"{rate:.1f}/min",
            f"ideal: window {window} / {case.gate_s} s * 60",
            f"{ideal:.1f}/min",
            ratio(rate, ideal),
            goal,
            met,
        )
    )
    table.add(
        Row(
            "  the same, first landing → last",
            f"{case.steady_per_minute():.1f}/min",
            f"ideal: window {window} / {case.gate_s} s * 60",
            f"{ideal:.1f}/min",
            ratio(case.steady_per_minute(), ideal),
        )
    )
    per_landing = case.gate_executions / case.merged if case.merged else float("inf")
    table.add(
        Row(
            "  gate executions per landing",
            f"{per_landing:.2f}",
            "one per landing",
            "1.00",
            ratio(per_landing, 1.0) if case.merged else "n/a",
            f"≤ {GOAL_GATES_PER_LANDING}",
            verdict(per_landing <= GOAL_GATES_PER_LANDING),
        )
    )
    for label, q in (("p50", 50), ("p99", 99)):
        table.add(
            Row(
                f"  time in queue (merged runs), sync start → landed ({label})",
                f"{percentile(case.waits_s, q):.1f} s",
                "one gate",
                f"{case.gate_s:.1f} s",
                ratio(percentile(case.waits_s, q), case.gate_s),
            )
        )
    others = {k: v for k, v in case.states.items() if k not in ("merged", "needs_review")}
    rest = "".join(f", {v} {k}" for k, v in sorted(others.items()))
    table.add(
        Row(
            "  runs merged / needs_review",
            f"{case.merged} / {case.states.get('needs_review', 0)}{rest}",
            "tickets",
            str(case.tickets),
            ratio(case.merged, case.tickets),
            "all merged",
            verdict(case.merged == case.tickets),
        )
    )
    depth = "no queue on the dashboard" if case.max_queue is None else str(case.max_queue)
    table.notes.append(
        f"{case.label}: {case.gate_executions} gate executions"
        f" ({case.gate_rebuilt} cut short by a rebuild), {case.sync_executions} sync"
        f" executions, {case.merge_moved} merge executions failed because main moved;"
        f" deepest queue seen: {depth}; merge_window:"
        f" {case.window if case.window is not None else 'none on the dashboard'}"
    )


def run(quick: bool) -> Table:
    chosen = cases(quick)
    table = Table(
        f"13. queue: {chosen[0].tickets} no-op tickets, implement → sync → gate (sleep)"
        " → ff_only, bwrap, through a real daemon"
    )
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    table.notes.append(f"load average at start: {load_average()}")
    with sandbox() as box:
        for case in chosen:
            began = time.monotonic()
            timeout = case.tickets * (case.gate_s + 5) * 2 + 300
            drain(box.tmpdir("qu"), case, timeout)
            add_rows(table, case)
            table.notes.append(
                f"{case.label}: {time.monotonic() - began:.0f} s; load average after:"
                f" {load_average()}"
            )
    table.notes.append(
        f"flow: implement → sync → gate (sleep G, network = false) → merge (ff_only,"
        f" return_to = sync, returns = {RETURNS}); merge_window not set (default: parallel)"
    )
    return table


def main(argv: list[str]) -> int:
    table = run("--quick" in argv)
    table.notes.append(f"load average at end: {load_average()}")
    print(table.text())
    return 1 if table.alarms else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
