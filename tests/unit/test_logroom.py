"""``logroom.move``: what the log sink does with a batch of output, for every case.

The reserve is free space output never takes; below an eighth of it the disk counts
as full and output waits; between the two, held output is given up only when the
daemon's own records (or a count of dropped lines) wait behind it.
"""

from __future__ import annotations

import pytest

from sloopd.core.logroom import Move, Reading, batch_cost, move

MiB = 1 << 20


@pytest.mark.parametrize(
    ("free", "reserve", "cost", "own_records_wait", "expected"),
    [
        # Room above the reserve: written.
        (100 * MiB, 10 * MiB, 1 * MiB, False, Move.WRITE),
        (11 * MiB, 10 * MiB, 1 * MiB, True, Move.WRITE),  # exactly the reserve left
        # The filesystem cannot be read, or no reserve is kept: the store decides.
        (None, 10 * MiB, 1 * MiB, True, Move.WRITE),
        (0, 0, 1 * MiB, True, Move.WRITE),
        # It would eat into the reserve: held, until the daemon's own records wait.
        (10 * MiB, 10 * MiB, 1, False, Move.HOLD),
        (5 * MiB, 10 * MiB, 1 * MiB, False, Move.HOLD),
        (5 * MiB, 10 * MiB, 1 * MiB, True, Move.GIVE_UP),
        (10 * MiB // 8, 10 * MiB, 1 * MiB, True, Move.GIVE_UP),  # the floor is still room
        # Less than an eighth of the reserve: the disk counts as full, everything waits.
        (10 * MiB // 8 - 1, 10 * MiB, 1 * MiB, True, Move.HOLD),
        (0, 10 * MiB, 1, True, Move.HOLD),
    ],
)
def test_move(
    free: int | None, reserve: int, cost: int, own_records_wait: bool, expected: Move
) -> None:
    assert move(free, reserve, cost, own_records_wait) is expected


def test_a_batch_costs_more_than_its_bytes() -> None:
    """Row, two index entries, the WAL and the checkpoint: a write that fits never eats
    into the reserve (measured: ~2.1x the body in the store alone)."""
    assert batch_cost(1000, 150_000) >= 2 * 2.1 * 150_000


def test_the_reason_names_the_free_space_and_the_key() -> None:
    why = Reading(512 * 1024, 8 * MiB).why_held()
    assert "512.0 KiB free" in why
    assert "8.0 MiB kept free" in why
    assert "repo.disk_reserve" in why
    assert Reading(0, 8 * MiB).full
    assert not Reading(2 * MiB, 8 * MiB).full
