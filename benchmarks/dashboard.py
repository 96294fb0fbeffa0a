"""5. The dashboard: ``show`` requests/s, and ``show`` latency while 8 agents flood output.

A real daemon (``python -m sloopd serve``) on a repository whose ``sloop.toml`` sets
``parallel = 8`` and an agent command that writes 80-byte lines to stdout as fast as the
pipe takes them for a fixed time (``FLOOD_SOURCE``), on the default flow.  Twelve held
tickets give the dashboard a body; eight flood tickets are posted one after the other
(each run's worktree exists before the next post), and every agent waits for a flag file
so that all eight start flooding at the same moment.

- latency: one connection asks ``show`` every 10 ms (closed loop: never two at once)
  while all eight agents flood, then again once every run has settled (the idle floor);
  percentiles over every reply in the window.
- throughput: 16 connections (2 processes x 8, ``benchmarks.loadgen``) asking ``show``
  on the settled daemon, against ``benchmarks.servers echo``, a bare uvloop + orjson
  server answering every line with the same dashboard object encoded afresh (the same
  reply size).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, cast

import apsw
import orjson

from benchmarks.common import (
    REPO_ROOT,
    Client,
    Daemon,
    Row,
    Sandbox,
    Table,
    make_repo,
    millis,
    percentile,
    rate,
    ratio,
    request_line,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
    wait_for_socket,
)
from benchmarks.loadgen import Load, Outcome, drive
from sloopd.store.db import STORE_FILE

AGENTS = 8
HELD = 12
GOAL_RATIO = 0.8
GOAL_P99 = 0.020
PROBE_INTERVAL = 0.010

FLOOD_SOURCE = """\
import os, sys, time

go, seconds = os.path.join(sys.argv[1], "go"), float(sys.argv[2])
deadline = time.monotonic() + 120
while not os.path.exists(go):  # every agent starts flooding at the same moment
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.01)
line = b"flood: compiling src/module.py ... " + b"x" * 44 + b"\\n"
block = line * 256
write = sys.stdout.buffer.write
end = time.monotonic() + seconds
while time.monotonic() < end:
    write(block)
