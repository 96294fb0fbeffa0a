"""4. ``logs`` page requests per second: sloopd, two bare uvloop+apsw servers, and Redis 7.

All four serve the same page (the 100 records after the middle cursor of a 10k-record
run) over a Unix socket, and all four are driven by the same load generator
(``benchmarks.loadgen``: Python, uvloop, closed loop, whole replies, 1 connection in one
process or 16 connections in two processes of 8).

- sloopd: ``python -m sloopd serve`` on a git repository whose store was built before it
  started (``fixtures.build_log_store``: one settled run of the default flow), asked
  ``logs {run, after}``.
- bare: ``benchmarks.servers logs`` on the same store file: the page query, each row
  decoded into a dict, the reply orjson-encoded (the "naive" way).
- floor: ``benchmarks.servers logs-floor`` on the same store file: sloopd's page, byte
  for byte, built as sloopd builds it but with nothing around it (no checks, no run
  lookup, no metrics): what the stack costs for the page itself.
- Redis 7: ``redis-server`` on a temporary Unix socket (no persistence), a stream holding
  the same 10k records (id ``0-<position>``, one field ``r`` = the record's stored JSON:
  the least RESP structure that carries the same bytes), asked
  ``XRANGE log 0-<after+1> + COUNT 100``.

Redis is measured twice: with replies compared byte for byte against the reference reply
(the same treatment the NDJSON replies get; the goal is judged against this figure), and
with every reply walked element by element by the Python RESP reader (the literal "parse
the reply" client: it costs the client several times what Redis spends on the request, so
that figure says more about the client than about Redis).

The servers are up together and measured in turns (``measure``): five windows of
1 s each per server and connection count, the order reversed every other round.  Measured
one after the other (5 s each, as before 0.9.0), a slower half-minute of this shared
machine fell on whichever server was measured then: the one-connection ratio to Redis
of the same code ranged 0.69-1.10x between runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import (
    REPO_ROOT,
    Client,
    Row,
    Sandbox,
    Table,
    make_repo,
    rate,
    ratio,
    request_line,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
    wait_for_socket,
)
from benchmarks.fixtures import LogStore, build_log_store
from benchmarks.loadgen import Framing, Load, Outcome, decode_resp, drive, resp_command
from sloopd.store.db import STORE_FILE

RECORDS = 10_000
PAGE = 100
GOAL = 1.0  # requests/s against Redis's
GOAL_CPU = 1.0  # server CPU per page against Redis's
CONNECTIONS = (1, 16)
STREAM = b"log"
ROUNDS = 5  # windows per contender and connection count, interleaved
WINDOW_S = 1.0  # measured per window (ROUNDS of them: 5 s per figure)
WARMUP_S = 0.3  # per window, on fresh connections to an already warm server


def layout(connections: int) -> tuple[int, int]:
    """(processes, connections per process): one process for one connection, else two."""
    return (1, 1) if connections == 1 else (2, connections // 2)


# --- Redis -----------------------------------------------------------------------------


def ensure_redis() -> str | None:
    """The redis-server binary, installed through the project's Debian helper if missing."""
    found = shutil.which("redis-server")
    if found is None:
        helper = REPO_ROOT / "scripts" / "ensure-debian-packages"
        subprocess.run([str(helper), "redis-server:redis-server"], check=False)
        found = shutil.which("redis-server")
    return found


