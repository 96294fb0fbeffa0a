"""11. ``drain``: no-op tickets through a real daemon, sandboxed, eight at a time.

Why: since a stage is a commit in and a commit out, every stage starts in a checkout
made anew, so a run pays for more checkouts than it did in 0.7.0.  This says what a
run costs end to end, what the daemon adds over the bare steps, and whether ``show``
stays quick while the runs churn.

The repository holds a README, ``sloop.toml`` and ``.gitignore``; the tickets (2,000;
100 with ``--quick``) sit in ``tickets/``, ignored, so checkouts stay small and the
figure is the daemon's, not the tree's (benchmark 10 measures big trees).  The flow is
``implement`` → ``sync`` → ``merge`` (``ff_only``, ``return_to = "sync"``), ``[repo]
parallel = 8``, ``sandbox = "bwrap"``; the agent is a ``sh`` one-liner that commits one
file (``notes/<ticket>.txt``), printing a line before and after so the log's timestamps
split its stage.  The gate is paused while the tickets are posted, then resumed: the
clock runs from ``resume`` to the last run's settling (the store's ``finished_at_ms``).

A second client polls ``show`` (the dashboard) every 50 ms during the drain; its
round trips (request sent to the whole reply read) give the p50/p99.  It decodes a
reply only once a second, to see whether the drain is over: the dashboard lists every
queued ticket (780 KB with 2,000 queued), and decoding each one took that client
about a fifth of a CPU, taken from the daemon and its children on a 2-CPU machine
(2026-12-07), a cost of the measuring client that grows with the queue.

The floor (``benchmarks.drain_floor``) runs the same git and sandbox steps without a
daemon, back to back and eight at a time, on a sample of the tickets.  Afterwards the
store is read (read-only, apsw) for where each run's
milliseconds went: the stage log's ``stage_started``/``stage_finished`` times, the
run's claimed/started/finished times and the agent's two log lines.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from pathlib import Path

import orjson

from benchmarks.common import (
    Client,
    Row,
    Table,
    load_average,
    make_repo,
    millis,
    percentile,
    ratio,
    request_line,
    sandbox,
    start_daemon,
    stop_daemon,
)
from benchmarks.drain_floor import drain as floor_drain
from benchmarks.drain_phases import Phases, read_phases
from sloopd.proc import sandbox as bwrap_sandbox

PARALLEL = 8
POLL_S = 0.05
DECODE_EVERY = 20  # polls: once a second, whether the drain is over
AGENT_SCRIPT = (
    'echo "agent start"; mkdir -p notes && echo "$SLOOP_RUN" > "notes/$SLOOP_TICKET.txt"'
    ' && git add notes && git commit -q -m "no-op $SLOOP_TICKET" && echo "agent done"'
)
AGENT = ["sh", "-c", AGENT_SCRIPT]
REFERENCE = "0.7.0 here: 4.43 runs/s, show p50/p99 19/63 ms; 0.4.0 unsandboxed 10.1 runs/s"


def toml_config(parallel: int) -> str:
    """sloop.toml, the agent's script as a TOML literal string (it holds double quotes)."""
    argv = ", ".join(f"'''{a}'''" for a in AGENT)
    return (
        f'sandbox = "bwrap"\n\n[repo]\nparallel = {parallel}\n\n[agent]\ncommand = [{argv}]\n\n'
        '[[flows.default.stages]]\nname = "implement"\naction = "agent"\n\n'
        '[[flows.default.stages]]\nname = "sync"\naction = "sync"\n\n'
        '[[flows.default.stages]]\nname = "merge"\naction = "ff_only"\n'
        'return_to = "sync"\nreturns = 50\n'
    )


def write_tickets(repo: Path, tickets: int) -> list[str]:
    folder = repo / "tickets"
    folder.mkdir()
    paths = []
    for n in range(1, tickets + 1):
        path = folder / f"nop-{n:05d}.md"
        path.write_text(f"# No-op ticket {n}\n\nCommit one file.\n", encoding="utf-8")
        paths.append(f"tickets/{path.name}")
    return paths


class ShowProbe(threading.Thread):
    """``show`` every ``POLL_S`` on its own connection; each round trip's seconds."""

    def __init__(self, socket: Path, tickets: int) -> None:
        super().__init__(daemon=True)
        self.client = Client(socket, timeout=60)
        self.tickets = tickets
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.drained = threading.Event()

    def run(self) -> None:
        line = request_line("show", {})
        while not self.stop.is_set():
            start = time.perf_counter()
            reply = self.client.raw(line)
            took = time.perf_counter() - start
            self.samples.append(took)
            if len(self.samples) % DECODE_EVERY == 0:
                data = orjson.loads(reply)
                if not data.get("ok"):
                    raise RuntimeError(f"show: {data.get('error')}")
                shown = data["data"]
                if shown.get("recent_total", 0) >= self.tickets and not shown.get("runs"):
                    self.drained.set()
            self.stop.wait(max(0.0, POLL_S - took))
        self.client.close()


