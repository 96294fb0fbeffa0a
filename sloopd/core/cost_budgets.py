"""A ``max_cost_usd`` that can be enforced, or a load error: never a silent budget.

Claude Code reports its cost; Codex and Gemini CLI report only tokens, which Sloop
prices per model (``sloopd.vendor.pricing``).  A dollar budget over a stage whose
cost cannot be known would read as a limit and stop nothing, so at load every agent
child (stage or panel seat) under a dollar budget whose stream reports no cost must
have a model with a price: the one its stream names (Gemini's stats), else the one
its preset is configured to run (``CODEX_MODEL``, ``GEMINI_MODEL``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sloopd.flows.flow import AgentSettings, Flow
from sloopd.flows.presets import configured_model
from sloopd.vendor.pricing import PriceTable

# Streams whose CLI reports tokens but no cost.  Whether each names its model:
# Gemini's stats do (per model), Codex's events never do.
UNPRICED_STREAMS: Mapping[str, bool] = {"codex": False, "gemini": True}


def children(agent: AgentSettings, flow: Flow) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each agent child of ``flow``: the stream it prints and its command."""
    for stage in flow.stages:
        if stage.action != "agent":
            continue
        stage_stream = stage.stream or agent.stream
        command = stage.command or agent.command
        if not stage.reviewers:
            yield stage_stream, command
        for reviewer in stage.reviewers:
            yield reviewer.stream or stage_stream, reviewer.command


def check(
    agent: AgentSettings, flows: Mapping[str, Flow], prices: PriceTable, environ: Mapping[str, str]
) -> str | None:
    """Why a dollar budget could not be enforced, naming its key; None when it can."""
    for flow in flows.values():
        budget = flow.budget(agent)
        if budget.max_cost_usd is None:
            continue
        key = (
            f"flows.{flow.name}.max_cost_usd"
            if flow.max_cost_usd is not None
            else ("agent.max_cost_usd")
        )
        for stream, command in children(agent, flow):
            if stream not in UNPRICED_STREAMS:
                continue
            model = configured_model(command, environ)
            if model is None and UNPRICED_STREAMS[stream]:
                continue  # the stream names its model; priced (or flagged) as it runs
            if model is None:
                return (
                    f"'{key}': {stream} reports no cost and its stream names no model, so "
                    f"Sloop cannot price it: run the {stream} preset with CODEX_MODEL set "
                    f"(and a [pricing] entry for that model if Sloop has none), or drop "
                    f"the key (flow '{flow.name}')"
                )
            if prices.price(model) is None:
                return (
                    f"'{key}': {stream} reports no cost and Sloop has no price for model "
                    f'{model!r}: add [pricing."{model}"] with input, output and cached '
                    f"(dollars per million tokens), or drop the key (flow '{flow.name}')"
                )
    return None
