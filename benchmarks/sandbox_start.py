"""6. ``sandbox``: what bwrap adds to a stage start, and what an isolated checkout costs.

``python -m benchmarks.sandbox_start [--quick]`` prints one table (``run(quick)`` returns it,
for ``benchmarks/__main__.py``).  Figures, each set against a floor measured in the same run:

* **stage start**: ``true`` spawned through ``asyncio.create_subprocess_exec`` and waited for,
  as the runner does, directly (the floor) and through ``sandbox.command`` with the network
  on and off; median and p99 over 50 spawns each (20 with ``--quick``), interleaved so noise
  hits all three alike.  Building the argv (``command()``, which lists ``/``) is timed apart.
* **per-run checkout** on a repository of 10,000 files (100 folders, packed as a clone would
  be): ``checkout.create`` against ``git worktree add`` of the same commit, then removal
  (``checkout.remove`` against ``git worktree remove --force``); median of 5 rounds (2 with
  ``--quick``), the order alternating each round, dirty pages flushed before each timing.
* **bring back** one new commit: ``checkout.bring_back`` through the sandboxed upload-pack
  against a plain ``git fetch`` of the same branch from the same checkout.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Row,
    Table,
    git,
    load_average,
    median,
    micros,
    millis,
    percentile,
    ratio,
    sandbox,
)
from sloopd.git import checkout, intake
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.proc.sandbox import SandboxSpec

FILES = 10_000
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/sloop/home"}


async def _spawn(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL)
    if await proc.wait() != 0:
        raise RuntimeError(f"{argv[0]} ... exited {proc.returncode}")
    return time.perf_counter() - start


def stage_start(root: Path, spawns: int) -> dict[str, list[float]]:
    """Seconds per spawn of ``true``: direct, sandboxed with and without network."""
    work, home = root / "work", root / "home"
    work.mkdir()
    home.mkdir()
    spec = SandboxSpec(checkout=work, home=home, env=ENV)
    argvs = {
        "direct": ["true"],
        "net on": bwrap_sandbox.command(spec, ["true"]),
        "net off": bwrap_sandbox.command(SandboxSpec(work, home, network=False, env=ENV), ["true"]),
    }
    samples: dict[str, list[float]] = {name: [] for name in argvs}

    async def rounds() -> None:
        for argv in argvs.values():  # warm-up: page cache, first exec
            await _spawn(argv)
        for _ in range(spawns):
            for name, argv in argvs.items():
                samples[name].append(await _spawn(argv))

    asyncio.run(rounds())
    build = []
    for _ in range(200):
        start = time.perf_counter()
        bwrap_sandbox.command(spec, ["true"])
        build.append(time.perf_counter() - start)
    samples["build"] = build
    return samples


def make_big_repo(root: Path, files: int) -> tuple[Path, str]:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        folder = repo / f"d{i % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n" * 20, encoding="utf-8")
    git(repo, "-c", "gc.auto=0", "add", "-A")  # no auto gc racing the explicit one
    git(repo, "-c", "gc.auto=0", "commit", "-q", "-m", "10k files")
    git(repo, "gc", "-q")
    return repo, git(repo, "rev-parse", "HEAD")


def _timed(step: Callable[[], object]) -> float:
    os.sync()  # earlier writes must not be flushed on this figure's clock
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _run_coro(coro: Coroutine[Any, Any, Any]) -> None:
    asyncio.run(coro)


def _interleaved(
    samples: dict[str, list[float]], i: int, steps: list[tuple[str, Callable[[], object]]]
) -> None:
    """Time each step once, in reverse order on odd rounds; round -1 is not recorded."""
    for name, step in steps if i % 2 == 0 else reversed(steps):
        took = _timed(step)
        if i >= 0:
            samples[name].append(took)


def checkout_costs(root: Path, rounds: int) -> dict[str, list[float]]:
    repo, sha = make_big_repo(root, FILES)
    samples: dict[str, list[float]] = {k: [] for k in ("create", "worktree", "rm", "wt rm")}
    for i in range(rounds):
        work, tree = root / f"co{i}", root / f"wt{i}"
        create = checkout.create(repo, work, f"sloop/{i}", sha, timeout=600)
        add = ["worktree", "add", "-q", "-b", f"bench/{i}", str(tree), sha]
        steps: list[tuple[str, Callable[[], object]]] = [
            ("create", partial(_run_coro, create)),
            ("worktree", partial(git, repo, *add)),
        ]
        _interleaved(samples, i, steps)
        if sorted(p.name for p in work.iterdir()) != sorted(p.name for p in tree.iterdir()):
            raise RuntimeError("the checkout and the worktree hold different files")
        steps = [
            ("rm", partial(_run_coro, checkout.remove(work))),
            ("wt rm", partial(git, repo, "worktree", "remove", "--force", str(tree))),
        ]
        _interleaved(samples, i, steps)
    return samples


def bring_back_costs(root: Path, rounds: int) -> dict[str, list[float]]:
    repo = root / "small"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    work, home = root / "small-co", root / "small-home"
    home.mkdir()
    _run_coro(checkout.create(repo, work, "sloop/t", base, timeout=60))
    (work / "b.txt").write_text("b\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "agent")  # host git is fine here: nothing hostile
    objects = asyncio.run(checkout.objects_dir(repo, timeout=60))
    iso = checkout.Isolation(objects=objects, home=home, hide=(repo / ".git",))
    upload = checkout.upload_pack_command(work, iso)
    samples: dict[str, list[float]] = {"sandboxed": [], "plain": []}
    for i in range(-1, rounds):  # round -1 is a warm-up: the new objects land then
        back = intake.bring_back(
            repo,
            work,
            "sloop/t",
            f"refs/sloop/b{i + 1}",
            base,
            sandboxed_upload_pack=upload,
            timeout=60,
        )
        fetch = ["fetch", "-q", "--no-tags", str(work), f"+refs/heads/sloop/t:refs/p{i + 1}"]
        steps: list[tuple[str, Callable[[], object]]] = [
            ("sandboxed", partial(_run_coro, back)),
            ("plain", partial(git, repo, *fetch)),
        ]
        _interleaved(samples, i, steps)
    return samples


def checkout_costs_in_memory(rounds: int) -> dict[str, list[float]] | None:
    """The same on /dev/shm: the git work without the disk's noise (None without it)."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        return None
    root = Path(tempfile.mkdtemp(prefix="sbm", dir="/dev/shm"))
    try:
        return checkout_costs(root, rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _checkout_rows(table: Table, costs: dict[str, list[float]], where: str) -> None:
    create, tree = median(costs["create"]), median(costs["worktree"])
    figure = f"checkout.create, {FILES // 1000}k files, {where} (median)"
    table.add(Row(figure, millis(create), "git worktree add", millis(tree), ratio(create, tree)))
    rm, wt_rm = median(costs["rm"]), median(costs["wt rm"])
    figure = f"checkout.remove, {FILES // 1000}k files, {where} (median)"
    peer = "git worktree remove --force"
    table.add(Row(figure, millis(rm), peer, millis(wt_rm), ratio(rm, wt_rm)))
    samples = ", ".join(
        f"{c * 1e3:.0f}/{w * 1e3:.0f}"
        for c, w in zip(costs["create"], costs["worktree"], strict=True)
    )
    table.notes.append(f"create/worktree samples on {where} (ms): {samples}")


def run(quick: bool) -> Table:
    spawns, rounds = (20, 2) if quick else (50, 5)
    table = Table("6. sandbox: stage start through bwrap, and an isolated checkout per run")
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    with sandbox() as box:
        starts = stage_start(box.tmpdir("sbs"), spawns)
        on_disk = checkout_costs(box.tmpdir("sbc"), rounds)
        in_memory = checkout_costs_in_memory(rounds)
        backs = bring_back_costs(box.tmpdir("sbb"), max(rounds, 5))
    direct = starts["direct"]
    for name in ("net on", "net off"):
        for label, pick in (("median", median), ("p99", lambda v: percentile(v, 99))):
            value, floor = pick(starts[name]), pick(direct)
            figure = f"start `true` through bwrap, network {name[4:]} ({label})"
            peer = f"spawn `true` directly ({label})"
            table.add(Row(figure, millis(value), peer, millis(floor), ratio(value, floor)))
    table.add(Row("  building the bwrap argv (command())", micros(median(starts["build"]))))
    _checkout_rows(table, on_disk, "disk (/tmp)")
    if in_memory is not None:
        _checkout_rows(table, in_memory, "tmpfs (/dev/shm)")
    back, plain = median(backs["sandboxed"]), median(backs["plain"])
    figure = "bring_back, 1 commit, sandboxed upload-pack"
    peer = "git fetch, host upload-pack"
    table.add(Row(figure, millis(back), peer, millis(plain), ratio(back, plain)))
    table.notes.insert(0, f"{spawns} spawns per start figure (interleaved); {rounds} rounds")
    return table


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    print(f"load average at start: {load_average()}", flush=True)
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (apt-get install bubblewrap)", file=sys.stderr)
        return 1
    table = run(quick)
    table.notes.append(f"load average at end: {load_average()}")
    print(table.text())
    return 1 if table.alarms else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
