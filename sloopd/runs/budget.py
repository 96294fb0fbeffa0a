"""Run budgets: a stage is stopped once the run's reported usage passes one.

``max_tokens`` counts input plus output tokens (cached input is part of input as
the vendors report it, and not counted twice); ``max_cost_usd`` counts only what
the vendor priced.  Both are read from the agents' own JSON event streams, so a
budget is only as good as what the stream reports: an agent stage with
``stream = "none"`` spends nothing a budget can see.
"""

from __future__ import annotations

from sloopd.flows.flow import Budget
from sloopd.runs import stop as stops
from sloopd.runs.runstate import ActiveRun
from sloopd.vendor.usage import Usage

BUDGET_EXCEEDED = stops.BUDGET_EXCEEDED
TIMED_OUT = stops.TIMED_OUT


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
    if stops.child_stopped(active.stop) is not None:
        return  # already stopped by a timeout or the budget: the first cause stands
    used = active.used()
    reason = over(active.budget, used) if used is not None else None
    if reason is not None:
        active.stop_child(stops.over_budget(reason))