class Redis:
    """A blocking RESP connection for loading data and checks (never timed)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(path))

    def raw(self, commands: list[bytes]) -> list[bytes]:
        """Send commands pipelined; each whole raw reply, in order."""
        self.sock.sendall(b"".join(commands))
        replies: list[bytes] = []
        buffer, pos = b"", 0
        while len(replies) < len(commands):
            end = _reply_end(buffer, pos)
            if end is None:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise EOFError("redis closed the connection")
                buffer = buffer[pos:] + data
                pos = 0
                continue
            replies.append(buffer[pos:end])
            pos = end
        return replies

    def call(self, *parts: bytes | str | int) -> Any:
        reply = self.raw([resp_command(*parts)])[0]
        return decode_resp(reply)[0]

    def close(self) -> None:
        self.sock.close()


def _reply_end(data: bytes, pos: int) -> int | None:
    """Where the reply starting at ``pos`` ends, or None while it is incomplete."""
    try:
        _, end = decode_resp(data, pos)
    except ValueError:  # a header's CRLF is not there yet
        return None
    return end if end <= len(data) else None


def start_redis(box: Sandbox, binary: str, root: Path) -> tuple[subprocess.Popen[bytes], Path]:
    path = root / "redis.sock"
    argv = [binary, "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700"]
    argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(root)]
    argv += ["--logfile", str(root / "redis.log")]
    proc = box.spawn(argv)
    wait_for_socket(path, proc)
    return proc, path


def load_stream(redis: Redis, facts: LogStore) -> None:
    commands = [
        resp_command(b"XADD", STREAM, f"0-{position}", b"r", body)
        for position, body in enumerate(facts.bodies, 1)
    ]
    for first in range(0, len(commands), 1000):
        for reply in redis.raw(commands[first : first + 1000]):
            if reply.startswith(b"-"):
                raise RuntimeError(f"XADD failed: {reply!r}")


def redis_version(redis: Redis) -> str:
    info = redis.call(b"INFO", b"server")
    for line in bytes(info).decode().splitlines():
        if line.startswith("redis_version:"):
            return line.split(":", 1)[1]
    return "unknown"


# --- checks ----------------------------------------------------------------------------


def page_records(reply: bytes) -> list[dict[str, Any]]:
    decoded = orjson.loads(reply)
    if not decoded.get("ok"):
        raise RuntimeError(f"error reply: {decoded.get('error')}")
    records: list[dict[str, Any]] = decoded["data"]["records"]
    return records


def check_page(records: list[dict[str, Any]], facts: LogStore, after: int, who: str) -> None:
    expected = [
        {"cursor": str(after + 1 + i), **orjson.loads(facts.bodies[after + i])} for i in range(PAGE)
    ]
    if records != expected:
        raise RuntimeError(f"{who} answered a different page than the store holds")


def check_xrange(reply: bytes, facts: LogStore, after: int) -> None:
    entries = decode_resp(reply)[0]
    expected = [
        [f"0-{after + 1 + i}".encode(), [b"r", facts.bodies[after + i]]] for i in range(PAGE)
    ]
    if entries != expected:
        raise RuntimeError("Redis answered a different range than was loaded")


# --- the benchmark ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """A server under load: where it listens, what it is asked, how its reply is known."""

    name: str
    path: Path
    request: bytes
    framing: Framing
    reference: bytes | None  # None: the reply is walked by its framing
    pid: int


def measure(contenders: list[Contender], quick: bool) -> dict[str, dict[int, Outcome]]:
    """Every contender at each connection count, in interleaved windows.

    All the servers are up together and take turns, ``ROUNDS`` windows each (the order
    reversed every other round), so a slower minute of the machine falls on all of them
    alike instead of on whichever was measured then; each figure is the sum of its
    windows (5 s measured in all, as one window of 5 s was before).
    """
    rounds = 2 if quick else ROUNDS
    window = 0.35 if quick else WINDOW_S
    results: dict[str, dict[int, Outcome]] = {c.name: {} for c in contenders}
    for connections in CONNECTIONS:
        processes, per_process = layout(connections)
        for turn in range(rounds):
            for contender in contenders if turn % 2 == 0 else contenders[::-1]:
                load = Load(
                    path=str(contender.path),
                    request=contender.request,
                    framing=contender.framing,
                    connections=per_process,
                    warmup=0.2 if quick else WARMUP_S,
                    duration=window,
                    reference=contender.reference,
                )
                got = drive(load, processes, contender.pid)
                before = results[contender.name].get(connections)
                results[contender.name][connections] = got if before is None else before.plus(got)
    return results


def run(quick: bool) -> Table:
    table = Table(
        f"4. logs page requests/s over a Unix socket ({PAGE} records of a {RECORDS // 1000}k"
        " run), one Python load generator for all"
    )
    with sandbox() as box:
        _run(box, table, quick)
    return table


def _run(box: Sandbox, table: Table, quick: bool) -> None:
    root = box.tmpdir("tp")
    repo = make_repo(root)
    facts = build_log_store(root / "state", RECORDS, keep_bodies=True)
    after = RECORDS // 2
    request = request_line("logs", {"run": facts.run, "after": str(after)})
    contenders: list[Contender] = []
    # Up together for the whole measurement; stopped in reverse order of their start.
    stops: list[Callable[[], object]] = []
    try:
        daemon = start_daemon(box, repo, root)
        stops.append(lambda: stop_daemon(box, daemon))
        client = Client(daemon.socket)
        reference = client.raw(request)
        client.close()
        check_page(page_records(reference), facts, after, "sloopd")
        contenders.append(
            Contender("sloopd", daemon.socket, request, "line", reference, daemon.pid)
        )

        path = root / "bare.sock"
        store = root / "state" / STORE_FILE
        argv = [sys.executable, "-m", "benchmarks.servers", "logs", str(store), str(path)]
        bare = box.spawn(argv, cwd=REPO_ROOT)
        stops.append(lambda: box.stop(bare))
        wait_for_socket(path, bare)
        client = Client(path)
        bare_reference = client.raw(request)
        client.close()
        check_page(page_records(bare_reference), facts, after, "the bare server")
        contenders.append(Contender("bare", path, request, "line", bare_reference, bare.pid))

        floor_path = root / "floor.sock"
        argv = [sys.executable, "-m", "benchmarks.servers", "logs-floor", str(store)]
        floor = box.spawn([*argv, str(floor_path)], cwd=REPO_ROOT)
        stops.append(lambda: box.stop(floor))
        wait_for_socket(floor_path, floor)
        client = Client(floor_path)
        floor_reference = client.raw(request)
        client.close()
        if floor_reference != reference:
            raise RuntimeError("the floor server's page is not sloopd's, byte for byte")
        contenders.append(Contender("floor", floor_path, request, "line", reference, floor.pid))

        binary = ensure_redis()
        if binary is None:
            table.alarms.append("redis-server is not installed and could not be: no Redis figures")
        else:
            proc, redis_path = start_redis(box, binary, root)
            stops.append(lambda: box.stop(proc))
            redis = Redis(redis_path)
            version = redis_version(redis)
            load_stream(redis, facts)
            command = resp_command(b"XRANGE", STREAM, f"0-{after + 1}", b"+", b"COUNT", PAGE)
            xrange_reference = redis.raw([command])[0]
            redis.close()
            check_xrange(xrange_reference, facts, after)
            contenders.append(
                Contender("redis", redis_path, command, "resp", xrange_reference, proc.pid)
            )
            contenders.append(
                Contender("redis-walked", redis_path, command, "resp", None, proc.pid)
            )
            table.notes.append(
                f"Redis {version}; XRANGE reply {len(xrange_reference)} bytes;"
                f" sloopd reply {len(reference)} bytes; bare reply {len(bare_reference)} bytes"
            )
        outcomes = measure(contenders, quick)
    finally:
        for stop in reversed(stops):
            stop()
    rows(table, outcomes)


def rows(table: Table, outcomes: dict[str, dict[int, Outcome]]) -> None:
    redis = outcomes.get("redis")
    for connections in CONNECTIONS:
        sloopd = outcomes["sloopd"][connections]
        bare = outcomes["bare"][connections]
        c = f"{connections} conn"
        if redis is not None:
            peer = redis[connections]
            met = verdict(sloopd.rate >= GOAL * peer.rate)
            table.add(
                Row(
                    f"sloopd logs page, {c}",
                    rate(sloopd.rate),
                    "Redis XRANGE COUNT 100",
                    rate(peer.rate),
                    ratio(sloopd.rate, peer.rate),
                    f">= {GOAL:.1f}x Redis",
                    met,
                    issue=f"logs-{connections}",
                )
            )
            table.add(
                Row(
                    f"bare uvloop+apsw (dicts), {c}",
                    rate(bare.rate),
                    "Redis XRANGE COUNT 100",
                    rate(peer.rate),
                    ratio(bare.rate, peer.rate),
                )
            )
        table.add(
            Row(
                f"sloopd logs page, {c}",
                rate(sloopd.rate),
                "bare uvloop+apsw (dicts)",
                rate(bare.rate),
                ratio(sloopd.rate, bare.rate),
            )
        )
        floor = outcomes["floor"][connections]
        table.add(
            Row(
                f"sloopd logs page, {c}",
                rate(sloopd.rate),
                "floor: the same query, no checks",
                rate(floor.rate),
                ratio(sloopd.rate, floor.rate),
            )
        )
        if redis is not None:
            walked = outcomes["redis-walked"][connections]
            table.add(
                Row(
                    f"sloopd logs page, {c}",
                    rate(sloopd.rate),
                    "Redis, RESP walked in Python",
                    rate(walked.rate),
                    ratio(sloopd.rate, walked.rate),
                )
            )
    if redis is not None:
        busiest = max(CONNECTIONS)
        s_cpu = outcomes["sloopd"][busiest]
        r_cpu = redis[busiest]
        b_cpu = outcomes["bare"][busiest]
        f_cpu = outcomes["floor"][busiest]
        per = [o.server_cpu / max(1, o.requests) for o in (s_cpu, b_cpu, r_cpu, f_cpu)]
        table.add(
            Row(
                f"server CPU per page, sloopd ({busiest} conn)",
                f"{per[0] * 1e6:.0f} µs",
                "Redis",
                f"{per[2] * 1e6:.0f} µs",
                ratio(per[0], per[2]),
                f"<= {GOAL_CPU:.1f}x Redis",
                verdict(per[0] <= GOAL_CPU * per[2]),
                issue="logs-cpu",
            )
        )
        table.add(
            Row(
                f"server CPU per page, bare ({busiest} conn)",
                f"{per[1] * 1e6:.0f} µs",
                "Redis",
                f"{per[2] * 1e6:.0f} µs",
                ratio(per[1], per[2]),
            )
        )
        table.add(
            Row(
                f"server CPU per page, sloopd ({busiest} conn)",
                f"{per[0] * 1e6:.0f} µs",
                "floor: the same query, no checks",
                f"{per[3] * 1e6:.0f} µs",
                ratio(per[0], per[3]),
            )
        )
    for name, by_connections in outcomes.items():
        for connections, outcome in by_connections.items():
            table.notes.append(f"{name}, {connections} conn: {outcome.summary()}")
            if outcome.errors:
                table.alarms.append(f"{name}, {connections} conn: {outcome.errors} bad replies")
    table.notes.append(
        f"load generator: {os.cpu_count()} CPUs here; {ROUNDS} interleaved windows per figure"
        " (2 with --quick);"
        " 1 connection = 1 process,"
        " 16 connections = 2 processes x 8 (see benchmarks/loadgen.py)"
    )
