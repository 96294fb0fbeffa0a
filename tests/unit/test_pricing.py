"""Pricing and budgets per vendor (issue 24, items 1 and 2), on the CLIs' exact strings.

* Claude Code's ``assistant`` events give a running total before its ``result``: each
  API message counted once (one message of several content blocks is printed once per
  block), so a budget can stop the session between two API calls.
* Codex and Gemini report no cost: their tokens are priced per model from the dated
  built-in table or sloop.toml's ``[pricing]``, and a ``max_cost_usd`` that could not be
  priced is refused at load, naming the key, instead of never stopping anything.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from sloopd.core.config import ConfigError, parse
from sloopd.vendor import pricing, stream_claude, stream_gemini
from sloopd.vendor import usage as usages
from sloopd.vendor.pricing import CostReader
from sloopd.vendor.usage import ModelTokens, Usage

STREAMS = Path(__file__).parent / "streams"


def lines(name: str) -> list[str]:
    return (STREAMS / name).read_text(encoding="utf-8").splitlines()


def test_claude_usage_runs_before_the_result_and_each_message_counts_once() -> None:
    parse = usages.for_execution("claude")
    assert parse is not None
    assert parse is not stream_claude.parse  # its own, per execution
    usage = Usage()
    running: list[tuple[int, float | None]] = []
    for line in lines("claude-success.jsonl"):
        if parse(line, usage):
            running.append((usage.input_tokens, usage.cost_usd))
    # Two API calls of 1200 + 100 cached input: 1300, 2600, then the result's totals.
    assert running[0] == (1300, None), running
    assert running[1] == (2600, None), running
    assert usage.input_tokens == 2600
    assert usage.output_tokens == 600  # the result's; the messages knew only 1 each
    assert usage.cost_usd is not None  # the vendor's cost, once it says
    # A message printed once per content block is still one message.
    first = next(line for line in lines("claude-success.jsonl") if '"type":"assistant"' in line)
    again = usages.for_execution("claude")
    assert again is not None
    repeated = Usage()
    for _ in range(3):
        again(first, repeated)
    assert repeated.input_tokens == 1300, repeated
    assert list(repeated.models) == ["claude-opus-5-5"], repeated.models


def test_claude_running_usage_is_priced_at_its_model_until_the_result() -> None:
    parse = usages.for_execution("claude")
    assert parse is not None
    usage = Usage()
    first = next(line for line in lines("claude-success.jsonl") if '"type":"assistant"' in line)
    parse(first, usage)
    costed, missing = pricing.priced(usage, pricing.PriceTable(), None)
    assert missing is None
    opus = pricing.BUILT_IN["claude-opus-5-5"]  # Claude Code 2.1.332's default model
    expected = (1200 * opus.input + 100 * opus.cached + 1 * opus.output) / 1e6
    assert costed.cost_usd == pytest.approx(expected)
    assert usage.cost_usd is None  # the parser's own Usage stays as reported


def test_gemini_tokens_are_priced_per_model_named_in_its_stats() -> None:
    usage = Usage()
    assert any(stream_gemini.parse(line, usage) for line in lines("gemini-stream-json.jsonl"))
    assert usage.models == {"gemini-2.5-pro": ModelTokens(3600, 440, 600)}
    costed, missing = pricing.priced(usage, pricing.PriceTable(), None)
    assert missing is None
    pro = pricing.BUILT_IN["gemini-2.5-pro"]
    expected = (3000 * pro.input + 600 * pro.cached + 440 * pro.output) / 1e6
    assert costed.cost_usd == pytest.approx(expected)


def test_codex_tokens_are_priced_at_the_configured_model_or_not_at_all() -> None:
    usage = Usage(3000, 500, 400)  # turn.completed names no model
    table = pricing.parse_pricing({"gpt-5.5": {"input": 2, "output": 16, "cached": 0.2}})
    costed, missing = pricing.priced(usage, table, "gpt-5.5")
    assert missing is None
    assert costed.cost_usd == pytest.approx((2600 * 2 + 400 * 0.2 + 500 * 16) / 1e6)
    assert pricing.priced(usage, pricing.PriceTable(), "gpt-5.5") == (usage, "gpt-5.5")
    assert pricing.priced(usage, table, None) == (usage, "")


def test_a_reported_cost_wins_and_snapshots_share_their_family_price() -> None:
    reported = Usage(1000, 10, 0, cost_usd=0.5)
    assert pricing.priced(reported, pricing.PriceTable(), "gpt-5") == (reported, None)
    table = pricing.PriceTable()
    assert table.price("claude-sonnet-4-5-20250929") == table.price("claude-sonnet-4-5")
    assert table.price("claude-opus-4-6[1m]") == table.price("claude-opus-4-6")
    assert table.price("gpt-5.5") is None  # no prefix guessing: gpt-5's price is not its
    override = pricing.parse_pricing({"claude-opus-5-5": {"input": 1, "output": 2}})
    assert override.price("claude-opus-5-5") == pricing.Price(1, 2, 1)  # cached: input's


def config(extra: str, environ: dict[str, str] | None = None) -> Any:
    return parse(tomllib.loads(extra), None, environ or {})


def test_a_dollar_budget_codex_cannot_price_is_refused_at_load() -> None:
    codex = '[agent]\npreset = "codex"\nmax_cost_usd = 1.0\n'
    with pytest.raises(ConfigError, match=r"'agent.max_cost_usd': codex .* names no model"):
        config(codex)
    with pytest.raises(ConfigError, match=r"'agent.max_cost_usd'.*no price for model 'gpt-5.5'"):
        config(codex, {"CODEX_MODEL": "gpt-5.5"})
    priced = codex + '[pricing."gpt-5.5"]\ninput = 2\noutput = 16\ncached = 0.2\n'
    assert config(priced, {"CODEX_MODEL": "gpt-5.5"}).pricing.price("gpt-5.5") is not None
    assert config(codex, {"CODEX_MODEL": "gpt-5"}).agent.budget.max_cost_usd == 1.0
    # A token budget needs no price.
    assert config('[agent]\npreset = "codex"\nmax_tokens = 1000\n').agent.budget.max_tokens


def test_a_flow_budget_names_its_own_key_and_gemini_is_priced_by_default() -> None:
    flow = (
        '[agent]\npreset = "example"\n'
        "[flows.review]\nmax_cost_usd = 0.5\n"
        '[[flows.review.stages]]\nname = "implement"\naction = "agent"\nagent = "codex"\n'
    )
    with pytest.raises(ConfigError, match=r"'flows.review.max_cost_usd'"):
        config(flow)
    gemini = '[agent]\npreset = "gemini"\nmax_cost_usd = 1.0\n'
    assert config(gemini).agent.budget.max_cost_usd == 1.0  # gemini-2.5-pro is priced
    with pytest.raises(ConfigError, match=r"no price for model 'gemini-9'"):
        config(gemini, {"GEMINI_MODEL": "gemini-9"})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[pricing]\nm = 1\n", r"'pricing.\"m\"' must be a table"),
        ("[pricing.m]\ninput = 1\n", r"'pricing.\"m\".output' is missing"),
        ("[pricing.m]\ninput = -1\noutput = 1\n", r"'pricing.\"m\".input' must be a number"),
        ("[pricing.m]\ninput = 1\noutput = 1\nbatch = 1\n", r"unknown key 'pricing.\"m\".batch'"),
    ],
)
def test_a_bad_pricing_entry_names_its_key(table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(table)


def test_the_built_in_table_is_documented_with_its_date() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = doc[doc.index("## `[pricing]`") :]
    assert f"dated {pricing.PRICES_AS_OF}" in section
    for model in pricing.BUILT_IN:
        assert f"`{model}`" in section, model


def test_unpriced_tokens_under_a_dollar_budget_are_said_once() -> None:
    told: list[str] = []
    read = CostReader(pricing.PriceTable(), "gpt-5.5", told.append)
    usage = Usage(1000, 100, 0)
    assert read(usage).cost_usd is None
    assert read(usage).cost_usd is None
    assert len(told) == 1, told
    assert "'gpt-5.5' has no price" in told[0]
    assert "max_cost_usd cannot stop it" in told[0]
    # Priced, nothing is said and the cost is there.
    quiet: list[str] = []
    assert CostReader(pricing.PriceTable(), "gpt-5", quiet.append)(usage).cost_usd
    assert quiet == []