def drain_daemon(
    root: Path, tickets: int, timeout: float, parallel: int = PARALLEL
) -> tuple[float, list[float], Phases]:
    """(wall seconds resume → last settled, show round trips, phases from the store)."""
    files = {"sloop.toml": toml_config(parallel), ".gitignore": "tickets/\n"}
    repo = make_repo(root, files)
    paths = write_tickets(repo, tickets)
    with sandbox() as box:
        daemon = start_daemon(box, repo, root)
        try:
            client = Client(daemon.socket, timeout=60)
            client.call("pause", {"reason": "posting the drain's tickets"})
            for path in paths:
                client.call("post", {"path": path})
            probe = ShowProbe(daemon.socket, tickets)
            resumed_ms = time.time() * 1000
            client.call("resume")
            probe.start()
            if not probe.drained.wait(timeout):
                raise RuntimeError(f"the drain did not finish within {timeout:.0f} s")
            probe.stop.set()
            probe.join()
            client.close()
        finally:
            stop_daemon(box, daemon)
    phases = read_phases(root / "state", resumed_ms)
    return phases.wall_s, probe.samples, phases


def sizes(quick: bool) -> tuple[int, int]:
    """(tickets through the daemon, tickets of each floor and of the parallel-1 daemon).

    ``BENCH_DRAIN_TICKETS`` overrides the first (a loaded machine drains 2,000 slowly)."""
    tickets, sample = (100, 20) if quick else (2000, 200)
    wanted = os.environ.get("BENCH_DRAIN_TICKETS")
    if wanted:
        tickets = int(wanted)
        sample = min(sample, max(10, tickets // 4))
    return tickets, sample


def run(quick: bool) -> Table:
    tickets, sample = sizes(quick)
    table = Table(
        f"11. drain: {tickets} no-op tickets, implement → sync → ff_only, parallel"
        f" {PARALLEL}, bwrap, through a real daemon"
    )
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    table.notes.append(f"load average at start: {load_average()}")
    with sandbox() as box:
        wall, shows, phases = drain_daemon(box.tmpdir("dr"), tickets, timeout=tickets * 10 + 120)
        table.notes.append(f"load average after the daemon's drain: {load_average()}")
        serial_wall, _, serial = drain_daemon(box.tmpdir("d1"), sample, sample * 10 + 120, 1)
        floors = {}
        for workers in (1, PARALLEL):
            root = box.tmpdir("df")
            repo = make_repo(root, {".gitignore": "tickets/\n"})
            floors[workers] = floor_drain(repo, root, sample, workers, AGENT)
    rate = tickets / wall
    for workers, floor in floors.items():
        how = "back to back" if workers == 1 else f"{workers} at a time"
        table.add(
            Row(
                "runs/s through sloopd (parallel 8)",
                f"{rate:.2f}/s",
                f"floor: the steps, no daemon, {how}",
                f"{floor.rate:.2f}/s",
                ratio(rate, floor.rate),
            )
        )
    serial_rate = sample / serial_wall
    table.add(
        Row(
            "runs/s through sloopd, parallel 1",
            f"{serial_rate:.2f}/s",
            "floor: the steps, no daemon, back to back",
            f"{floors[1].rate:.2f}/s",
            ratio(serial_rate, floors[1].rate),
        )
    )
    for label, q in (("p50", 50), ("p99", 99)):
        table.add(Row(f"`show` round trip while draining ({label})", millis(percentile(shows, q))))
    table.add(Row("runs settled merged", f"{phases.merged}/{tickets}"))
    table.add(
        Row(
            "  sync re-entered (ff_only found main moved), per run",
            f"{phases.resyncs / max(1, phases.runs):.2f}",
        )
    )
    table.notes.append(f"{len(shows)} show samples every {POLL_S * 1e3:.0f} ms; drain {wall:.1f} s")
    for workers, floor in floors.items():
        steps = ", ".join(f"{k} {v / floor.tickets * 1e3:.0f}" for k, v in floor.steps.items())
        table.notes.append(
            f"floor x{workers}: {floor.tickets} tickets in {floor.wall:.1f} s,"
            f" {floor.resyncs} resyncs; mean ms per ticket: {steps}"
        )
    table.notes.append("where a run's milliseconds go (mean per run, sloopd):")
    table.notes += [f"  {line}" for line in phases.lines()]
    table.notes.append(f"the same, sloopd with parallel 1 ({sample} tickets):")
    table.notes += [f"  {line}" for line in serial.lines()]
    table.notes.append(f"agent: {shlex.join(AGENT)}")
    table.notes.append(f"reference, not this run: {REFERENCE}")
    return table


def main(argv: list[str]) -> int:
    table = run("--quick" in argv)
    table.notes.append(f"load average at end: {load_average()}")
    print(table.text())
    return 1 if table.alarms else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
