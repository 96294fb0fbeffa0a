"""The floor of benchmark 11 (``drain``): a run's git and sandbox steps without the daemon.

For each no-op ticket, the steps the daemon takes for ``implement`` → ``sync`` →
``ff_only``, called straight from the same library functions (``sloopd.git.checkout``,
``checkout_edits``, ``gitops.ff_only``, ``sandbox.command``) with nothing around them:
no store, scheduler, log sink, credentials, worker socket, events or read model.

1. ``checkout.create`` of the run's checkout at ``main``, a HOME with a git identity;
2. the agent (the same ``sh`` one-liner the daemon runs) in bwrap, network on;
3. ``bring_back`` (fetch through the sandboxed upload-pack) whose sandbox first lists
   what is left uncommitted (``checkout_edits.listing_upload_pack``, as the daemon
   does since 0.8.0), the run's branch moved in the same transaction;
4. sync, holding main's slot (one lock, as ``sloopd.landing.merge_slot``): main's tip merged
   into the work in the daemon's scratch repository (``sloopd.git.scratch``), the
   execution's ref and the run's branch moved;
5. ``ff_only`` in the same hold, then the lock given back; when ``main`` moved anyway
   (it cannot here), back to 4;
6. the checkout removed.

``workers`` tickets go through at once: 1 is the steps back to back, 8 the daemon's
``parallel``.  What the daemon adds on top of this is its own cost per run.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from sloopd.git import checkout, checkout_edits, intake
from sloopd.git import ops as gitops
from sloopd.git.checkout import Isolation
from sloopd.git.scratch import ScratchRepository
from sloopd.proc import sandbox as bwrap_sandbox
from sloopd.proc.sandbox import CHECKOUT_PATH, HOME_PATH, SandboxSpec

TIMEOUT = 300.0
IDENTITY = ("bench", "bench@example.invalid")


@dataclass
class Floor:
    """Seconds per step summed over the tickets, and the wall time of them all."""

    tickets: int = 0
    wall: float = 0.0
    resyncs: int = 0
    steps: dict[str, float] = field(default_factory=dict)

    def add(self, step: str, seconds: float) -> None:
        self.steps[step] = self.steps.get(step, 0.0) + seconds

    @property
    def rate(self) -> float:
        return self.tickets / self.wall if self.wall > 0 else 0.0


class _Clock:
    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.floor.add(step, now - self.last)
        self.last = now


def _home(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    (path / ".gitconfig").write_text(
        f'[user]\n\tname = "{IDENTITY[0]}"\n\temail = "{IDENTITY[1]}"\n', encoding="utf-8"
    )
    return path


async def _agent(spec: SandboxSpec, command: list[str]) -> None:
    argv = bwrap_sandbox.command(spec, command)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the agent exited {proc.returncode}: {out.decode(errors='replace')}")


async def _bring_back(
    repo: Path, work: Path, branch: str, ref: str, base: str, iso: Isolation
) -> tuple[str, list[str]]:
    upload = checkout_edits.listing_upload_pack(work, branch, iso)
    checkout_edits.unlisted(iso)
    also = (f"refs/heads/{branch}",)
    sha = await intake.bring_back(
        repo, work, branch, ref, base, sandboxed_upload_pack=upload, timeout=TIMEOUT, also=also
    )
    return sha, checkout_edits.listed(work, iso)


async def one_ticket(
    repo: Path,
    root: Path,
    objects: Path,
    n: int,
    command: list[str],
    lock: asyncio.Lock,
    scratch: ScratchRepository,
    floor: Floor,
) -> None:
    clock = _Clock(floor)
    run, ticket = f"F{n}", f"nop-{n:05d}"
    branch, work = f"floor/{ticket}/1", root / "checkouts" / run
    base = await gitops.rev_parse(repo, "main")
    assert base is not None
    await checkout.create(repo, work, branch, base, timeout=TIMEOUT)
    await gitops.update_ref(repo, f"refs/heads/{branch}", base)
    home = _home(root / "runs" / run / "home")
    iso = Isolation(objects=objects, home=_home(root / "runs" / run / "git-home"), hide=(repo,))
    clock.lap("checkout create + HOME")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME_PATH,
        "LANG": "C.UTF-8",
        "SLOOP_RUN": run,
        "SLOOP_TICKET": ticket,
        "SLOOP_STAGE": "implement",
        "SLOOP_WORKTREE": CHECKOUT_PATH,
    }
    spec = SandboxSpec(checkout=work, home=home, objects=objects, hide=(repo,), env=env)
    await _agent(spec, command)
    clock.lap("implement: the agent in bwrap")
    commit, left = await _bring_back(repo, work, branch, f"refs/floor/{run}/0-1", base, iso)
    if left:
        raise RuntimeError(f"the agent left uncommitted changes in {work}")
    clock.lap("implement: uncommitted + bring back")
    for attempt in range(1, 100):
        async with lock:
            main = await gitops.rev_parse(repo, "main")
            assert main is not None
            merged = await scratch.merge(
                commit, main, "Merge main", identity=IDENTITY, timeout=TIMEOUT
            )
            if merged.commit is None:
                raise RuntimeError(f"sync conflicts in {', '.join(merged.conflicts)}")
            tip = merged.commit
            moves = {f"refs/floor/{run}/1-{attempt}": tip, f"refs/heads/{branch}": tip}
            await gitops.update_refs(repo, moves, "floor: sync")
            clock.lap("sync: the merge in the scratch repository, refs")
            outcome = await gitops.ff_only(repo, tip, "main", timeout=TIMEOUT)
            clock.lap("ff_only")
        if outcome.ok:
            break
        if outcome.final:
            raise RuntimeError(f"{ticket} cannot merge: {outcome.reason}")
        floor.resyncs += 1
    else:
        raise RuntimeError(f"{ticket} never merged")
    await checkout.remove(work)
    clock.lap("checkout remove")


async def _drain(repo: Path, root: Path, tickets: int, workers: int, command: list[str]) -> Floor:
    objects = await checkout.objects_dir(repo, timeout=60)
    floor = Floor(tickets=tickets)
    lock = asyncio.Lock()
    scratch = ScratchRepository(root / "merge.git", objects)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(1, tickets + 1):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            await one_ticket(repo, root, objects, n, command, lock, scratch, floor)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    floor.wall = time.perf_counter() - start
    return floor


def drain(repo: Path, root: Path, tickets: int, workers: int, command: list[str]) -> Floor:
    """``tickets`` no-op tickets through the steps, ``workers`` at a time, on ``repo``."""
    os.sync()
    return asyncio.run(_drain(repo, root, tickets, workers, command))
