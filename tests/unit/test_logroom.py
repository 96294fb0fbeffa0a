"""``logroom.move``: what the log sink does with a batch of output, for every case.

The reserve is free space output never takes; below an eighth of it the disk counts
as full and output waits; between the two, held output is given up only when the
daemon's own records (or a count of dropped lines) wait behind it.
"""

from __future__ import annotations

import pytest

from sloopd.core.logroom import Move, Reading, batch_cost, move
from sloopd.util.sizes import format_bytes

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
    why = Reading(512 * 1024, 8 * MiB).why_held(1 * MiB)
    assert "512.0 KiB free" in why
    assert "keep 8.0 MiB free" in why
    assert "repo.disk_reserve" in why
    assert Reading(0, 8 * MiB).full
    assert not Reading(2 * MiB, 8 * MiB).full


@pytest.mark.parametrize(
    ("free", "reserve", "cost"),
    [
        # More free than the reserve, yet short of the reserve plus the batch: issue 34
        # item 11's "5.1 MiB free, less than the 819.2 KiB kept free".
        (int(5.1 * MiB), 8 * MiB // 10, 5 * MiB),
        (512 * 1024, 8 * MiB, 1 * MiB),
        (0, 10 * MiB, 1),
    ],
)
def test_the_reason_names_the_numbers_it_compared(free: int, reserve: int, cost: int) -> None:
    """The free space is less than the threshold the reason names, and that threshold is
    the cost plus the reserve it names: the numbers agree with each other."""
    assert move(free, reserve, cost, True) is not Move.WRITE
    why = Reading(free, reserve).why_held(cost)
    assert f"had {format_bytes(free)} free" in why
    assert f"less than the {format_bytes(cost + reserve)} needed" in why
    assert f"store {format_bytes(cost)} more output" in why
    assert f"keep {format_bytes(reserve)} free" in why
