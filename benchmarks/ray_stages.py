"""12. ``ray``: stages on a real Ray cluster (``[executor] backend = "ray"``) against local.

Needs a network namespace with only loopback up (``scripts/in-netns``, as ``make ray``):
``scripts/in-netns .venv/bin/python -m benchmarks ray``.  Outside one the table says so
and nothing runs.  The cluster is ``tests.support.raycluster.RayCluster``: a head with no
CPUs and three workers ``w1``..``w3`` (2 CPUs each, custom resources ``wN`` and
``worker``), started one at a time, token authentication on.  Every daemon is a real
``sloopd serve`` with ``sandbox = "bwrap"`` and ``[repo] parallel = 6``; the Ray daemon
asks for ``cpus = 0, custom = { worker = 1 }`` per stage (every worker can take all six
at once, so 3 nodes against 1 compares placement, not capacity); the local daemon
(``backend = "local"``) runs the same flows in the same repository layout and is the
floor of every figure.  All times are the daemon's own, read from its store afterwards
(read-only): a stage's ``stage_started`` → ``stage_finished`` (its ``duration_ms`` in
``show``), a run's ``claimed_at_ms``/``finished_at_ms``.

1. **stage start**: N one-stage runs of a ``true`` command stage, one at a time, after
   one untimed run (the page cache; on Ray, the warm pool in use: issue 36); the
   stage's duration, p50 and p99, on a warm worker (``[executor] warm_actors = 1``, the
   default) against local, against the floor of any sandboxed stage (one bwrap spawn of
   ``true``, network off, on this host, timed in the same run: benchmark 6's
   ``stage_start``) and against a daemon with ``warm_actors = 0`` (an actor made and
   killed per stage, as 0.8.0 did).
2. **lines/s**: one command stage printing ``LINES`` short lines (``seq``); the lines
   stored (``log_records``, the system lines left out) over the stage's duration.
3. **bytes shipped**: a repository whose history holds a few MB (random, so git cannot
   compress it), a flow of two command stages pinned to ``w1`` (the first commits one
   small file); the start-commit bundles the daemon writes under ``<state>/ship/`` are
   watched while they live (they are removed 60 s after use), and their sizes attributed
   to stages by time.  Then main moves by one small commit and a second run on ``w1``
   ships only that.  Floor: ``git bundle create --all`` of the repository.
4. **drain**: 50 queued one-stage ``true`` runs (gate paused while posting, then
   resumed), through Ray three ways and locally; runs/s from ``resume`` to the last
   settled run.  Ray's default placement (``cpus = 0, worker = 1``: Ray packs them onto
   one node), spread over the 3 workers (``cpus = 1`` of each worker's 2: at most two
   per node) and pinned to ``w1`` (``cpus = 0.3333, custom = { w1 = 1 }``: all six fit
   there).  The stages per node are counted from ``stage_finished``'s ``node``.
   The drain over 3 workers is set against local and against a bare-actor floor: the
   same number of bare Ray actors over the 3 workers (``cpus = 1``, ``SPREAD``), six at
   a time, each created, called once and killed, from a process of its own: what
   Ray alone allows a drain that makes an actor per stage.

Also measured in the same run: a bare Ray actor on ``w1`` (created, called once, killed,
from a process of its own as the driver is), the part of a stage start that is Ray's
alone; and the lines' first-to-last ``ts_ms`` (the streaming rate without the start).

On 2 shared cores every Ray node, raylet and actor worker competes with the daemon and
with whatever else runs: the sizes are small, and the load average goes with each figure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import orjson

from benchmarks.common import (
    Client,
    Daemon,
    Row,
    Sandbox,
    Table,
    git,
    load_average,
    make_repo,
    millis,
    percentile,
    rate,
    ratio,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)
from benchmarks.sandbox_start import stage_start as bwrap_start
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.store.db import STORE_FILE
from tests.support.raycluster import RayCluster, in_loopback_namespace, ray_environment

PARALLEL = 6
WORKERS = ("w1", "w2", "w3")
WORKER_CPUS = 2
PORT = 6399
HISTORY_COMMITS = 12
BLOB_BYTES = 384 * 1024  # random: a few MB of history, a third of it in the tree
RUN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Sizes:
    starts: int
    lines: int
    drain: int


def sizes(quick: bool) -> Sizes:
    return Sizes(5, 20_000, 10) if quick else Sizes(20, 200_000, 50)


# --- sloop.toml and tickets ------------------------------------------------------------


def toml_config(backend: str, address: str, lines: int, warm: int | None = None) -> str:
    """Every flow the benchmark uses; on Ray each stage asks for one ``worker`` unit."""
    executor = f'[executor]\nbackend = "{backend}"\n'
    if backend == "ray":
        executor += (
            f'address = "{address}"\nresources = {{ cpus = 0, custom = {{ worker = 1 }} }}\n'
        )
    if warm is not None:
        executor += f"warm_actors = {warm}\n"
    commit = "echo shipped > out.txt && git add out.txt && git commit -q -m out"
    flows = {
        "nop": [("nop", '["true"]', "")],
        "warmup": [("warmup", '["true"]', "")],
        # 1 CPU of a worker's 2: at most two per node, so six at once take all three.
        "spread": [("nop", '["true"]', "resources = { cpus = 1 }")],
        # A third of a CPU: six at once fit on w1, as six fit on the three.
        "pinned": [("nop", '["true"]', "resources = { cpus = 0.3333, custom = { w1 = 1 } }")],
        "flood": [("flood", f'["seq", "{lines}"]', "")],
        "ship": [
            ("first", f"['sh', '-c', '{commit}']", "resources = { custom = { w1 = 1 } }"),
            ("second", '["true"]', "resources = { custom = { w1 = 1 } }"),
        ],
    }
    out = [
        'sandbox = "bwrap"',
        "",
        "[repo]",
        f"parallel = {PARALLEL}",
        "",
        "[agent]",
        'command = ["true"]',
        f"max_log_lines = {max(100_000, lines + 1000)}",
        "",
        executor,
    ]
    for flow, stages in flows.items():
        for name, argv, extra in stages:
            out += [f"[[flows.{flow}.stages]]", f'name = "{name}"', 'action = "command"']
            out += [f"command = {argv}", "network = false"]
            out += [extra, ""] if extra else [""]
    return "\n".join(out) + "\n"


def write_ticket(repo: Path, name: str, flow: str) -> str:
    path = repo / "tickets" / f"{name}.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'+++\nflow = "{flow}"\n+++\n# {name}\n', encoding="utf-8")
    return f"tickets/{path.name}"


def add_history(repo: Path, commits: int) -> None:
    """``commits`` commits each rewriting one of three random blobs: history ≫ tree."""
    data = repo / "data"
    data.mkdir(exist_ok=True)
    for i in range(commits):
        (data / f"blob-{i % 3}.bin").write_bytes(secrets.token_bytes(BLOB_BYTES))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"history {i}")


def bundle_size(repo: Path, *revs: str) -> int:
    """Bytes of ``git bundle create`` of ``revs`` (0 when git finds it empty)."""
    out = repo.parent / "floor.bundle"
    done = subprocess.run(
        ["git", "-C", str(repo), "bundle", "create", "-q", str(out), *revs],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        if "empty bundle" in done.stderr:
            return 0
        raise RuntimeError(f"git bundle create {revs}: {done.stderr.strip()}")
    size = out.stat().st_size
    out.unlink()
    return size


# --- the daemon's store ----------------------------------------------------------------


@dataclass
class StageRow:
    run: str
    stage: str
    started: int
    finished: int
    node: str | None

    @property
    def duration_ms(self) -> int:
        return self.finished - self.started


def read_stages(state_dir: Path) -> list[StageRow]:
    db = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        opened: dict[tuple[str, str], int] = {}
        rows: list[StageRow] = []
        query = "SELECT run, kind, stage, at_ms, data FROM stage_log ORDER BY run, seq"
        for run, kind, stage, at, data in db.execute(query):
            if kind == "stage_started":
                opened[(run, stage)] = at
            elif kind == "stage_finished" and (run, stage) in opened:
                node = orjson.loads(data or "{}").get("node")
                host = node.get("id") if isinstance(node, dict) else None
                rows.append(StageRow(run, stage, opened.pop((run, stage)), at, host))
        return rows
    finally:
        db.close()


def read_runs(state_dir: Path) -> list[tuple[str, str, int | None, int | None]]:
    """(id, state, claimed_at_ms, finished_at_ms) of every run."""
    db = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        query = "SELECT id, state, claimed_at_ms, finished_at_ms FROM runs"
        return [(str(a), str(b), c, d) for a, b, c, d in db.execute(query)]
    finally:
        db.close()


def stored_lines(state_dir: Path, run: str, stage: str) -> tuple[int, int, int]:
    """(the child's lines stored, the first's and the last's ts_ms: when the daemon read
    them)."""
    db = apsw.Connection(str(state_dir / STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        query = (
            "SELECT count(*), min(ts_ms), max(ts_ms) FROM log_records"
            " WHERE run = ? AND stage = ? AND stream != 'system'"
        )
        row = next(iter(db.execute(query, (run, stage))))
        return int(row[0]), int(row[1] or 0), int(row[2] or 0)
    finally:
        db.close()


# --- one daemon ------------------------------------------------------------------------


class Watcher(threading.Thread):
    """Polls ``<state>/ship/`` every 20 ms: each bundle file's name, size, first sight."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.seen: dict[str, tuple[float, int]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                entries = list(os.scandir(self.folder))
            except OSError:
                entries = []
            for entry in entries:
                if entry.name.endswith(".bundle"):
                    try:
                        size = entry.stat().st_size
                    except OSError:
                        continue
                    first = self.seen.get(entry.name, (time.time() * 1000, 0))[0]
                    self.seen[entry.name] = (first, max(size, self.seen.get(entry.name, (0, 0))[1]))
            self.halt.wait(0.02)

    def outbound(self) -> list[tuple[float, int]]:
        """The start-commit bundles (the daemon names them by a uuid's 32 hex digits)."""
        found = [v for k, v in self.seen.items() if len(k) == len("x" * 32 + ".bundle")]
        return sorted(found)

    def inbound(self) -> list[tuple[float, int]]:
        return sorted(v for k, v in self.seen.items() if len(k) != len("x" * 32 + ".bundle"))


