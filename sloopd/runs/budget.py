"""Run budgets: a stage is stopped once the run's reported usage passes one.

``max_tokens`` counts input plus output tokens (cached input is part of input as
the vendors report it, and not counted twice); ``max_cost_usd`` counts only what
the vendor priced.  Both are read from the agents' own JSON event streams, so a
budget is only as good as what the stream reports: an agent stage with
``stream = "none"`` spends nothing a budget can see.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sloopd.flows.flow import Budget
from sloopd.runs.runstate import ActiveRun
from sloopd.vendor.usage import Usage

BUDGET_EXCEEDED = "budget_exceeded"
TIMED_OUT = "timed_out"


def over(budget: Budget, used: Usage) -> str | None:
    """Why ``used`` is past ``budget``, naming the figure; None while within it."""
    if budget.max_tokens is not None and used.tokens > budget.max_tokens:
        return f"used {used.tokens} tokens, over max_tokens {budget.max_tokens}"
    cost = used.cost_usd
    if budget.max_cost_usd is not None and cost is not None and cost > budget.max_cost_usd:
        return f"used ${cost:.4f}, over max_cost_usd {budget.max_cost_usd:g}"
    return None


def check(active: ActiveRun) -> None:
    """After the executing child reported usage: stop it once the run is over budget."""
    if active.stop_cause is not None:
        return
    used = active.used()
    reason = over(active.budget, used) if used is not None else None
    if reason is not None:
        stop(active, BUDGET_EXCEEDED, reason)


def stop(active: ActiveRun, classification: str, detail: str) -> None:
    """Stop the executing child (as the stall watchdog does); its stage fails with why.

    A child not started yet is stopped as soon as it is (sloopd.runs.spawning).
    """
    active.stop_cause = {"classification": classification, "detail": detail}
    child = active.child
    if child is not None:
        asyncio.get_running_loop().create_task(child.stop())


def stopped_result(result: dict[str, Any], cause: dict[str, Any]) -> dict[str, Any]:
    """A stage the daemon stopped: failed, with its cause as reason and diagnosis.

    A spent budget is final: no return_to mends it, the run ends failed.
    """
    stopped = {
        **result,
        "passed": False,
        "reason": cause["detail"],
        "diagnosis": {
            "classification": cause["classification"],
            "evidence": None,
            "vendor": None,
            "reset_at_ms": None,
            "detail": cause["detail"],
        },
    }
    if cause["classification"] == BUDGET_EXCEEDED:
        stopped["final"] = True
    return stopped
