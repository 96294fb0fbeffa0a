"""How much of the state directory's disk captured output may take: a reserve stays free.

Output is the one thing the daemon writes whose volume an agent decides.  Written
without regard to the disk, the records held while a disk was full filled it again
the moment space returned, and the next run's checkout, on the same filesystem,
could not be created.  So output is written only while the write leaves
``reserve`` bytes free on the store's filesystem; the daemon's own records (a
stage's end, a settle, a count of what was dropped) are small and always written.

What the log sink does with a batch that holds output is one pure decision,
``move`` (table-tested in tests/unit/test_logroom.py):

- ``WRITE``: the batch fits above the reserve (or no reserve is kept, or the
  filesystem cannot be read: the store decides);
- ``HOLD``: it does not fit; keep it in memory (bounded) and look again later.
  Always so while less than an eighth of the reserve is free: the disk counts as
  full, and even the daemon's own records would likely be refused;
- ``GIVE_UP``: it does not fit and the daemon's own records (or a count of dropped
  lines) wait behind it: the held output is counted in a ``dropped`` record instead,
  so what the daemon knows is stored, not kept hostage by output that may never fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from sloopd.util.diskspace import space_of
from sloopd.util.sizes import format_bytes

# The default reserve: a tenth of the filesystem, at most this (repo.disk_reserve).
DEFAULT_RESERVE_BYTES = 256 << 20
DEFAULT_RESERVE_SHARE = 10
# Below reserve / FULL_SHARE free, the disk counts as full: output waits for space.
FULL_SHARE = 8
# What one record costs on disk, at most: its row and two index entries in the
# store (~2.1x the body, measured), once in the WAL and once more when checkpointed.
COST_FACTOR = 4
ROW_OVERHEAD_BYTES = 64


class Move(Enum):
    WRITE = "write"
    HOLD = "hold"
    GIVE_UP = "give_up"


def fits(free: int | None, reserve: int, cost: int) -> bool:
    """Whether writing ``cost`` bytes leaves the reserve free (unknown room: the store decides)."""
    return free is None or reserve == 0 or free - cost >= reserve


def counts_as_full(free: int, reserve: int) -> bool:
    """Whether so little is free that even the daemon's own records would likely fail."""
    return free < reserve // FULL_SHARE


def move(free: int | None, reserve: int, cost: int, own_records_wait: bool) -> Move:
    """What to do with a batch holding output that costs ``cost`` bytes of disk."""
    if free is None or fits(free, reserve, cost):
        return Move.WRITE
    if counts_as_full(free, reserve) or not own_records_wait:
        return Move.HOLD
    return Move.GIVE_UP


def batch_cost(records: int, body_bytes: int) -> int:
    """Disk a batch may take: a bound, so a write that fits never eats into the reserve."""
    return COST_FACTOR * (body_bytes + ROW_OVERHEAD_BYTES * records)


@dataclass(frozen=True, slots=True)
class Reading:
    """The store's filesystem, read once: free bytes (None: unreadable) and the reserve."""

    free: int | None
    reserve: int

    @property
    def full(self) -> bool:
        return self.free is not None and counts_as_full(self.free, self.reserve)

    def why_held(self, cost: int) -> str:
        """The reason a ``dropped`` record gives for output of ``cost`` bytes held back.

        It names the two sides of the comparison ``fits`` made, free space against
        the output's cost plus the reserve, so the numbers agree with each other: 0.8.0
        named the free space and the reserve alone ("5.1 MiB free, less than the
        819.2 KiB kept free"), which read as a contradiction.
        """
        free = "an unknown amount" if self.free is None else format_bytes(self.free)
        return (
            f"the store's filesystem had {free} free, less than the "
            f"{format_bytes(cost + self.reserve)} needed to store {format_bytes(cost)} more "
            f"output and keep {format_bytes(self.reserve)} free for runs (repo.disk_reserve)"
        )


class Room(Protocol):
    """Where the sink reads the room it has (``DiskRoom``; a fake in tests)."""

    def read(self) -> Reading: ...


class DiskRoom:
    """The store's filesystem and the reserve configured for it (read at every look).

    ``configured`` answers ``repo.disk_reserve`` as loaded now (a reload applies at
    once); None means the default.
    """

    def __init__(self, path: Path, configured: Callable[[], int | None]) -> None:
        self.path = path
        self._configured = configured

    def read(self) -> Reading:
        space = space_of(self.path)
        configured = self._configured()
        if configured is not None:
            reserve = configured
        elif space is None:
            reserve = 0
        else:
            reserve = min(DEFAULT_RESERVE_BYTES, space.size // DEFAULT_RESERVE_SHARE)
        return Reading(None if space is None else space.free, reserve)
