"""What a child's stdout says it spent, as its lines arrive.

``read_usage`` runs on each batch of stdout lines: the stream parser counts tokens,
``CostReader`` prices what the stream reports no cost for (the ``[pricing]`` table),
the run's budget is checked, and a Claude Code run's refused tools are noted.
"""

from __future__ import annotations

from collections.abc import Callable

from sloopd.runs import budget as budgets
from sloopd.runs.runstate import ActiveRun
from sloopd.vendor import pricing, stream_claude
from sloopd.vendor import usage as usages
from sloopd.vendor.usage import Usage


class CostReader:
    """A child's usage with its cost: the vendor's, else priced from ``[pricing]``.

    Claude Code's cost arrives with its last event, Codex's and Gemini's never: a
    priced cost is what lets ``max_cost_usd`` judge them while they run.  When some
    tokens have no price, ``tell`` hears it once (the cost then stays unknown).
    """

    def __init__(
        self, prices: pricing.PriceTable, model: str | None, tell: Callable[[str], None] | None
    ) -> None:
        self.prices = prices
        self.model = model
        self.tell = tell

    def __call__(self, reported: Usage) -> Usage:
        costed, missing = pricing.priced(reported, self.prices, self.model)
        if missing is not None and self.tell is not None:
            self.tell(unpriced_notice(missing))
            self.tell = None
        return costed


def unpriced_notice(model: str) -> str:
    """Said once per child when a dollar budget cannot see what it spends."""
    named = f"model {model!r} has no price" if model else "its model is not known"
    return (
        f"sloop: this agent reports no cost and {named} in [pricing]: its cost is unknown "
        "and max_cost_usd cannot stop it (docs/configuration.md#pricing)"
    )


def read_usage(
    active: ActiveRun,
    parse: usages.StreamParser,
    usage: Usage,
    price: CostReader,
    stream_name: str,
    texts: list[str],
) -> None:
    """What a batch of stdout lines says the child spent (and tools it was refused)."""
    for text in texts:
        if _parsed(parse, text, usage):
            active.live = price(usage)
            budgets.check(active)
            if stream_name == "claude" and '"permission_denials"' in text:
                refused = stream_claude.permission_denials(text) or []
                active.refused_tools = tuple(dict.fromkeys(refused))


def _parsed(parse: usages.StreamParser, line: str, usage: Usage) -> bool:
    """A parser's verdict on one line; a parser that raises reads nothing from it."""
    try:
        return parse(line, usage)
    except Exception:
        return False
