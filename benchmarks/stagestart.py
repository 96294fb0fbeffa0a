"""10. ``stagestart``: what starting a stage in a fresh place costs, against 0.7.0's reset.

Since "a stage is a commit in and a commit out", every stage execution and panel seat
starts in a checkout the daemon makes anew (``RunBranches.fresh``: ``checkout.remove`` of
the previous one, then ``checkout.create`` from the commit) and a HOME made anew
(``ChildStarter.home``).  0.7.0 instead put the one checkout back on the commit with
three sandboxed git calls (``RunBranches.reset_to``: ``reset --hard``, ``clean -f -d``,
``update-ref``, each through ``checkout.run_in_checkout``); that sequence is rebuilt here,
unchanged, so both are timed on the same machine in the same run.  The question the
issue asks: how much a stage start pays for never letting a ``.git`` or a HOME carry
over, on a repository big enough for the files to matter (10,000 files, the fixture of
benchmark 6).

Each round, untimed, plays the stage before: in both checkouts it changes a tracked
file, commits it, and leaves an untracked file and a file in HOME.  Then, timed, with
dirty pages flushed first and the order alternating each round:

* **fresh**: ``checkout.remove`` + ``checkout.create(commit)`` + ``ChildStarter.home``;
* **reset (0.7.0)**: the old ``reset_to`` sequence in the same kind of checkout;
* **the floor**: what a fresh start cannot avoid, timed in parts: one bwrap spawn of
  ``true`` (``sandbox.command``, as benchmark 6) plus writing the commit's tree into an
  empty folder, measured two ways (``git read-tree -u --reset`` into an empty index,
  and ``git archive | tar -x``); the floor takes the faster of the two medians.

p50 and p95 over the rounds, on the disk (/tmp, where state directories live) and on
tmpfs (/dev/shm, the git work without the shared disk's stalls).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from benchmarks.common import Row, Table, git, load_average, millis, percentile, ratio, verdict
from benchmarks.sandbox_start import FILES, make_big_repo
from sloopd.core.paths import Layout
from sloopd.git import checkout
from sloopd.git.checkout import Isolation
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.proc.sandbox import SandboxSpec
from sloopd.runs.spawning import ChildStarter

GOAL = 1.5  # fresh start against the 0.7.0 reset, p50
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/sloop/home"}
BRANCH = "sloop/bench/1"
KINDS = ("fresh", "reset", "spawn", "read-tree", "archive")
PARTS = ("remove", "create", "home")  # of "fresh", timed inside it


def old_reset_to(work: Path, sha: str, isolation: Isolation) -> None:
    """0.7.0's ``RunBranches.reset_to``: three hardened git calls in the sandboxed checkout."""

    async def steps() -> None:
        for args in (
            ["reset", "-q", "--hard", sha],
            ["clean", "-q", "-f", "-d"],
            ["update-ref", f"refs/heads/{BRANCH}", sha],
        ):
            done = await checkout.run_in_checkout(work, args, isolation, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip()}")

    asyncio.run(steps())


def fresh_start(
    repo: Path, work: Path, sha: str, starter: ChildStarter, parts: dict[str, list[float]]
) -> None:
    """Today's ``RunBranches.fresh`` and ``ChildStarter.home``, as a stage start runs them;
    each part's seconds appended to ``parts`` (the whole is timed by the caller)."""

    async def steps() -> None:
        start = time.perf_counter()
        await checkout.remove(work)
        middle = time.perf_counter()
        await checkout.create(repo, work, BRANCH, sha, timeout=300)
        parts["remove"].append(middle - start)
        parts["create"].append(time.perf_counter() - middle)

    asyncio.run(steps())
    start = time.perf_counter()
    starter.files.home("R1")
    parts["home"].append(time.perf_counter() - start)


def spawn_true(argv: list[str]) -> None:
    subprocess.run(argv, stdin=subprocess.DEVNULL, check=True)


def read_tree(repo: Path, target: Path, sha: str) -> None:
    """The commit's files into an empty folder and a new index: git's least work for it."""
    target.mkdir()
    env = {**os.environ, "GIT_INDEX_FILE": str(target.parent / f"{target.name}.index")}
    argv = ["git", f"--git-dir={repo / '.git'}", f"--work-tree={target}"]
    subprocess.run([*argv, "read-tree", "-u", "--reset", sha], env=env, check=True)


def archive(repo: Path, target: Path, sha: str) -> None:
    """The same files through ``git archive | tar -x`` (no index written)."""
    target.mkdir()
    with subprocess.Popen(["git", "-C", str(repo), "archive", sha], stdout=subprocess.PIPE) as pk:
        subprocess.run(["tar", "-x", "-C", str(target)], stdin=pk.stdout, check=True)
    if pk.returncode != 0:
        raise RuntimeError("git archive failed")


def play_stage(work: Path, home: Path, i: int) -> None:
    """What a stage leaves behind: a commit changing one file, an untracked file, HOME."""
    (work / "d00" / "f0.txt").write_text(f"changed by stage {i}\n", encoding="utf-8")
    git(work, "commit", "-q", "-a", "-m", f"stage {i}")  # host git: nothing hostile here
    (work / "left-behind.txt").write_text("untracked\n", encoding="utf-8")
    (home / ".bash_history").write_text("ls\n", encoding="utf-8")


