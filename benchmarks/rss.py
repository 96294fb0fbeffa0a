"""9. Memory with a long history: daemon RSS on 10k tickets, 50k runs and 1M log records.

The store is built before the daemon starts (``benchmarks.history``: every run settled,
each with the default flow's snapshot, its stage walk, its log records and its events).
A real daemon (``python -m sloopd serve``) is started on it and warmed the way operators
use it: the dashboard, the dashboard with ``limit`` = 10,000 recent runs, a pattern
matching every ticket with the same ``limit``, ticket, run and project details, first
pages and tails of 200 runs' logs (a stage selector on a tenth of them), and events
pages unscoped and scoped to a project, a ticket, a run and a pattern.  The warm-up runs
twice; ``VmRSS`` and ``VmHWM`` (the peak resident set since the start) are read from
``/proc/<pid>/status`` after each round.

Floors measured in the same run: the same daemon on an empty store, given the same
warm-up (what of it applies to an empty store), and a bare interpreter that has
imported ``sloopd.server`` (the daemon's code and its libraries, nothing served).
The goal: under 150 MB (10^6 bytes), the resident set after warm-up and its peak both.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import (
    Client,
    Row,
    Sandbox,
    Table,
    count,
    make_repo,
    ratio,
    request_line,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)
from benchmarks.history import History, build_history
from benchmarks.memory import memory_mib
from sloopd.store.db import STORE_FILE

GOAL_MIB = 150e6 / 2**20  # 150 MB
LARGE_LIMIT = 10_000
LOG_RUNS = 200
IMPORT_ONLY = "import sys, time, sloopd.server; print('imported', flush=True); time.sleep(120)"


class Warmer:
    """Asks what an operator asks; counts requests and the largest reply."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.requests = 0
        self.largest = 0
        self.seconds = 0.0

    def ask(self, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        began = time.monotonic()
        reply = self.client.raw(request_line(verb, args, self.requests))
        self.seconds += time.monotonic() - began
        self.largest = max(self.largest, len(reply))
        decoded = orjson.loads(reply)
        if not decoded.get("ok"):
            raise RuntimeError(f"{verb} {args} during the warm-up: {decoded.get('error')}")
        data: dict[str, Any] = decoded["data"]
        return data

    def round(self, history: History | None) -> None:
        for _ in range(3):
            self.ask("show", {})
        self.ask("show", {"limit": LARGE_LIMIT})
        self.ask("show", {"ref": "task-0", "limit": LARGE_LIMIT})
        middle = self.ask("events", {"tail": 1})["next_cursor"]
        self.ask("events", {"after": str(int(middle) // 2)})
        self.ask("events", {"tail": 100})
        if history is None:
            return
        tickets, runs = history.tickets, history.runs
        step = max(1, len(runs) // LOG_RUNS)
        for i, run in enumerate(runs[::step][:LOG_RUNS]):
            self.ask("logs", {"run": run})
            self.ask("logs", {"run": run, "tail": 10})
            if i % 10 == 0:
                self.ask("logs", {"run": run, "stage": "implement"})
        for ticket, name, _ in tickets[:: max(1, len(tickets) // 20)]:
            self.ask("show", {"ref": name})
            self.ask("events", {"scope": ticket, "tail": 100})
        for run in runs[:: max(1, len(runs) // 20)]:
            shown = self.ask("show", {"ref": run})
            if shown.get("kind") != "run" or shown["value"]["halt"] == "corrupt_log":
                raise RuntimeError(f"show {run} answered {orjson.dumps(shown)[:500]!r}")
            self.ask("events", {"scope": run})
        for project in history.projects[:5]:
            self.ask("show", {"ref": f"project:{project}"})
            self.ask("events", {"scope": f"project:{project}", "tail": 100})
        self.ask("events", {"scope": "task-001[0-4]", "after": str(int(middle) // 2)})


def measure(box: Sandbox, repo: Path, root: Path, history: History | None) -> dict[str, Any]:
    """Start a daemon on ``root``'s state, warm it twice; its memory after each step."""
    began = time.monotonic()
    daemon = start_daemon(box, repo, root, timeout=120)
    try:
        client = Client(daemon.socket, timeout=120)
        client.call("show")
        started = time.monotonic() - began
        time.sleep(0.5)
        result: dict[str, Any] = {"started_s": started, "start": memory_mib(daemon.pid)}
        warmer = Warmer(client)
        warmer.round(history)
        result["first"] = memory_mib(daemon.pid)
        warmer.round(history)
        result["after"] = memory_mib(daemon.pid)
        result["warmer"] = warmer
        client.close()
    finally:
        stop_daemon(box, daemon)
    return result


def import_floor(box: Sandbox) -> dict[str, float]:
    proc = box.spawn([sys.executable, "-c", IMPORT_ONLY], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        if proc.stdout.readline() != b"imported\n":
            raise RuntimeError("the bare interpreter did not import sloopd.server")
        return memory_mib(proc.pid)
    finally:
        box.stop(proc)


def run(quick: bool) -> Table:
    tickets, records = (1000, 100_000) if quick else (10_000, 1_000_000)
    runs_per_ticket = 5
    title = (
        f"9. memory with a long history: daemon RSS on {count(tickets)} tickets,"
        f" {count(tickets * runs_per_ticket)} runs, {count(records)} log records"
    )
    table = Table(title)
    with sandbox() as box:
        root = box.tmpdir("rss")
        repo = make_repo(root)
        began = time.monotonic()
        history = build_history(root / "full" / "state", tickets, runs_per_ticket, records)
        built = time.monotonic() - began
        full = measure(box, repo, root / "full", history)
        (root / "empty").mkdir()
        empty = measure(box, repo, root / "empty", None)
        bare = import_floor(box)
        store_mb = sum(p.stat().st_size for p in (root / "full" / "state").glob(STORE_FILE + "*"))
    rows(table, history, full, empty, bare)
    table.notes.insert(
        0,
        f"store: {store_mb / 1e6:.0f} MB on disk, built in {built:.0f} s; {history.events}"
        " events; every run settled",
    )
    return table


def mib(value: float) -> str:
    return f"{value:.0f} MiB"


def rows(
    table: Table,
    history: History,
    full: dict[str, Any],
    empty: dict[str, Any],
    bare: dict[str, float],
) -> None:
    goal = f"<= 150 MB ({GOAL_MIB:.0f} MiB)"
    after, peak = full["after"]["VmRSS"], full["after"]["VmHWM"]
    empty_after, empty_peak = empty["after"]["VmRSS"], empty["after"]["VmHWM"]
    table.add(
        Row(
            "daemon RSS after warm-up, long history",
            mib(after),
            "same daemon, empty store, same warm-up",
            mib(empty_after),
            ratio(after, empty_after),
            goal,
            verdict(after <= GOAL_MIB),
            issue="rss",
        )
    )
    table.add(
        Row(
            "daemon peak RSS (VmHWM), long history",
            mib(peak),
            "same daemon, empty store (VmHWM)",
            mib(empty_peak),
            ratio(peak, empty_peak),
            goal,
            verdict(peak <= GOAL_MIB),
            issue="rss-peak",
        )
    )
    start = full["start"]["VmRSS"]
    table.add(
        Row(
            "  daemon RSS once started, before any warm-up",
            mib(start),
            "same daemon, empty store",
            mib(empty["start"]["VmRSS"]),
            ratio(start, empty["start"]["VmRSS"]),
        )
    )
    table.add(
        Row(
            "  daemon RSS after warm-up, long history",
            mib(after),
            "python that imported sloopd.server",
            mib(bare["VmRSS"]),
            ratio(after, bare["VmRSS"]),
        )
    )
    warmer = full["warmer"]
    table.notes += [
        f"{len(history.tickets)} tickets, {len(history.runs)} runs, {history.records} log"
        f" records; daemon up and answering in {full['started_s']:.1f} s"
        f" (empty store: {empty['started_s']:.1f} s)",
        f"warm-up: {warmer.requests // 2} requests a round, two rounds, {warmer.seconds:.1f} s"
        f" in all; largest reply {warmer.largest / 1e6:.1f} MB",
    ]
    for name, measured in (("long history", full), ("empty store", empty)):
        steps = ", ".join(
            f"{step} {measured[step]['VmRSS']:.0f}" for step in ("start", "first", "after")
        )
        split = measured["after"]
        table.notes.append(
            f"{name}: VmRSS (MiB) {steps}; after: anonymous {split.get('RssAnon', 0):.0f},"
            f" file {split.get('RssFile', 0):.0f}, shared {split.get('RssShmem', 0):.0f}"
        )
    growth = after - full["first"]["VmRSS"]
    if growth > 5:
        table.alarms.append(
            f"RSS grew {growth:.0f} MiB over the second warm-up round (the same requests)"
        )
