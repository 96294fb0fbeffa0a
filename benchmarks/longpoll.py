"""8. Long-poll: from a line an agent prints to a follower waiting on ``logs {wait_ms}``.

A real daemon (``python -m sloopd serve``) runs one ticket whose agent prints a line
each time a byte arrives on its fifo (``AGENT_SOURCE``), stamped with the wall clock it
was written at; the fifo lives in a folder its command line names, which the sandbox
shows.  Followers (``benchmarks.followers``) each hold ``logs {run, after, wait_ms}``
and, when a reply comes, ask again from its cursor; the benchmark prints one line, waits
until every follower has it, pauses 20-40 ms (every follower has asked again by then)
and prints the next.  The figure is the wall clock from the agent's write to the reply
being read, p50 and p99 over every (line, follower), at 1 and 16 followers.

Floor, same run: the same agent program spawned by the benchmark itself, its stdout a
pipe read by a bare blocking loop, driven through its own fifo the same way.  For
reference, one follower polling every 0.2 s without ``wait_ms`` (sloopctl's pace
before long-poll).  Idle cost: the daemon's CPU over a window while 100 followers hold
a ``wait_ms`` request on a run that prints nothing, against the same window with no
follower, and against 100 followers polling every 0.5 s; then once more with no
follower, after the 100 hung up (what a held request leaves behind).

A daemon that refuses ``wait_ms`` (``invalid_arguments`` naming the field) gets rows
saying so; the floor and the polling figures are measured all the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

from benchmarks.common import (
    Client,
    Daemon,
    Row,
    Sandbox,
    Table,
    make_repo,
    percentile,
    ratio,
    request_line,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)
from benchmarks.followers import (
    POLL_IDLE_S,
    POLL_S,
    IdleCost,
    Phase,
    Watch,
    idle_cost,
    parse_tick,
    run_phase,
)

FOLLOWERS = (1, 16)
IDLE_WAITERS = 100
WAIT_MS = 30_000
GOAL_IDLE_CORES = 0.01  # 100 idle followers: within 1% of a core of no follower at all
FIFO = "ticks"

AGENT_SOURCE = """\
import os, sys, time

fifo = os.open(os.path.join(sys.argv[1], sys.argv[2]), os.O_RDONLY)
os.write(1, b"ready\\n")
tick = 0
while True:
    got = os.read(fifo, 1)
    if not got or got == b"q":
        break
    tick += 1
    os.write(1, b"tick %d %d\\n" % (tick, time.time_ns()))
