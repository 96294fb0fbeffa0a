"""A limit whose reset no one names: what the stream tells, and how the gate probes (issue 24).

Claude Code 2.1.332 ends a rate-limited session with ``API Error: Request rejected
(429) · …`` and Codex 0.171.0 with ``exceeded retry limit, last status: 429 Too Many
Requests``: neither names the reset, and the gate used to close for the whole
``agent.cooldown`` (30 minutes past a 5-minute limit).  The streams under
``tests/unit/streams`` are the real CLIs' output against the stand-ins:
``claude-rate-limit-retried.jsonl`` answered ``retry-after: 5`` (Claude waited it out
once, printing an ``api_retry`` event, then failed), ``claude-rate-limit.jsonl``
``retry-after: 3600`` (past Claude's 60 s, so no retry and no event).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sloopd import vendor
from sloopd.core import config
from sloopd.core.rows import Gate
from sloopd.core.state import Daemon
from sloopd.flows.agent_settings import AgentSettings
from sloopd.queue import gate
from sloopd.vendor.retry_hint import RetryHint, limit_retry_delay

STREAMS = Path(__file__).parent / "streams"
NOW = 1_800_000_000_000
MINUTE = 60_000


def stream(name: str) -> list[str]:
    return (STREAMS / name).read_text(encoding="utf-8").splitlines()


def test_claude_relays_the_retry_delay_of_the_429_it_gave_up_on() -> None:
    diagnosis = vendor.classify(stream("claude-rate-limit-retried.jsonl"), NOW)
    assert diagnosis.classification == "rate_limited", diagnosis
    assert diagnosis.reset_at_ms is None  # "API Error: Request rejected (429) · …"
    assert diagnosis.retry_after_ms == 5465, diagnosis  # retry-after 5 s, with jitter
    assert diagnosis.as_json()["retry_after_ms"] == 5465


@pytest.mark.parametrize(
    "name", ["claude-rate-limit.jsonl", "codex-rate-limited.jsonl", "claude-overloaded.jsonl"]
)
def test_no_retry_delay_without_a_limit_retry_in_the_stream(name: str) -> None:
    diagnosis = vendor.classify(stream(name), NOW)
    assert diagnosis.retry_after_ms is None, diagnosis
    assert "retry_after_ms" not in diagnosis.as_json()  # the stored shape is unchanged
    if name != "claude-overloaded.jsonl":  # its api_retry events are a 529's
        assert diagnosis.classification == "rate_limited", diagnosis
        assert diagnosis.reset_at_ms is None, diagnosis


def api_retry(**fields: Any) -> dict[str, Any]:
    """Claude Code's SDKAPIRetryMessage, as 2.1.332 prints it."""
    event = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 1,
        "retry_delay_ms": 20_000,
        "error_status": 429,
        "error": "rate_limit",
        "session_id": "s",
        "uuid": "u",
    }
    return {**event, **fields}


@pytest.mark.parametrize(
    ("event", "delay"),
    [
        (api_retry(), 20_000),
        (api_retry(error_status=None), 20_000),  # the error kind alone says rate_limit
        (api_retry(error="unknown"), 20_000),  # the status alone says 429
        (api_retry(error_status=529, error="overloaded"), None),
        (api_retry(error_status=None, error="connection_error"), None),
        (api_retry(retry_delay_ms=True), None),
        (api_retry(retry_delay_ms=-5), None),
        (api_retry(retry_delay_ms="20000"), None),
        (api_retry(retry_delay_ms=10**12), None),  # past a day: a misreading
        (api_retry(subtype="init"), None),
        ({"type": "result", "retry_delay_ms": 20_000, "error_status": 429}, None),
    ],
)
def test_only_a_limit_retry_names_a_delay(event: dict[str, Any], delay: int | None) -> None:
    assert limit_retry_delay(event) == delay