def _timed(step: Callable[[], object]) -> float:
    os.sync()  # earlier writes must not be flushed on this figure's clock
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def measure(root: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds per start, per kind, over ``rounds`` (one untimed warm-up round first)."""
    repo, sha = make_big_repo(root, FILES)
    objects = asyncio.run(checkout.objects_dir(repo, timeout=60))
    layout = Layout(repo=repo, state_dir=root / "state", socket_dir=root / "s")
    none = cast(Any, None)  # home() reads only the layout and the repository's identity
    starter = ChildStarter(layout, none, none, none, {})
    fresh_work, old_work = root / "fresh", root / "old"
    old_home = root / "old-home"
    old_home.mkdir()
    for work in (fresh_work, old_work):
        asyncio.run(checkout.create(repo, work, BRANCH, sha, timeout=300))
    isolation = Isolation(objects=objects, home=old_home, hide=(repo,))
    scratch = root / "scratch"
    scratch.mkdir()
    (scratch / "home").mkdir()
    true_argv = bwrap_sandbox.command(SandboxSpec(scratch, scratch / "home", env=ENV), ["true"])
    targets = {"read-tree": root / "mat-rt", "archive": root / "mat-ar"}
    samples: dict[str, list[float]] = {kind: [] for kind in (*KINDS, *PARTS)}
    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    for i in range(-1, rounds):
        fresh_home = starter.files.home("R1")
        play_stage(fresh_work, fresh_home, i)
        play_stage(old_work, old_home, i)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("fresh", lambda: fresh_start(repo, fresh_work, sha, starter, parts)),
            ("reset", lambda: old_reset_to(old_work, sha, isolation)),
            ("spawn", lambda: spawn_true(true_argv)),
            ("read-tree", lambda: read_tree(repo, targets["read-tree"], sha)),
            ("archive", lambda: archive(repo, targets["archive"], sha)),
        ]
        for name, step in steps if i % 2 == 0 else reversed(steps):
            took = _timed(step)
            if i >= 0:
                samples[name].append(took)
        if i >= 0:
            for part in PARTS:
                samples[part].append(parts[part][-1])
        for target in targets.values():
            shutil.rmtree(target)
            target.with_name(f"{target.name}.index").unlink(missing_ok=True)
        check(fresh_work, old_work, sha)
    return samples


def check(fresh: Path, old: Path, sha: str) -> None:
    """Both ways must end in the same place: the commit's files, nothing else."""
    for work in (fresh, old):
        if git(work, "rev-parse", "HEAD") != sha or git(work, "status", "--porcelain"):
            raise RuntimeError(f"{work} is not a clean checkout of {sha[:12]}")


def rows(table: Table, costs: dict[str, list[float]], where: str) -> None:
    mat = min(("read-tree", "archive"), key=lambda k: percentile(costs[k], 50))
    floor = [s + m for s, m in zip(costs["spawn"], costs[mat], strict=True)]
    n = len(costs["fresh"])
    for label, q in (("p50", 50), ("p95", 95)):
        fresh, reset = percentile(costs["fresh"], q), percentile(costs["reset"], q)
        base = percentile(floor, q)
        figure = f"fresh stage start, {FILES // 1000}k files, {where} ({label})"
        goal = f"<= {GOAL:.1f}x reset" if q == 50 else ""
        table.add(
            Row(
                figure,
                millis(fresh),
                f"0.7.0 reset_to ({label})",
                millis(reset),
                ratio(fresh, reset),
                goal,
                verdict(fresh <= GOAL * reset) if goal else "",
            )
        )
        peer = f"floor: bwrap true + {mat} ({label})"
        table.add(Row(figure, millis(fresh), peer, millis(base), ratio(fresh, base)))
        table.add(
            Row(
                f"0.7.0 reset_to, {where} ({label})",
                millis(reset),
                peer,
                millis(base),
                ratio(reset, base),
            )
        )
    parts = ", ".join(
        f"{k} {percentile(costs[k], 50) * 1e3:.0f}/{percentile(costs[k], 95) * 1e3:.0f}"
        for k in (*KINDS, *PARTS)
    )
    table.notes.append(f"{where}, {n} rounds, p50/p95 ms: {parts}")


def run(quick: bool) -> Table:
    # The shared disk stalls for seconds per round when other work writes: fewer rounds.
    disk_rounds, memory_rounds = (1, 3) if quick else (5, 20)
    table = Table(
        f"10. stagestart: a stage started in a fresh checkout and HOME ({FILES // 1000}k files)"
        " against 0.7.0's reset of the one checkout"
    )
    problem = bwrap_sandbox.probe()
    if problem is not None:
        table.alarms.append(f"no sandbox on this machine: {problem}")
        return table
    table.notes.append(f"load average at start: {load_average()}")
    places = [("disk (/tmp)", "/tmp", disk_rounds)]
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        places.append(("tmpfs (/dev/shm)", "/dev/shm", memory_rounds))
    for where, parent, rounds in places:
        root = Path(tempfile.mkdtemp(prefix="ss", dir=parent))
        try:
            rows(table, measure(root, rounds), where)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    table.notes.append(
        "fresh = checkout.remove + checkout.create + ChildStarter.home; reset = 0.7.0's"
        " reset --hard + clean -f -d + update-ref, each a sandboxed git (run_in_checkout);"
        " floor = one bwrap spawn of true + the tree written into an empty folder"
    )
    return table


def main(argv: list[str]) -> int:
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (apt-get install bubblewrap)", file=sys.stderr)
        return 1
    table = run("--quick" in argv)
    table.notes.append(f"load average at end: {load_average()}")
    print(table.text())
    return 1 if table.alarms else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
