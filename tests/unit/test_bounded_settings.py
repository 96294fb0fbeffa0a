"""The settings of bounded work per agent: sizes, durations, the cooldown cap, the budget."""

from __future__ import annotations

import pytest

from sloopd.core import config
from sloopd.proc.lines import OutputBudget
from sloopd.queue.gate import limit_deadline
from sloopd.util.durations import format_ms
from sloopd.util.sizes import parse_bytes
from sloopd.wire.api import parse_duration_ms as parse_ms

HOUR = 3_600_000
NOW = 1_768_478_400_000  # 2026-01-15 12:00 UTC


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (65536, 65536),
        ("1024", 1024),
        ("512KiB", 512 << 10),
        ("64MiB", 64 << 20),
        ("1 gib", 1 << 30),
    ],
)
def test_sizes(value: int | str, expected: int) -> None:
    assert parse_bytes(value) == expected


@pytest.mark.parametrize("value", ["", "64MB", "1.5MiB", "-1", True, -5])
def test_what_is_not_a_size(value: int | str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        parse_bytes(value)


@pytest.mark.parametrize("text", ["6h", "1h30m", "90s", "1d2h", "500ms", "3s"])
def test_durations_round_trip(text: str) -> None:
    assert parse_ms(format_ms(parse_ms(text))) == parse_ms(text)
    assert format_ms(6 * HOUR) == "6h"
    assert format_ms(90_000) == "1m30s"


def test_the_agent_keys_and_their_defaults() -> None:
    agent = config.parse({}).agent
    assert (agent.max_cooldown_ms, agent.max_log_lines, agent.max_log_bytes) == (
        6 * HOUR,
        100_000,
        64 << 20,
    )
    parsed = config.parse(
        {"agent": {"max_cooldown": "2h", "max_log_lines": 10, "max_log_bytes": "1MiB"}}
    ).agent
    assert (parsed.max_cooldown_ms, parsed.max_log_lines, parsed.max_log_bytes) == (
        2 * HOUR,
        10,
        1 << 20,
    )


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ({"max_cooldown": 6}, "'agent.max_cooldown' must be a duration"),
        ({"max_cooldown": "0s"}, "'agent.max_cooldown' must be at least 1s"),
        ({"max_log_lines": 0}, "'agent.max_log_lines' must be an integer of at least 1"),
        ({"max_log_lines": "10"}, "'agent.max_log_lines' must be an integer"),
        ({"max_log_bytes": "64MB"}, "'agent.max_log_bytes': '64MB' is not a size"),
        ({"max_log_bytes": 100}, "'agent.max_log_bytes' must be at least 1KiB"),
        ({"max_log_bytes": 1.5}, "'agent.max_log_bytes': must be an integer or a string"),
    ],
)
def test_bad_values_name_the_key(agent: dict[str, object], message: str) -> None:
    with pytest.raises(config.ConfigError, match=message.replace("(", r"\(")):
        config.parse({"agent": agent})


def test_a_far_reset_is_capped_and_the_note_says_so() -> None:
    far = NOW + 31 * 24 * HOUR
    assert limit_deadline(NOW, far, 30 * 60_000, 6 * HOUR) == (
        NOW + 6 * HOUR,
        " (the agent said 2026-02-15 12:00 UTC; capped at max_cooldown 6h)",
    )
    assert limit_deadline(NOW, NOW + HOUR, 30 * 60_000, 6 * HOUR) == (NOW + HOUR, "")
    assert limit_deadline(NOW, None, 30 * 60_000, 6 * HOUR) == (NOW + 30 * 60_000, "")
    assert limit_deadline(NOW, NOW - 1, 30 * 60_000, 6 * HOUR) == (NOW + 30 * 60_000, "")
    assert limit_deadline(NOW, None, 8 * HOUR, 6 * HOUR) == (
        NOW + 6 * HOUR,
        " (cooldown 8h; capped at max_cooldown 6h)",
    )


def test_the_budget_stores_up_to_a_limit_then_counts() -> None:
    budget = OutputBudget(max_lines=3, max_bytes=1000)
    assert [budget.admit(t) for t in ("a", "\u00e9\u00e9", "c")] == [True, True, True]
    assert budget.summary() is None
    assert [budget.admit(t) for t in ("d", "\u00e9")] == [False, False]
    assert (budget.dropped_lines, budget.dropped_bytes) == (2, 3)
    summary = budget.summary()
    assert summary is not None
    assert summary.startswith("output limit reached: 2 lines (3 bytes)")
    bytes_budget = OutputBudget(max_lines=100, max_bytes=10)
    assert [bytes_budget.admit(t) for t in ("12345", "123456", "1")] == [True, False, False]
    assert bytes_budget.stored_bytes == 5
    assert bytes_budget.seen_bytes == 12


def test_the_disk_reserve_is_a_size_or_the_default() -> None:
    assert config.parse({}).repo.disk_reserve is None  # a tenth of the filesystem, capped
    assert config.parse({"repo": {"disk_reserve": "512MiB"}}).repo.disk_reserve == 512 << 20
    assert config.parse({"repo": {"disk_reserve": 0}}).repo.disk_reserve == 0


@pytest.mark.parametrize("value", ["lots", -1, 1.5, True, ["1GiB"]])
def test_a_disk_reserve_that_is_no_size_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(config.ConfigError, match=r"'repo\.disk_reserve'"):
        config.parse({"repo": {"disk_reserve": value}})