def test_an_answer_after_the_retry_means_it_got_through() -> None:
    hint = RetryHint()
    hint.observe(api_retry())
    answer = {"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}]}}
    hint.observe(answer)
    assert hint.delay_ms is None
    hint.observe(api_retry(retry_delay_ms=7000))
    # The CLI's own message for the failed request is no answer.
    hint.observe({"type": "assistant", "is_api_error_message": True, "error": "rate_limit"})
    hint.observe({"type": "result", "is_error": True})
    assert hint.delay_ms == 7000


def test_a_delay_an_answer_got_past_is_not_the_failures() -> None:
    lines = [json.dumps(api_retry(retry_delay_ms=9000))]
    lines.append(json.dumps({"type": "assistant", "message": {"content": []}}))
    lines += stream("claude-rate-limit.jsonl")
    assert vendor.classify(lines, NOW).retry_after_ms is None


@pytest.mark.parametrize(
    ("failed", "retry_after", "wait"),
    [
        (0, None, MINUTE),
        (1, None, 2 * MINUTE),
        (2, None, 4 * MINUTE),
        (4, None, 16 * MINUTE),
        (5, None, 30 * MINUTE),  # 32 minutes, capped at agent.cooldown
        (500, None, 30 * MINUTE),
        (0, 20_000, MINUTE),  # a shorter relayed delay does not shorten the probe
        (0, 5 * MINUTE, 5 * MINUTE),  # a longer one lengthens it
        (0, 90 * MINUTE, 30 * MINUTE),  # ... up to agent.cooldown
        (0, 65_465, 66_000),  # in whole seconds
    ],
)
def test_the_probe_doubles_up_to_the_cooldown(
    failed: int, retry_after: int | None, wait: int
) -> None:
    assert gate.probe_wait_ms(failed, MINUTE, 30 * MINUTE, retry_after) == wait


class FakeGate:
    """The gate's store-backed change, recorded: cool_down_for_limit's decisions alone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, settings: AgentSettings) -> None:
        self.daemon = cast(
            Daemon,
            SimpleNamespace(config=SimpleNamespace(agent=settings), gate=Gate(), limit_probes=0),
        )
        self.closed: list[int] = []
        monkeypatch.setattr(gate, "now_ms", lambda: NOW)
        monkeypatch.setattr(gate, "cool_down", self._cool_down)

    def _cool_down(self, daemon: Daemon, until_ms: int, reason: str) -> Gate:
        daemon.gate = Gate("cooldown", max(until_ms, daemon.gate.until_ms or 0), reason)
        self.closed.append(until_ms - NOW)
        return daemon.gate

    def limit(self, reset_at_ms: int | None = None) -> str:
        gate.cool_down_for_limit(self.daemon, reset_at_ms, "rate limited reported by R1")
        return self.daemon.gate.reason or ""

    def reopen(self) -> None:
        self.daemon.gate = Gate()


def test_each_failed_probe_doubles_the_wait_and_a_run_through_resets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeGate(monkeypatch, AgentSettings(probe_cooldown_ms=MINUTE))
    assert fake.limit().endswith("(no reset named: trying again after 1m)")
    # Runs in flight meet the same limit while the gate is closed: no doubling.
    fake.limit()
    fake.reopen()
    fake.limit()
    fake.reopen()
    fake.limit()
    assert fake.closed == [MINUTE, MINUTE, 2 * MINUTE, 4 * MINUTE]
    # A named reset is the vendor's word: no probe, and the count stays.
    fake.reopen()
    assert "no reset named" not in fake.limit(NOW + 10 * MINUTE)
    assert fake.closed[-1] == 10 * MINUTE
    # An agent stage that got through: the next limit is probed from the start.
    gate.limit_lifted(fake.daemon)
    fake.reopen()
    fake.limit()
    assert fake.closed[-1] == MINUTE


def test_probe_cooldown_is_an_agent_duration() -> None:
    assert config.parse({}).agent.probe_cooldown_ms == MINUTE
    assert config.parse({"agent": {"probe_cooldown": "10s"}}).agent.probe_cooldown_ms == 10_000
    with pytest.raises(config.ConfigError, match=r"'agent\.probe_cooldown' must be at least 1s"):
        config.parse({"agent": {"probe_cooldown": "0s"}})
