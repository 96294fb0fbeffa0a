"""Budgets against the real CLIs (issue 24, items 1 and 2): what a budget can stop, and when.

Each stand-in answers a long session of tool-calling turns, every one reporting
the same large usage, so a budget is passed after the first turn or two:

* Claude Code prints each API message's ``usage`` on its ``assistant`` events, so
  its stage is stopped as soon as the running total passes ``max_cost_usd`` or
  ``max_tokens``: a few turns are answered, never the whole session.
* Codex and Gemini CLI print usage only in their final event: their budgets cap
  what merges, not what is spent (the session runs to its end, then fails).
* Codex and Gemini report no cost: Sloop prices their tokens from ``[pricing]``
  (the built-in table, or sloop.toml's), so ``max_cost_usd`` is enforced for them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.test_agent_presets import (
    RUN_TIMEOUT_S,
    claude_api,
    codex_api,
    gemini_api,
    on_path,
    preset_toml,
)
from tests.support.agents import Bench, ticket_text
from tests.support.standins import anthropic, gemini, openai

__all__ = ["claude_api", "codex_api", "gemini_api"]  # fixtures, used by name

TURNS = 9
# ~10,000 input tokens a turn: any budget below is passed after a turn or two.
CLAUDE_TURN = {
    "input_tokens": 10_000,
    "output_tokens": 300,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
}
OPENAI_TURN = {"input_tokens": 15_000, "output_tokens": 500, "cached_tokens": 0}
GEMINI_TURN = {
    "promptTokenCount": 20_000,
    "candidatesTokenCount": 300,
    "cachedContentTokenCount": 0,
    "totalTokenCount": 20_300,
}


def failed_run(bench: Bench, name: str) -> dict[str, Any]:
    bench.post(name)
    run = bench.wait_run(f"{name}#1", timeout=RUN_TIMEOUT_S * 2)
    logs = [r["text"] for r in bench.ok("logs", {"run": run["id"]})["records"]][-10:]
    assert run["state"] == "failed", (run["state"], run["reason"], logs)
    assert run["classification"] == "budget_exceeded", (run["reason"], logs)
    return run


def stdout_events(bench: Bench, run_id: str) -> list[dict[str, Any]]:
    records = bench.ok("logs", {"run": run_id})["records"]
    events: list[dict[str, Any]] = []
    for record in records:
        if record["stream"] == "stdout" and record["text"].startswith("{"):
            try:
                events.append(json.loads(record["text"]))
            except ValueError:
                continue
    return events


@pytest.mark.on_ray
def test_claude_is_stopped_mid_session_once_its_cost_passes_the_budget(
    bench: Bench, claude_api: anthropic.AnthropicStandIn
) -> None:
    claude_api.scripts = [anthropic.busy_script(TURNS)]
    claude_api.usage = dict(CLAUDE_TURN)
    on_path(bench, ["claude"])
    bench.env.update(
        ANTHROPIC_API_KEY="sk-ant-api03-sloop-stand-in", ANTHROPIC_BASE_URL=claude_api.url
    )
    config = preset_toml(bench, "claude", ["claude"]).replace(
        "[agent]\n", "[agent]\nmax_cost_usd = 0.05\n"
    )
    bench.setup(config, {"spend": ticket_text("Spend")})
    bench.start()
    run = failed_run(bench, "spend")

    answered = len(claude_api.message_requests())
    # Stopped a turn or so past the budget: not the whole session of TURNS + 1 answers.
    assert answered <= 4, answered
    implement = run["stages"][0]
    assert "over max_cost_usd 0.05" in implement["reason"], implement
    cost = run["usage"]["cost_usd"]
    assert cost is not None, run["usage"]
    assert 0.05 < cost < 0.05 * 4, run["usage"]  # not 11x the budget
    assert run["usage"]["input_tokens"] >= 10_000, run["usage"]


def test_claude_is_stopped_mid_session_once_its_tokens_pass_the_budget(
    bench: Bench, claude_api: anthropic.AnthropicStandIn
) -> None:
    claude_api.scripts = [anthropic.busy_script(TURNS)]
    claude_api.usage = dict(CLAUDE_TURN)
    on_path(bench, ["claude"])
    bench.env.update(
        ANTHROPIC_API_KEY="sk-ant-api03-sloop-stand-in", ANTHROPIC_BASE_URL=claude_api.url
    )
    config = preset_toml(bench, "claude", ["claude"]).replace(
        "[agent]\n", "[agent]\nmax_tokens = 15000\n"
    )
    bench.setup(config, {"spend": ticket_text("Spend")})
    bench.start()
    run = failed_run(bench, "spend")
    assert len(claude_api.message_requests()) <= 4, claude_api.paths()
    assert "over max_tokens 15000" in run["stages"][0]["reason"], run["stages"][0]


def test_codex_prints_usage_only_at_the_end_so_its_budget_caps_what_merges(
    bench: Bench, codex_api: openai.OpenAIStandin
) -> None:
    codex_api.script = openai.busy_script(TURNS)
    codex_api.usage = dict(OPENAI_TURN)
    on_path(bench, ["codex"])
    bench.env.update(
        OPENAI_API_KEY="sk-standin-key", OPENAI_BASE_URL=codex_api.base_url, CODEX_MODEL="gpt-5.5"
    )
    config = preset_toml(bench, "codex", ["codex"]).replace(
        "[agent]\n", "[agent]\nmax_tokens = 30000\n"
    )
    bench.setup(config, {"spend": ticket_text("Spend")})
    bench.start()
    run = failed_run(bench, "spend")

    # What the docs say of Codex 0.171.0: its JSON events carry usage only in
    # turn.completed, after the last model request; nothing earlier could stop it.
    events = stdout_events(bench, run["id"])
    with_usage = [i for i, e in enumerate(events) if "usage" in json.dumps(e)]
    assert with_usage, events
    assert [events[i]["type"] for i in with_usage] == ["turn.completed"], with_usage
    assert with_usage[0] == len(events) - 1, [e.get("type") for e in events]
    assert len(codex_api.turns()) == TURNS + 1
    assert run["usage"]["input_tokens"] == (TURNS + 1) * OPENAI_TURN["input_tokens"]


def test_gemini_prints_usage_only_at_the_end_so_its_budget_caps_what_merges(
    bench: Bench, gemini_api: gemini.GeminiStandIn
) -> None:
    gemini_api.turns = TURNS
    gemini_api.command = "echo one more turn"
    gemini_api.usage = dict(GEMINI_TURN)
    on_path(bench, ["gemini"])
    bench.env.update(GEMINI_API_KEY="standin-key", GOOGLE_GEMINI_BASE_URL=gemini_api.url)
    config = preset_toml(bench, "gemini", ["gemini"]).replace(
        "[agent]\n", "[agent]\nmax_tokens = 30000\n"
    )
    bench.setup(config, {"spend": ticket_text("Spend")})
    bench.start()
    run = failed_run(bench, "spend")

    events = stdout_events(bench, run["id"])
    with_stats = [e["type"] for e in events if "stats" in e or "usage" in json.dumps(e)]
    assert with_stats == ["result"], with_stats
    assert events[-1]["type"] == "result", events[-1]
    calls = [r for r in gemini_api.model_calls() if "streamGenerateContent" in r.path]
    assert len(calls) == TURNS + 1, len(calls)


def test_codex_cost_is_priced_from_the_pricing_table_and_enforced(
    bench: Bench, codex_api: openai.OpenAIStandin
) -> None:
    on_path(bench, ["codex"])
    bench.env.update(
        OPENAI_API_KEY="sk-standin-key", OPENAI_BASE_URL=codex_api.base_url, CODEX_MODEL="gpt-5.5"
    )
    config = preset_toml(bench, "codex", ["codex"]).replace(
        "[agent]\n", "[agent]\nmax_cost_usd = 0.000001\n"
    )
    config += '\n[pricing."gpt-5.5"]\ninput = 2.0\noutput = 16.0\ncached = 0.2\n'
    bench.setup(config, {"hello": ticket_text("Add hello")})
    bench.start()
    run = failed_run(bench, "hello")

    turns = len(codex_api.turns())
    fresh = openai.USAGE["input_tokens"] - openai.USAGE["cached_tokens"]
    per_turn = (
        fresh * 2.0 + openai.USAGE["cached_tokens"] * 0.2 + openai.USAGE["output_tokens"] * 16.0
    ) / 1e6
    cost = run["usage"]["cost_usd"]
    assert cost is not None, run["usage"]
    assert abs(cost - turns * per_turn) < 1e-9, (cost, turns, per_turn)
    assert "over max_cost_usd 1e-06" in run["stages"][0]["reason"], run["stages"][0]


def test_gemini_cost_is_priced_from_the_built_in_table_and_enforced(
    bench: Bench, gemini_api: gemini.GeminiStandIn
) -> None:
    on_path(bench, ["gemini"])
    bench.env.update(GEMINI_API_KEY="standin-key", GOOGLE_GEMINI_BASE_URL=gemini_api.url)
    config = preset_toml(bench, "gemini", ["gemini"]).replace(
        "[agent]\n", "[agent]\nmax_cost_usd = 0.000001\n"
    )
    bench.setup(config, {"hello": ticket_text("Add hello")})
    bench.start()
    run = failed_run(bench, "hello")
    cost = run["usage"]["cost_usd"]
    assert cost is not None, run["usage"]
    assert cost > 0, run["usage"]
    assert "over max_cost_usd 1e-06" in run["stages"][0]["reason"], run["stages"][0]
