"""The needs_review runs someone merged by hand, resolved by the daemon (0.9.0).

A run is merged by hand when its branch holds at least one commit beyond its base and
main now holds the branch's tip.  The watch looks when main's tip moves (and once when
the daemon starts), with one ``git for-each-ref --merged`` for every unresolved run, so
a look costs about the same for one waiting run or a thousand; the resolution itself is
``sloopd.queue.resolutions.record`` (``auto: true``, ``by: null``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Final

from sloopd.core.state import Daemon
from sloopd.git import ops as gitops
from sloopd.git import runner
from sloopd.queue.resolutions import MERGED, record
from sloopd.store import StoreUnavailable

log = logging.getLogger(__name__)

# How often the daemon reads main's tip; it reads the branches only when the tip moved.
WATCH_SECONDS: Final = 2.0
# The most unresolved runs one look examines (the newest first).
WATCH_RUNS_MAX: Final = 1000
GIT_TIMEOUT_S: Final = 30.0


class HandMerges:
    """Resolves, as merged by hand, the needs_review runs whose branch main now holds."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._seen_main: str | None = None

    async def watch(self) -> None:
        me = asyncio.current_task()
        while True:
            try:
                await self.look()
            except (gitops.GitError, StoreUnavailable) as exc:
                # Main unreadable for a moment, or the store busy: look again later.
                log.debug("looking for runs merged by hand: %s", exc)
                self._seen_main = None
            except Exception:
                # Never the end of the watch: a look that failed is made again.
                log.exception("looking for runs merged by hand failed")
                self._seen_main = None
            # A stop's cancel that lands just as a git ends is swallowed by 3.11's
            # asyncio.wait_for (the git's result wins): the watch must end all the same,
            # or the daemon's shutdown waits for it for good.
            if me is not None and me.cancelling():
                raise asyncio.CancelledError
            await asyncio.sleep(WATCH_SECONDS)

    async def look(self) -> list[str]:
        """One look; the runs it resolved (none while main has not moved since the last)."""
        daemon = self.daemon
        repo = daemon.layout.repo
        main = f"refs/heads/{daemon.config.repo.main}"
        tip = await gitops.rev_parse(repo, main)
        if tip is None or tip == self._seen_main:
            return []
        waiting = daemon.require_store().all("runs_unresolved_needing_review", (WATCH_RUNS_MAX,))
        if not waiting:
            self._seen_main = tip
            return []
        held = await _held_by(repo, tip, [f"refs/heads/{b}" for _, _, b in waiting])
        resolved: list[str] = []
        for run_id, _ticket, branch in waiting:
            branch_tip = held.get(f"refs/heads/{branch}")
            if branch_tip is None:
                continue
            base = await gitops.rev_parse(repo, f"refs/sloop/runs/{run_id}/base")
            # A branch with no commit of its own is on main from the start: that is
            # no merge.  Without its base (collected) nothing can be told: left alone.
            if base is None or base == branch_tip:
                continue
            short = tip[:12]
            if record(
                daemon,
                run_id,
                MERGED,
                by=None,
                reason=f"its branch {branch} is on {daemon.config.repo.main} (at {short})",
                auto=True,
            ):
                log.info("%s resolved as merged: main holds its branch %s", run_id, branch)
                resolved.append(run_id)
        self._seen_main = tip
        return resolved


async def _held_by(repo: Path, tip: str, branches: list[str]) -> dict[str, str]:
    """Of ``branches``, those ``tip`` holds, with their own tips: one git for all."""
    argv = runner.git(
        repo, "for-each-ref", f"--merged={tip}", "--format=%(objectname) %(refname)", *branches
    )
    try:
        done = await runner.run(argv, timeout=GIT_TIMEOUT_S, env=runner.environment())
    except runner.TimedOut:
        raise gitops.GitError(
            f"listing the branches {tip[:12]} holds took over {GIT_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        raise gitops.GitError(f"listing the branches {tip[:12]} holds: {done.stderr.strip()}")
    held: dict[str, str] = {}
    for line in done.stdout.splitlines():
        sha, _, ref = line.partition(" ")
        held[ref] = sha
    return held
