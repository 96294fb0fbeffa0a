"""A run's git that failed for want of space: a transient failure that names the disk.

A run's checkout, its git HOME and the store share the state directory's filesystem
by default, and a bring-back writes into the main repository's objects.  When one of
them is full, making a checkout, listing it or bringing it back fails: with git's
"No space left on device", with Python's ``ENOSPC``, or with no message at all (the
listing's errors go to a file in the run's git HOME, which could not be written
either: 0.8.0 failed the run "cannot read the files of …/checkouts/R1: no message.",
classification ``unknown``).  None of that is the agent's doing, nor lasting, so such
a failure is classified ``disk_full``, a transient class (``sloopd.flows.diagnosed``):
the ticket is queued again after ``agent.transient_backoff``, no ``return_to`` is
spent, and the reason names the filesystem and what was free on it.

A failure is the disk's when its words say so, or when one of the places it wrote
has less than ``LOW_ROOM_BYTES`` free as the daemon looks right after: git that
needed room and found none need not have said so.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from sloopd.flows.agent_settings import AgentSettings
from sloopd.flows.results import DISK_FULL, StageResult, daemon_diagnosis
from sloopd.git import checkout
from sloopd.git.ops import GitError
from sloopd.runs import retries
from sloopd.runs.records import RunRecords
from sloopd.runs.runstate import RunFacts
from sloopd.util.diskspace import Space, is_no_room, mount_of, says_no_room, space_of
from sloopd.util.sizes import format_bytes

# Less than this free where a git of the run failed: the failure is taken as the disk's.
LOW_ROOM_BYTES: Final = 1 << 20


def cause(error: BaseException, places: Iterable[Path]) -> str | None:
    """Why ``error`` is the disk's, naming the fullest of ``places``' filesystems and
    its free bytes; None when nothing says the disk is full."""
    readings = [(place, space_of(place)) for place in places]
    known = [(place, space) for place, space in readings if space is not None]
    fullest: tuple[Path, Space] | None = min(known, key=lambda k: k[1].free, default=None)
    said = is_no_room(error) or says_no_room(str(error))
    if not said and (fullest is None or fullest[1].free >= LOW_ROOM_BYTES):
        return None
    what = _sentence(error)
    if fullest is None:
        return f"no space left on the disk ({what})"
    place, space = fullest
    mount = mount_of(place)
    where = f"{place}" if mount == place else f"{place}, mounted at {mount}"
    return (
        f"{format_bytes(space.free)} of {format_bytes(space.size)} free on the filesystem "
        f"of {where}; {what}"
    )


def failed(detail: str) -> StageResult:
    """The stage result of a stage whose checkout or bring-back found the disk full."""
    return StageResult.checked("git", False, f"out of disk space: {detail}").but(
        diagnosis=daemon_diagnosis(DISK_FULL, detail)
    )


async def not_created(
    records: RunRecords,
    settings: AgentSettings,
    facts: RunFacts,
    error: GitError | OSError,
    places: Iterable[Path],
) -> None:
    """Settle a run whose checkout could not be made: failed, and queued again after the
    transient backoff when the disk had no room (its retries counted as any transient
    failure's).  Any other OSError is the daemon's own fault: raised again."""
    full = cause(error, places)
    if full is None and not isinstance(error, GitError):
        raise error
    made = "the run's checkout could not be created"
    if full is None:
        await records.settle_durably(facts.run_id, "failed", None, f"{made}: {error}")
        return
    # Half made, by the daemon's git alone, and never recorded as the run's worktree (no
    # later run removes it): it goes now, or it holds what room the disk has left.
    await checkout.remove(facts.worktree)
    diagnosis = daemon_diagnosis(DISK_FULL, full)
    stop = retries.requeued(records.store, settings, facts, f"{made}: {DISK_FULL} ({full})")
    await records.settle_durably(
        facts.run_id,
        "failed",
        None,
        stop.reason,
        requeue_at_ms=stop.requeue_at_ms,
        diagnosis=diagnosis,
    )


def _sentence(error: BaseException) -> str:
    """The error as the tail of a reason: its own words, without a closing period."""
    if isinstance(error, OSError) and error.strerror:
        target = f" {error.filename}" if error.filename else ""
        return f"writing{target}: {error.strerror}"
    return str(error).rstrip(".") or error.__class__.__name__