sys.stdout.buffer.flush()
"""


def setup(root: Path, flood_seconds: float) -> Path:
    flood = root / "flood.py"
    flood.write_text(FLOOD_SOURCE, encoding="utf-8")
    # The start flag lives in a folder the command line names: the sandbox shows that
    # folder (live), where a file created after the start would not be visible.
    (root / "signal").mkdir(exist_ok=True)
    agent = [sys.executable, str(flood), str(root / "signal"), str(flood_seconds)]
    files = {
        # max_log_lines past what 12 s of flooding prints: every line is stored for the
        # whole window (at the default 100k per execution, a faster ingest stopped
        # storing before the latency probe ended, and the window was not all flood).
        "sloop.toml": "[repo]\nparallel = 8\n\n[agent]\nmax_log_lines = 100000000\n"
        'max_log_bytes = "16GiB"\ncommand = ' + orjson.dumps(agent).decode() + "\n",
    }
    for i in range(1, AGENTS + 1):
        files[f"tickets/flood-{i}.md"] = f"# Flood {i}\n\nPrint as fast as the pipe takes it.\n"
    for i in range(1, HELD + 1):
        files[f"tickets/held-{i:02d}.md"] = f"# Held ticket {i}\n\nWaits for an operator.\n"
    return make_repo(root, files)


def wait_until(client: Client, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = client.call("show")
        if predicate(view):
            return view
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting until {what}: {orjson.dumps(view)[:2000]!r}")
        time.sleep(0.05)


def running(count: int) -> Any:
    def check(view: dict[str, Any]) -> bool:
        return sum(1 for r in view["runs"] if r["state"] == "running") >= count

    return check


def probe(daemon: Daemon, seconds: float) -> Outcome:
    load = Load(
        path=str(daemon.socket),
        request=request_line("show", {}),
        framing="line",
        connections=1,
        warmup=0.0,
        duration=seconds,
        interval=PROBE_INTERVAL,
        latencies=True,
        fixed_size=False,
    )
    return drive(load, 1, daemon.pid)


def throughput(path: Path, request: bytes, pid: int, quick: bool) -> Outcome:
    load = Load(
        path=str(path),
        request=request,
        framing="line",
        connections=8,
        warmup=0.2 if quick else 1.0,
        duration=0.7 if quick else 5.0,
        fixed_size=False,
    )
    return drive(load, 2, pid)


def flood_stats(state_dir: Path) -> tuple[int, float, int]:
    """Flood lines committed, the span (s) from the first to the last one, and when the
    first agent to stop wrote its last line (epoch ms)."""
    conn = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute(
            "SELECT count(*), min(ts_ms), max(ts_ms) FROM log_records WHERE stream = 'stdout'"
        ).fetchone()
        lasts = conn.execute(
            "SELECT max(ts_ms) FROM log_records WHERE stream = 'stdout' GROUP BY run"
        ).fetchall()
    finally:
        conn.close()
    assert row is not None
    lines, first, last = (cast(int, value or 0) for value in row)
    earliest_end = min((cast(int, r[0]) for r in lasts), default=0)
    return lines, max(0.001, (last - first) / 1000), earliest_end


def run(quick: bool) -> Table:
    table = Table(
        f"5. dashboard: show requests/s at 16 connections, show latency while {AGENTS} agents"
        " flood output"
    )
    with sandbox() as box:
        _run(box, table, quick)
    return table


def _run(box: Sandbox, table: Table, quick: bool) -> None:
    flood_seconds = 3.0 if quick else 12.0
    probe_seconds = 1.5 if quick else 8.0
    root = box.tmpdir("db")
    repo = setup(root, flood_seconds)
    daemon = start_daemon(box, repo, root)
    try:
        client = Client(daemon.socket)
        for i in range(1, HELD + 1):
            client.call("post", {"path": f"tickets/held-{i:02d}.md", "hold": True})
        # One post at a time, each run's worktree made before the next claim: eight
        # concurrent 'git worktree add' on one repository race (see RESULTS.md).
        for i in range(1, AGENTS + 1):
            client.call("post", {"path": f"tickets/flood-{i}.md"})
            wait_until(client, running(i), 60, f"{i} runs are running")
        (root / "signal" / "go").touch()
        time.sleep(0.2)
        flooding = probe(daemon, probe_seconds)
        probe_end_ms = time.time() * 1000

        def all_settled(view: dict[str, Any]) -> bool:
            return not view["runs"] and view["recent_total"] >= AGENTS

        settled = wait_until(client, all_settled, 120, "every flood run settled")
        states = sorted({r["state"] for r in settled["recent"]})
        idle = probe(daemon, probe_seconds)
        show = request_line("show", {})
        sample = client.raw(show)
        client.close()
        sloopd = throughput(daemon.socket, show, daemon.pid, quick)
    finally:
        stop_daemon(box, daemon)
    lines, span, earliest_end = flood_stats(root / "state")

    payload = root / "dashboard.json"
    payload.write_bytes(orjson.dumps(orjson.loads(sample)["data"]))
    path = root / "echo.sock"
    echo = box.spawn(
        [sys.executable, "-m", "benchmarks.servers", "echo", str(payload), str(path)], cwd=REPO_ROOT
    )
    try:
        wait_for_socket(path, echo)
        echo_sample = Client(path)
        echo_reply = echo_sample.raw(show)
        echo_sample.close()
        bare = throughput(path, show, echo.pid, quick)
    finally:
        box.stop(echo)

    table.add(
        Row(
            "show requests/s, 16 conn",
            rate(sloopd.rate),
            "bare uvloop+orjson echo, same JSON",
            rate(bare.rate),
            ratio(sloopd.rate, bare.rate),
            f">= {GOAL_RATIO}x",
            verdict(sloopd.rate >= GOAL_RATIO * bare.rate),
            issue="show-16",
        )
    )
    per = [o.server_cpu / max(1, o.requests) for o in (sloopd, bare)]
    table.add(
        Row(
            "server CPU per show, 16 conn",
            f"{per[0] * 1e6:.0f} µs",
            "echo server, per reply",
            f"{per[1] * 1e6:.0f} µs",
            ratio(per[0], per[1]),
        )
    )
    for q in (99.0, 50.0, 100.0):
        busy = percentile(flooding.latencies, q)
        quiet = percentile(idle.latencies, q)
        name = "max" if q == 100.0 else f"p{q:.0f}"
        table.add(
            Row(
                f"show {name} while {AGENTS} agents flood",
                millis(busy),
                f"show {name}, idle daemon",
                millis(quiet),
                ratio(busy, quiet),
                f"<= {GOAL_P99 * 1000:.0f} ms" if q == 99.0 else "",
                verdict(busy <= GOAL_P99) if q == 99.0 else "",
                issue="show-flood" if q == 99.0 else "",
            )
        )
    view = orjson.loads(sample)["data"]
    table.notes += [
        f"show reply {len(sample)} bytes, echo reply {len(echo_reply)} bytes;"
        f" the dashboard lists {len(view['tickets'])} tickets and {len(view['recent'])}"
        " recent runs",
        f"flood: {AGENTS} agents for {flood_seconds:.0f} s each, started together;"
        f" {lines} lines committed over {span:.1f} s"
        f" = {rate(lines / span)} (runs ended {', '.join(states)})",
        f"latency probe: one connection, one show per {PROBE_INTERVAL * 1000:.0f} ms at most,"
        f" {probe_seconds:.1f} s each; during the flood: {len(flooding.latencies)} replies,"
        f" idle: {len(idle.latencies)} replies",
        f"during the flood: {flooding.summary()}",
        f"show 16 conn: {sloopd.summary()}",
        f"echo 16 conn: {bare.summary()}",
    ]
    if earliest_end < probe_end_ms:
        table.alarms.append(
            f"an agent stopped flooding {(probe_end_ms - earliest_end) / 1000:.1f} s before"
            " the latency probe ended: the window was not all flood"
        )
    for name, outcome in (("show probe (flood)", flooding), ("show 16 conn", sloopd)):
        if outcome.errors:
            table.alarms.append(f"{name}: {outcome.errors} bad replies")