@dataclass
class Place:
    """One repository with its daemon."""

    box: Sandbox
    root: Path
    repo: Path
    daemon: Daemon
    client: Client
    state: Path
    posted: int = 0
    watcher: Watcher | None = None
    notes: list[str] = field(default_factory=list)

    def post(self, flow: str) -> str:
        self.posted += 1
        path = write_ticket(self.repo, f"{flow}-{self.posted:04d}", flow)
        self.client.call("post", {"path": path})
        return path

    def wait_settled(self, runs: int, timeout: float) -> None:
        """Until ``runs`` runs have settled (read from the store, read-only)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            settled = [r for r in read_runs(self.state) if r[3] is not None]
            if len(settled) >= runs:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{runs} runs did not settle within {timeout:.0f} s")

    def one(self, flow: str) -> None:
        before = len(read_runs(self.state))
        self.post(flow)
        self.wait_settled(before + 1, RUN_TIMEOUT_S)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.halt.set()
        self.client.close()
        stop_daemon(self.box, self.daemon)


def open_place(
    box: Sandbox, backend: str, address: str, lines: int, history: int, warm: int | None = None
) -> Place:
    root = box.tmpdir(f"ry{backend[0]}")
    config = toml_config(backend, address, lines, warm)
    files = {"sloop.toml": config, ".gitignore": "tickets/\n"}
    repo = make_repo(root, files)
    if history:
        add_history(repo, history)
    daemon = start_daemon(box, repo, root, timeout=60)
    client = Client(daemon.socket, timeout=60)
    return Place(box, root, repo, daemon, client, root / "state")


def failed_runs(place: Place) -> list[str]:
    return [
        f"{r[0]} {r[1]}" for r in read_runs(place.state) if r[1] not in ("needs_review", "merged")
    ]


# --- the measurements ------------------------------------------------------------------


@dataclass
class Result:
    durations: dict[str, list[int]] = field(default_factory=dict)  # backend -> stage ms
    loads: dict[str, str] = field(default_factory=dict)  # what -> load average after it
    lines: dict[str, tuple[int, int]] = field(default_factory=dict)  # backend -> (lines, ms)
    drains: dict[str, tuple[int, float]] = field(default_factory=dict)  # how -> (runs, s)
    nodes: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    actor: list[float] = field(default_factory=list)  # bare actor start + call, seconds
    spawn: list[float] = field(default_factory=list)  # bwrap spawn of true, seconds
    bare_drain: tuple[int, float] = (0, 0.0)  # bare actors over 3 workers: (n, seconds)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # first/last line ts


# A bare Ray actor on a worker, started, called once and killed, in a process of its own
# (as the driver is): what any stage on Ray pays before Sloop does anything.
ACTOR_SCRIPT = """
import json, sys, time, ray
ray.init(address=sys.argv[1], namespace="bench", logging_level="ERROR", log_to_driver=False)
@ray.remote
class Bare:
    def ping(self):
        return 1
out = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    actor = Bare.options(num_cpus=0, resources={"w1": 1}, max_restarts=0).remote()
    ray.get(actor.ping.remote())
    out.append(time.perf_counter() - start)
    ray.kill(actor, no_restart=True)
print(json.dumps(out))
"""


def actor_floor(cluster: RayCluster, rounds: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", ACTOR_SCRIPT, cluster.address, str(rounds)],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the bare actor floor failed: {done.stderr[-2000:]}")
    values: list[float] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return values


# N bare actors over the 3 workers, six at a time, each created, called once and
# killed: the drain Ray alone allows when every stage makes its own actor.
DRAIN_SCRIPT = """
import asyncio, json, sys, time, ray
ray.init(address=sys.argv[1], namespace="bench", logging_level="ERROR", log_to_driver=False)
@ray.remote
class Bare:
    def ping(self):
        return 1
async def one(gate):
    async with gate:
        actor = Bare.options(num_cpus=1, resources={"worker": 1}, max_restarts=0,
                             scheduling_strategy="SPREAD").remote()
        await actor.ping.remote()
        ray.kill(actor, no_restart=True)
async def main(n, at_once):
    gate = asyncio.Semaphore(at_once)
    start = time.perf_counter()
    await asyncio.gather(*(one(gate) for _ in range(n)))
    return time.perf_counter() - start