"""


def duration(seconds: float) -> str:
    if seconds >= 0.01:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 0.001:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} µs"


def setup(root: Path) -> tuple[Path, Path, Path]:
    """The repository, the agent program and the folder of its fifos."""
    agent = root / "ticker.py"
    agent.write_text(AGENT_SOURCE, encoding="utf-8")
    signals = root / "signal"
    signals.mkdir()
    command = [sys.executable, str(agent), str(signals), FIFO]
    files = {
        "sloop.toml": "[agent]\ncommand = " + orjson.dumps(command).decode() + "\n",
        "tickets/follow.md": "# Follow\n\nPrint a line whenever asked.\n",
    }
    return make_repo(root, files), agent, signals


def open_fifo(path: Path) -> int:
    """A fifo opened read-write: the agent's read-only open returns at once, and a
    write never blocks on a reader that is not there yet."""
    os.mkfifo(path)
    return os.open(path, os.O_RDWR)


def pipe_floor(box: Sandbox, agent: Path, signals: Path, ticks: int) -> list[float]:
    """The same agent, its stdout a pipe read by a bare blocking loop."""
    fifo = open_fifo(signals / "floor")
    proc = box.spawn([sys.executable, str(agent), str(signals), "floor"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    latencies = []
    try:
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError("the floor's agent did not start")
        for _ in range(ticks):
            os.write(fifo, b"t")
            line = proc.stdout.readline()
            received = time.time_ns()
            tick = parse_tick(line.decode())
            if tick is None:
                raise RuntimeError(f"the floor's agent printed {line!r}")
            latencies.append((received - tick[1]) / 1e9)
            time.sleep(0.005)
        os.write(fifo, b"q")
        proc.wait(10)
    finally:
        box.stop(proc)
        os.close(fifo)
    return latencies


def start_run(client: Client, timeout: float = 60.0) -> str:
    """Post the ticket; the run's id once its agent has printed 'ready'."""
    client.call("post", {"path": "tickets/follow.md"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = client.call("show", {"ref": "follow#1"})
        if shown.get("kind") == "run":
            run: str = shown["value"]["id"]
            page = client.call("logs", {"run": run, "tail": 20})
            if any(r["text"] == "ready" for r in page["records"]):
                return run
        time.sleep(0.05)
    raise RuntimeError("the follow run's agent did not print 'ready'")


def last_cursor(client: Client, run: str) -> str:
    cursor: str = client.call("logs", {"run": run, "tail": 1})["next_cursor"]
    return cursor


def refusal(client: Client, run: str, cursor: str) -> str | None:
    """None when the daemon takes ``wait_ms``; the refusal's message when it does not."""
    line = request_line("logs", {"run": run, "after": cursor, "wait_ms": 0}, 8001)
    reply = orjson.loads(client.raw(line))
    if reply.get("ok"):
        return None
    error = reply["error"]
    if error.get("code") == "invalid_arguments" and error.get("details", {}).get("field") in (
        "wait_ms",
        None,
    ):
        return str(error.get("message"))
    raise RuntimeError(f"logs with wait_ms: 0 failed: {error}")


def held_for(client: Client, run: str, cursor: str, wait_ms: int) -> float:
    """Seconds a ``logs {wait_ms}`` with nothing new took to answer (about wait_ms)."""
    line = request_line("logs", {"run": run, "after": cursor, "wait_ms": wait_ms}, 8002)
    began = time.monotonic()
    reply = orjson.loads(client.raw(line))
    if not reply.get("ok") or reply["data"]["records"]:
        raise RuntimeError(f"an idle wait answered {reply}")
    return time.monotonic() - began


class Ticker:
    """The run's agent and the numbering of the lines it has printed so far."""

    def __init__(self, daemon: Daemon, client: Client, run: str, fifo: int) -> None:
        self.daemon, self.client, self.run, self.fifo = daemon, client, run, fifo
        self.next_tick = 1

    def phase(self, phase: Phase) -> Watch:
        cursor = last_cursor(self.client, self.run)
        watch = uvloop.run(
            run_phase(self.daemon.socket, self.run, cursor, self.fifo, self.next_tick, phase)
        )
        self.next_tick += watch.printed
        return watch

    def idle(self, mode: str, seconds: float) -> IdleCost:
        cursor = last_cursor(self.client, self.run)
        waiters = 0 if mode == "none" else IDLE_WAITERS
        return uvloop.run(
            idle_cost(self.daemon.socket, self.run, cursor, self.daemon.pid, waiters, seconds, mode)
        )


def run(quick: bool) -> Table:
    table = Table(
        "8. long-poll: a line an agent prints, to followers waiting on logs {wait_ms};"
        f" {IDLE_WAITERS} idle followers"
    )
    with sandbox() as box:
        _run(box, table, quick)
    return table


def _run(box: Sandbox, table: Table, quick: bool) -> None:
    ticks, poll_ticks, window = (15, 8, 1.5) if quick else (100, 40, 5.0)
    root = box.tmpdir("lp")
    repo, agent, signals = setup(root)
    floor = pipe_floor(box, agent, signals, ticks)
    fifo = open_fifo(signals / FIFO)
    measured: dict[str, Any] = {}
    daemon = start_daemon(box, repo, root)
    try:
        client = Client(daemon.socket)
        ticker = Ticker(daemon, client, start_run(client), fifo)
        refused = refusal(client, ticker.run, last_cursor(client, ticker.run))
        if refused is None:
            measured["held"] = held_for(client, ticker.run, last_cursor(client, ticker.run), 400)
            for n in FOLLOWERS:
                measured[f"wait-{n}"] = ticker.phase(Phase(n, WAIT_MS, ticks, (0.02, 0.04)))
        measured["poll"] = ticker.phase(Phase(1, None, poll_ticks, (0.0, POLL_S), POLL_S))
        measured["idle-none"] = ticker.idle("none", window)
        measured["idle-poll"] = ticker.idle("poll", window)
        if refused is None:
            measured["idle-wait"] = ticker.idle("wait", window)
            # Once they hung up, nothing of them may keep running.
            measured["idle-after"] = ticker.idle("none", window)
        client.call("abort", {"run": ticker.run})
        client.close()
    finally:
        stop_daemon(box, daemon)
        os.close(fifo)
    rows(table, floor, measured, refused, window)


def latency_rows(
    table: Table, name: str, watch: Watch | None, floor: list[float], issue: str, why: str
) -> None:
    for q in (50.0, 99.0):
        floor_q = percentile(floor, q)
        peer = f"agent's pipe -> bare reader (p{q:.0f})"
        figure = f"{name} (p{q:.0f})"
        tag = f"{issue}-p{q:.0f}" if issue else ""
        if watch is None:
            table.add(Row(figure, "unsupported", why, duration(floor_q), issue=tag))
            continue
        value = percentile(watch.latencies, q)
        cells = (duration(value), peer, duration(floor_q), ratio(value, floor_q))
        table.add(Row(figure, *cells, issue=tag))


def rows(
    table: Table, floor: list[float], measured: dict[str, Any], refused: str | None, window: float
) -> None:
    why = "long-poll not supported by this daemon"
    for n in FOLLOWERS:
        followers = f"{n} follower{'s' if n > 1 else ''}"
        latency_rows(
            table,
            f"line printed -> received, long-poll, {followers}",
            measured.get(f"wait-{n}"),
            floor,
            f"longpoll-{n}",
            why,
        )
    latency_rows(
        table,
        f"  line printed -> received, polling every {POLL_S} s, 1 follower",
        measured["poll"],
        floor,
        "",
        why,
    )
    none: IdleCost = measured["idle-none"]
    base = none.cpu / none.seconds
    idle_figure = f"daemon CPU, {IDLE_WAITERS} followers held by wait_ms, {window:g} s"
    goal = f"<= idle + {GOAL_IDLE_CORES:.0%} core"
    wait: IdleCost | None = measured.get("idle-wait")
    if wait is None:
        table.add(Row(idle_figure, "unsupported", why, cores(base), issue="longpoll-idle"))
    else:
        used = wait.cpu / wait.seconds
        table.add(
            Row(
                idle_figure,
                cores(used),
                "same daemon, no follower",
                cores(base),
                ratio(used, base),
                goal,
                verdict(used <= base + GOAL_IDLE_CORES),
                issue="longpoll-idle",
            )
        )
    poll: IdleCost = measured["idle-poll"]
    table.add(
        Row(
            f"  daemon CPU, {IDLE_WAITERS} followers polling every {POLL_IDLE_S} s",
            cores(poll.cpu / poll.seconds),
            "same daemon, no follower",
            cores(base),
            ratio(poll.cpu / poll.seconds, base),
        )
    )
    notes(table, floor, measured, refused, window)


def cores(value: float) -> str:
    return f"{value * 100:.2f}% core"


def notes(
    table: Table, floor: list[float], measured: dict[str, Any], refused: str | None, window: float
) -> None:
    if refused is not None:
        table.notes.append(f"logs {{wait_ms: 0}} was refused: {refused}")
    else:
        table.notes.append(
            f"logs {{wait_ms: 400}} with nothing new answered after {measured['held']:.3f} s"
        )
        if measured["held"] < 0.3:
            table.alarms.append("wait_ms not honoured: an idle wait of 400 ms answered early")
    table.notes.append(
        f"floor: {len(floor)} lines through the agent's own pipe, max {duration(max(floor))}"
    )
    for key in [f"wait-{n}" for n in FOLLOWERS] + ["poll"]:
        watch: Watch | None = measured.get(key)
        if watch is None:
            continue
        table.notes.append(
            f"{key}: {watch.printed} lines x {watch.followers} follower(s),"
            f" {len(watch.latencies)} received, {watch.requests} requests"
            f" ({watch.requests / max(1, watch.printed * watch.followers):.2f} per line per"
            f" follower), {watch.empty_replies} pages without a line, {watch.missed} lines missed"
        )
        if watch.missed:
            table.alarms.append(f"{key}: {watch.missed} lines not received within 5 s")
        if watch.early_empty:
            table.alarms.append(
                f"{key}: {watch.early_empty} empty pages answered long before wait_ms"
            )
    for key in ("idle-none", "idle-poll", "idle-wait", "idle-after"):
        cost: IdleCost | None = measured.get(key)
        if cost is not None:
            table.notes.append(
                f"{key}: daemon CPU {cost.cpu * 1e3:.0f} ms over {cost.seconds:.1f} s,"
                f" {cost.answered} replies inside the window"
            )
    wait: IdleCost | None = measured.get("idle-wait")
    if wait is not None and wait.answered:
        table.alarms.append(f"{wait.answered} held followers were answered inside the window")
    none: IdleCost = measured["idle-none"]
    after: IdleCost | None = measured.get("idle-after")
    if after is not None and after.cpu / after.seconds > none.cpu / none.seconds + GOAL_IDLE_CORES:
        table.alarms.append(
            f"the daemon still used {cores(after.cpu / after.seconds)} after the"
            f" {IDLE_WAITERS} held followers hung up ({cores(none.cpu / none.seconds)} before)"
        )
