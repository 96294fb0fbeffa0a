"""14. ``treesize``: the same no-op stages through a real daemon on a small and a big tree.

Why (issue 36): since 0.8.0 every stage execution starts in a checkout made anew from a
commit, so a stage costs the whole tree each time, though the stages here do nothing.
The goal is that a stage (start to end of a ``true`` command) at 20,000 files takes at
most 1.5x the same at 100 files, and a run of three such stages (claim to finish) too;
at 100,000 files at most 2x.  This measures it in one run, through the real daemon.

Each size gets a repository of that many small files (100 folders), a flow of three
``command`` stages running ``true`` (no ``sync``/``ff_only``: nothing merges, every
run starts from the same ``main``), ``parallel = 1``, ``sandbox = "bwrap"``, and
``RUNS`` tickets posted while the gate is paused, then drained.  From the store: each
stage's ``stage_started`` → ``stage_finished`` and each run's claim → finish, medians.
The floor is the 100-file figure of the same run; each size's stage p50 and p99 are also
set against one bwrap spawn of ``true`` (network off), timed in the same run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import apsw

from benchmarks.common import (
    Client,
    Row,
    Table,
    git,
    load_average,
    median,
    millis,
    percentile,
    ratio,
    sandbox,
    start_daemon,
    stop_daemon,
    verdict,
)
from benchmarks.sandbox_start import stage_start
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.store.db import STORE_FILE

RUNS = 6
GOALS = {20_000: 1.5, 100_000: 2.0}
TOML = 'sandbox = "bwrap"\n\n[repo]\nparallel = 1\n\n[agent]\ncommand = ["true"]\n\n' + "".join(
    f'[[flows.default.stages]]\nname = "s{n}"\naction = "command"\ncommand = ["true"]\n\n'
    for n in (1, 2, 3)
)


def big_repo(root: Path, files: int) -> Path:
    """``files`` small files in 100 folders, ``sloop.toml`` and the tickets' folder."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in range(files):
        folder = repo / f"d{n % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{n}.txt").write_text(f"{n}\n", encoding="ascii")
    (repo / "sloop.toml").write_text(TOML, encoding="utf-8")
    (repo / ".gitignore").write_text("tickets/\n", encoding="utf-8")
    tickets = repo / "tickets"
    tickets.mkdir()
    for n in range(1, RUNS + 1):
        (tickets / f"t{n}.md").write_text(f"# Ticket {n}\n\nNothing.\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bench tree")
    return repo


def measure(root: Path, files: int, timeout: float) -> tuple[list[float], float]:
    """(every stage's ms, median run ms) for ``RUNS`` runs at ``files`` files."""
    repo = big_repo(root, files)
    with sandbox() as box:
        daemon = start_daemon(box, repo, root)
        try:
            client = Client(daemon.socket, timeout=120)
            client.call("pause", {"reason": "posting"})
            for n in range(1, RUNS + 1):
                client.call("post", {"path": f"tickets/t{n}.md"})
            client.call("resume")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                shown = client.call("show")
                if shown.get("recent_total", 0) >= RUNS and not shown.get("runs"):
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"{RUNS} runs at {files} files did not end in {timeout:.0f} s")
            client.close()
        finally:
            stop_daemon(box, daemon)
    return _read(root / "state" / STORE_FILE)


def _read(store: Path) -> tuple[list[float], float]:
    db = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        started: dict[tuple[str, str], int] = {}
        stages: list[float] = []
        for run, kind, stage, at in db.execute(
            "SELECT run, kind, stage, at_ms FROM stage_log ORDER BY run, seq"
        ):
            if kind == "stage_started":
                started[(run, stage)] = at
            elif kind == "stage_finished" and (run, stage) in started:
                stages.append(float(at - started.pop((run, stage))))
        runs = [
            float(finished - claimed)
            for claimed, finished in db.execute(
                "SELECT claimed_at_ms, finished_at_ms FROM runs WHERE finished_at_ms IS NOT NULL"
            )
        ]
        states: dict[str, int] = defaultdict(int)
        for (state,) in db.execute("SELECT state FROM runs"):
            states[state] += 1
    finally:
        db.close()
    if len(runs) < RUNS or len(stages) < 3 * RUNS:
        raise RuntimeError(f"the runs did not all end: {dict(states)}")
    return stages, median(runs)


def run(quick: bool) -> Table:
    sizes = (100, 2_000) if quick else (100, 10_000, 20_000, 100_000)
    table = Table(
        f"14. treesize: three `true` command stages per run, {RUNS} runs, parallel 1, "
        "bwrap, through a real daemon, by files in the tree"
    )
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    table.notes.append(f"load average at start: {load_average()}")
    found: dict[int, tuple[list[float], float]] = {}
    with sandbox() as box:
        for files in sizes:
            found[files] = measure(box.tmpdir("ts"), files, timeout=120 + files / 50)
        # The floor of any sandboxed stage, in the same run: one bwrap spawn of ``true``.
        spawns = stage_start(box.tmpdir("sp"), 10 if quick else 40)["net off"]
    spawn_ms = median(spawns) * 1000
    small_stage, small_run = median(found[sizes[0]][0]), found[sizes[0]][1]
    for files in sizes:
        stages, run_ms = found[files]
        stage_ms = median(stages)
        table.add(
            Row(
                f"stage p50 / p99 at {files:,} files",
                f"{stage_ms:.1f} / {percentile(stages, 99):.1f} ms",
                "one bwrap spawn of `true` (p50)",
                millis(spawn_ms / 1000),
                ratio(stage_ms, spawn_ms),
                "",
                "",
            )
        )
        goal = GOALS.get(files)
        for what, value, floor in (("stage", stage_ms, small_stage), ("run", run_ms, small_run)):
            met = None if goal is None else value <= goal * floor
            table.add(
                Row(
                    f"{what} (median) at {files:,} files",
                    millis(value / 1000),
                    f"the same at {sizes[0]} files",
                    millis(floor / 1000),
                    ratio(value, floor),
                    f"≤ {goal}x" if goal is not None else "",
                    verdict(met) if met is not None else "",
                )
            )
    table.notes.append(f"load average at the end: {load_average()}")
    return table