print(json.dumps(asyncio.run(main(int(sys.argv[2]), int(sys.argv[3])))))
"""


def bare_drain(cluster: RayCluster, actors: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", DRAIN_SCRIPT, cluster.address, str(actors), str(PARALLEL)],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the bare actor drain failed: {done.stderr[-2000:]}")
    seconds: float = orjson.loads(done.stdout.strip().splitlines()[-1])
    return seconds


def starts(place: Place, backend: str, sz: Sizes, result: Result) -> None:
    """One untimed run (the page cache; on Ray the pool in use), then ``sz.starts``."""
    place.one("warmup")
    for _ in range(sz.starts):
        place.one("nop")
    result.loads[f"start {backend}"] = load_average()
    result.durations[backend] = [r.duration_ms for r in read_stages(place.state)
                                 if r.stage == "nop"]  # fmt: skip


def starts_and_lines(place: Place, backend: str, sz: Sizes, result: Result) -> None:
    starts(place, backend, sz, result)
    place.one("flood")
    result.loads[f"lines {backend}"] = load_average()
    rows = read_stages(place.state)
    flood = next(r for r in rows if r.stage == "flood")
    counted, first, last = stored_lines(place.state, flood.run, "flood")
    result.lines[backend] = (counted, flood.duration_ms)
    result.spans[backend] = (first, last)


def drain(place: Place, how: str, flow: str, tickets: int, result: Result) -> None:
    before = {r[0] for r in read_runs(place.state)}
    place.client.call("pause", {"reason": "posting the drain's tickets"})
    for _ in range(tickets):
        place.post(flow)
    resumed = time.time() * 1000
    place.client.call("resume")
    place.wait_settled(len(before) + tickets, tickets * 10 + 120)
    runs = [r for r in read_runs(place.state) if r[0] not in before]
    last = max(r[3] or 0 for r in runs)
    result.drains[how] = (len(runs), (last - resumed) / 1000)
    result.loads[f"drain {how}"] = load_average()
    ids = {r[0] for r in runs}
    result.nodes[how] = Counter(
        (r.node or "daemon host")[:8] for r in read_stages(place.state) if r.run in ids
    )


@dataclass
class Shipped:
    first: int = 0
    second: int = 0
    next_run: int = 0
    back: list[int] = field(default_factory=list)
    floor_all: int = 0
    floor_delta: int = 0
    history: int = 0
    tree: int = 0
    load: str = ""
    durations: list[int] = field(default_factory=list)
    left: tuple[int, int] = (0, 0)  # bundles in ship/ after the daemon stopped, bytes


def shipping(box: Sandbox, address: str, lines: int) -> Shipped:
    place = open_place(box, "ray", address, lines, HISTORY_COMMITS)
    shipped = Shipped()
    try:
        watcher = place.watcher = Watcher(place.state / "ship")
        watcher.start()
        shipped.floor_all = bundle_size(place.repo, "--all")
        place.one("ship")
        rows = sorted((r for r in read_stages(place.state)), key=lambda r: r.started)
        first, second = rows[0], rows[1]
        time.sleep(0.2)
        out = watcher.outbound()
        shipped.first = sum(s for t, s in out if first.started - 50 <= t <= first.finished)
        shipped.second = sum(s for t, s in out if second.started - 50 <= t <= second.finished)
        stray = [s for t, s in out if not first.started - 50 <= t <= second.finished]
        if stray:
            place.notes.append(f"bundles outside both stages: {stray}")
        # main moves by one small commit; the next run's first stage ships only that.
        before_tip = git(place.repo, "rev-parse", "main")
        (place.repo / "small.txt").write_text("one small change\n", encoding="utf-8")
        git(place.repo, "add", "small.txt")
        git(place.repo, "commit", "-q", "-m", "small change")
        shipped.floor_delta = bundle_size(place.repo, "main", f"^{before_tip}")
        seen = len(out)
        place.one("ship")
        time.sleep(0.2)
        later = watcher.outbound()[seen:]
        shipped.next_run = sum(s for _, s in later)
        shipped.back = [s for _, s in watcher.inbound()]
        shipped.durations = [r.duration_ms for r in read_stages(place.state)]
        shipped.load = load_average()
        shipped.history = int(
            git(place.repo, "count-objects", "-v").split("size-pack: ")[-1].split()[0] or 0
        )
        loose = git(place.repo, "count-objects", "-v").split("\n")[1].split(": ")[1]
        shipped.history += int(loose)
        shipped.tree = sum(p.stat().st_size for p in (place.repo / "data").iterdir())
        problems = failed_runs(place)
        if problems:
            place.notes.append(f"runs that did not pass: {problems}")
    finally:
        place.close()
    # What the stopped daemon left in ship/ (its bundles are removed 60 s after use).
    left = [p for p in (place.state / "ship").glob("*.bundle")]
    shipped.left = (len(left), sum(p.stat().st_size for p in left))
    for note in place.notes:
        print(f"   ({note})", file=sys.stderr)
    return shipped


def start_cluster(root: Path) -> RayCluster:
    cluster = RayCluster(root, port=PORT)
    cluster.start_head()
    for n, name in enumerate(WORKERS, start=2):
        cluster.start_worker(name, cpus=WORKER_CPUS)
        cluster.wait_for_nodes(n)  # one at a time (tests/conftest.py says why)
    return cluster


def measure(box: Sandbox, sz: Sizes, table: Table) -> tuple[Result, Shipped]:
    result = Result()
    cluster = start_cluster(box.tmpdir("rc"))
    saved = {name: os.environ.get(name) for name in ray_environment(cluster.token)}
    os.environ.update(ray_environment(cluster.token))
    table.notes.append(f"load average with the cluster up (head + 3 workers): {load_average()}")
    try:
        shipped = shipping(box, cluster.address, sz.lines)
        for backend in ("local", "ray"):
            place = open_place(box, backend, cluster.address, sz.lines, 0)
            try:
                starts_and_lines(place, backend, sz, result)
                if backend == "ray":
                    # The floor of any sandboxed stage, on this host, in the same run.
                    spawned = bwrap_start(box.tmpdir("bw"), sz.starts * 2)
                    result.spawn = spawned["net off"]
                    result.loads["bwrap spawn"] = load_average()
                    result.actor = actor_floor(cluster, sz.starts)
                    result.loads["bare actor"] = load_average()
                    drain(place, "ray, default placement", "nop", sz.drain, result)
                    drain(place, "ray, 3 workers", "spread", sz.drain, result)
                    drain(place, "ray, pinned to w1", "pinned", sz.drain, result)
                    result.bare_drain = (sz.drain, bare_drain(cluster, sz.drain))
                    result.loads["bare actor drain"] = load_average()
                else:
                    drain(place, "local", "nop", sz.drain, result)
                result.failures += failed_runs(place)
            finally:
                place.close()
        # Every stage making and killing its own actor (warm_actors = 0), as in 0.8.0.
        place = open_place(box, "ray", cluster.address, sz.lines, 0, warm=0)
        try:
            starts(place, "cold", sz, result)
            result.failures += failed_runs(place)
        finally:
            place.close()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        cluster.stop()
    return result, shipped


# --- the table -------------------------------------------------------------------------


def kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 10 * 1024 else f"{n} B"


GOAL = 2.0  # a warm remote stage against a local one, p50 (issue 36)


def start_rows(table: Table, result: Result) -> None:
    local, ray = result.durations["local"], result.durations["ray"]
    cold, spawn = result.durations["cold"], result.spawn
    for label, q in (("p50", 50), ("p99", 99)):
        mine, floor = percentile(ray, q) / 1000, percentile(local, q) / 1000
        met = mine <= GOAL * floor
        table.add(
            Row(
                f"`true` command stage, start to end, on a warm worker ({label})",
                millis(mine),
                f"the same stage, backend local ({label})",
                millis(floor),
                ratio(mine, floor),
                f"<= {GOAL:.0f}x local" if q == 50 else "",
                verdict(met) if q == 50 else "",
            )
        )
    for label, q in (("p50", 50), ("p99", 99)):
        for what, values in (("on a warm worker", ray), ("backend local", local)):
            table.add(
                Row(
                    f"`true` command stage, {what} ({label})",
                    millis(percentile(values, q) / 1000),
                    f"bwrap spawn of `true`, network off, this host ({label})",
                    millis(percentile(spawn, q)),
                    ratio(percentile(values, q) / 1000, percentile(spawn, q)),
                )
            )
    for label, q in (("p50", 50), ("p99", 99)):
        mine, floor = percentile(cold, q) / 1000, percentile(local, q) / 1000
        table.add(
            Row(
                f"`true` command stage on a worker, warm_actors = 0 ({label})",
                millis(mine),
                f"the same stage, backend local ({label})",
                millis(floor),
                ratio(mine, floor),
            )
        )
    warm_p50, cold_p50 = percentile(ray, 50) / 1000, percentile(cold, 50) / 1000
    table.add(
        Row(
            "`true` command stage on a warm worker (p50)",
            millis(warm_p50),
            "the same, warm_actors = 0: an actor made per stage (p50)",
            millis(cold_p50),
            ratio(warm_p50, cold_p50),
        )
    )


def rows(table: Table, result: Result, shipped: Shipped) -> None:
    local, ray = result.durations["local"], result.durations["ray"]
    start_rows(table, result)
    actor = percentile(result.actor, 50)
    table.add(
        Row(
            "`true` command stage, start to end, on a warm worker (p50)",
            millis(percentile(ray, 50) / 1000),
            "bare Ray actor on w1: create + 1 call (p50)",
            millis(actor),
            ratio(percentile(ray, 50) / 1000, actor),
        )
    )
    table.add(
        Row(
            "  bare Ray actor + the local stage (p50s summed)",
            millis(actor + percentile(local, 50) / 1000),
            "the same stage, backend local (p50)",
            millis(percentile(local, 50) / 1000),
            ratio(actor + percentile(local, 50) / 1000, percentile(local, 50) / 1000),
        )
    )
    (ray_lines, ray_ms), (local_lines, local_ms) = result.lines["ray"], result.lines["local"]
    ray_rate, local_rate = ray_lines / (ray_ms / 1000), local_lines / (local_ms / 1000)
    table.add(
        Row(
            f"lines/s streamed back (`seq {ray_lines}` on a worker)",
            rate(ray_rate),
            "the same stage, backend local",
            rate(local_rate),
            ratio(ray_rate, local_rate),
        )
    )
    spans = {k: max(1, last - first) / 1000 for k, (first, last) in result.spans.items()}
    ray_span, local_span = ray_lines / spans["ray"], local_lines / spans["local"]
    table.add(
        Row(
            "  the same, first line stored to last (ts_ms)",
            rate(ray_span),
            "the same, backend local",
            rate(local_span),
            ratio(ray_span, local_span),
        )
    )
    full = shipped.floor_all
    table.add(
        Row(
            "bytes shipped, 1st stage of a run, fresh node",
            kib(shipped.first),
            "git bundle create --all",
            kib(full),
            ratio(shipped.first, full),
        )
    )
    table.add(
        Row(
            "bytes shipped, 2nd stage, same run, same node",
            kib(shipped.second),
            "git bundle create --all",
            kib(full),
            ratio(shipped.second, full),
        )
    )
    table.add(
        Row(
            "bytes shipped, next run after main moved 1 commit",
            kib(shipped.next_run),
            "git bundle main ^old-main",
            kib(shipped.floor_delta),
            ratio(shipped.next_run, shipped.floor_delta),
        )
    )
    local_runs, local_s = result.drains["local"]
    for how in ("ray, default placement", "ray, 3 workers", "ray, pinned to w1"):
        runs, seconds = result.drains[how]
        table.add(
            Row(
                f"drain {runs} `true` runs, parallel {PARALLEL}, {how}",
                f"{runs / seconds:.2f}/s",
                "the same drain, backend local",
                f"{local_runs / local_s:.2f}/s",
                ratio(runs / seconds, local_runs / local_s),
            )
        )
    spread, (bare_n, bare_s) = result.drains["ray, 3 workers"], result.bare_drain
    table.add(
        Row(
            f"drain {spread[0]} `true` runs, parallel {PARALLEL}, ray, 3 workers",
            f"{spread[0] / spread[1]:.2f}/s",
            f"{bare_n} bare Ray actors over 3 workers, {PARALLEL} at a time (create+call+kill)",
            f"{bare_n / bare_s:.2f}/s",
            ratio(spread[0] / spread[1], bare_n / bare_s),
        )
    )
    pinned = result.drains["ray, pinned to w1"]
    table.add(
        Row(
            f"drain, ray, 3 workers vs pinned to 1 ({spread[0]} runs)",
            f"{spread[0] / spread[1]:.2f}/s",
            "the same drain, pinned to w1",
            f"{pinned[0] / pinned[1]:.2f}/s",
            ratio(spread[0] / spread[1], pinned[0] / pinned[1]),
        )
    )
    mean_ray, mean_local = sum(ray) / len(ray), sum(local) / len(local)
    cold = result.durations["cold"]
    table.notes.append(
        f"stage start: {len(ray)} ray (warm), {len(cold)} ray (warm_actors = 0) and"
        f" {len(local)} local runs, one at a time after one untimed run each; mean"
        f" {mean_ray:.0f} / {sum(cold) / len(cold):.0f} / {mean_local:.0f} ms, max"
        f" {max(ray)} / {max(cold)} / {max(local)} ms; bwrap spawn ({len(result.spawn)})"
        f" p50/p99 {percentile(result.spawn, 50) * 1e3:.1f}"
        f"/{percentile(result.spawn, 99) * 1e3:.1f} ms;"
        f" bare actor ({len(result.actor)} rounds) p50/p99/max"
        f" {percentile(result.actor, 50) * 1e3:.0f}/{percentile(result.actor, 99) * 1e3:.0f}"
        f"/{max(result.actor) * 1e3:.0f} ms"
    )
    table.notes.append(
        "drains: 'default placement' asks for cpus = 0, worker = 1 (SPREAD over the nodes);"
        " '3 workers' for cpus = 1 of each worker's 2 (at most 2 per node);"
        " 'pinned' for cpus = 0.3333 and w1 = 1 (all 6 fit on w1)"
    )
    table.notes.append(
        f"lines: ray {ray_lines} stored in {ray_ms} ms, local {local_lines} in {local_ms} ms"
    )
    table.notes.append(
        f"shipping repository: {HISTORY_COMMITS} commits rewriting 3 random files of"
        f" {BLOB_BYTES // 1024} KiB (objects {shipped.history} KiB on disk, tree"
        f" {shipped.tree // 1024} KiB); bundles back from the node seen:"
        f" {[kib(b) for b in shipped.back] or 'none (removed before a poll saw them)'};"
        f" its stages' durations ms: {shipped.durations}; left in <state>/ship/ after the"
        f" daemon stopped: {shipped.left[0]} bundles, {kib(shipped.left[1])}"
    )
    table.notes.append(
        f"bare actor drain: {result.bare_drain[0]} actors in {result.bare_drain[1]:.1f} s"
    )
    for how, counted in result.nodes.items():
        runs, seconds = result.drains[how]
        placed = ", ".join(f"{node} {n}" for node, n in counted.most_common())
        table.notes.append(
            f"drain {how}: {runs} runs in {seconds:.1f} s; stages per node: {placed}"
        )
    table.notes.append(
        "load average after each step: "
        + "; ".join(f"{what}: {load}" for what, load in result.loads.items())
        + f"; shipping: {shipped.load}"
    )
    if result.failures:
        table.alarms.append(f"runs that did not pass: {result.failures[:10]}")


def run(quick: bool) -> Table:
    sz = sizes(quick)
    table = Table(
        f"12. ray: stages on a real Ray cluster (head + 3 workers, loopback) vs backend local;"
        f" parallel {PARALLEL}, bwrap"
    )
    if not in_loopback_namespace():
        table.alarms.append(
            "not in a loopback-only network namespace: run"
            " `scripts/in-netns .venv/bin/python -m benchmarks ray`"
        )
        return table
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        table.alarms.append("Ray is not installed: pip install -e '.[ray]'")
        return table
    table.notes.append(f"load average at start: {load_average()}")
    with sandbox() as box:
        result, shipped = measure(box, sz, table)
    rows(table, result, shipped)
    return table


def main(argv: list[str]) -> int:
    table = run("--quick" in argv)
    table.notes.append(f"load average at end: {load_average()}")
    print(table.text())
    return 1 if table.alarms else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
