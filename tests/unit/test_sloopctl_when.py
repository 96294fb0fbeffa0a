"""--at WHEN: the client turns durations and RFC 3339 times into epoch ms."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sloopctl.when import parse_rfc3339_ms, parse_when
from sloopd.wire.api import parse_duration_ms

NOW = 1_800_000_000_000


def dec1(hour: int, minute: int) -> int:
    """Epoch ms of 2026-12-01 at hour:minute UTC."""
    return int(datetime(2026, 12, 1, hour, minute, tzinfo=UTC).timestamp()) * 1000


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30s", 30_000),
        ("10m", 600_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        ("1d2h3m4s", 93_784_000),
        ("0s", 0),
        ("90M", 5_400_000),
    ],
)
def test_durations_are_relative_to_now(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    assert parse_when(text, now=NOW) == NOW + ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-12-01T09:00Z", dec1(9, 0)),
        ("2026-12-01T09:00:00Z", dec1(9, 0)),
        ("2026-12-01T09:00:00+01:00", dec1(8, 0)),
        ("2026-12-01T09:00-02:30", dec1(11, 30)),
        ("2026-12-01t09:00:00z", dec1(9, 0)),
        ("2026-12-01 09:00:00Z", dec1(9, 0)),
        ("2026-12-01T09:00:00.250Z", dec1(9, 0) + 250),
    ],
)
def test_rfc3339_times_are_absolute(text: str, ms: int) -> None:
    assert parse_rfc3339_ms(text) == ms
    assert parse_when(text, now=NOW) == ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "soon",
        "10",
        "m10",
        "10x",
        "30m1h",  # units out of order
        "1h 30m",
        "-5m",
        "2026-12-01",  # a date is not a time
        "2026-12-01T09:00",  # no offset: the host's zone would be a guess
        "2026-13-01T09:00Z",
        "2026-02-30T09:00Z",
        "2026-12-01T25:00Z",
        "2026-12-01T09:00+24:00",
        "1969-12-31T23:59Z",
    ],
)
def test_bad_when_is_rejected_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        parse_when(text, now=NOW)


def test_one_grammar_reads_the_daemons_durations_and_when() -> None:
    """sloop.toml's durations and --at's are read by one function of the schema module."""
    from sloopd.core import config
    from sloopd.flows import agent_settings
    from sloopd.ops import webhook_targets
    from sloopd.wire import api

    assert parse_duration_ms is api.parse_duration_ms
    for module in (config, agent_settings, webhook_targets):
        assert module.parse_ms is api.parse_duration_ms
    assert parse_duration_ms("1h 30m") == 5_400_000  # sloop.toml ignores the spaces...
    with pytest.raises(ValueError, match="neither a duration"):
        parse_when("1h 30m", now=NOW)  # ...a WHEN is one word
    assert parse_duration_ms("1m500ms") == 60_500
    # What either side accepted before 0.8.0 is still accepted, and what the client
    # refused it still refuses: sloop.toml sums parts in any order (the daemon's
    # reading), a WHEN takes them largest first, once each (the client's).
    assert parse_duration_ms("30m1h") == 5_400_000
    assert parse_duration_ms("1h1h") == 7_200_000
    assert parse_duration_ms("20M") == 1_200_000
    assert parse_when("500ms", now=NOW) == NOW + 500
    assert parse_when("1h30m500ms", now=NOW) == NOW + 5_400_500
    for slip in ("30m1h", "1h1h", "500ms1s"):
        with pytest.raises(ValueError, match="neither a duration"):
            parse_when(slip, now=NOW)
    for wrong in ("", "10", "5x", "1h-", "ms", " "):
        with pytest.raises(ValueError, match=r"\S"):
            parse_duration_ms(wrong)
