"""4. ``logs`` page requests per second: sloopd (with and without its log cache), two bare
uvloop+apsw servers, and Redis 7.

All of them serve the same page (the 100 records after the middle cursor of a 10k-record
run) over a Unix socket, and all are driven by the same load generator
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
- sloopd with ``log_cache = 0`` (0.9.0), on a copy of the store: every page read from
  the store, as a page nobody read before is.  The first sloopd, with the default log
  cache, joins the page from memory after its first read (``sloopd.core.logcache``);
  this one says what a page costs that is not held.
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
from benchmarks.redis_peer import (
    STREAM,
    Redis,
    ensure_redis,
    load_stream,
    redis_version,
    start_redis,
)
from sloopd.store.db import STORE_FILE

RECORDS = 10_000
PAGE = 100
GOAL = 1.0  # requests/s against Redis's
GOAL_CPU = 1.0  # server CPU per page against Redis's
CONNECTIONS = (1, 16)
ROUNDS = 5  # windows per contender and connection count, interleaved
WINDOW_S = 1.0  # measured per window (ROUNDS of them: 5 s per figure)
WARMUP_S = 0.3  # per window, on fresh connections to an already warm server


def layout(connections: int) -> tuple[int, int]:
    """(processes, connections per process): one process for one connection, else two."""
    return (1, 1) if connections == 1 else (2, connections // 2)


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
    # The same store under a daemon that holds no log records in memory: every page
    # read from the store, the way a page nobody read before is.
    uncached_root = box.tmpdir("tp-uncached")
    uncached_repo = make_repo(uncached_root, {"sloop.toml": "[repo]\nlog_cache = 0\n"})
    shutil.copytree(root / "state", uncached_root / "state")
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

        uncached = start_daemon(box, uncached_repo, uncached_root)
        stops.append(lambda: stop_daemon(box, uncached))
        client = Client(uncached.socket)
        if client.raw(request) != reference:
            raise RuntimeError("sloopd without its log cache answered another page")
        client.close()
        contenders.append(
            Contender("sloopd-store", uncached.socket, request, "line", reference, uncached.pid)
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
        uncached = outcomes["sloopd-store"][connections]
        table.add(
            Row(
                f"sloopd logs page, {c}",
                rate(sloopd.rate),
                "floor: the same query, no checks",
                rate(floor.rate),
                ratio(sloopd.rate, floor.rate),
            )
        )
        table.add(
            Row(
                f"sloopd, log_cache = 0 (from the store), {c}",
                rate(uncached.rate),
                "floor: the same query, no checks",
                rate(floor.rate),
                ratio(uncached.rate, floor.rate),
            )
        )
        if redis is not None:
            table.add(
                Row(
                    f"sloopd, log_cache = 0 (from the store), {c}",
                    rate(uncached.rate),
                    "Redis XRANGE COUNT 100",
                    rate(redis[connections].rate),
                    ratio(uncached.rate, redis[connections].rate),
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
        u_cpu = outcomes["sloopd-store"][busiest]
        per = [o.server_cpu / max(1, o.requests) for o in (s_cpu, b_cpu, r_cpu, f_cpu, u_cpu)]
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
        table.add(
            Row(
                f"server CPU per page, sloopd with log_cache = 0 ({busiest} conn)",
                f"{per[4] * 1e6:.0f} µs",
                "Redis",
                f"{per[2] * 1e6:.0f} µs",
                ratio(per[4], per[2]),
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
