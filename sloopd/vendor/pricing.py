"""What tokens cost: the price table that turns a vendor's token counts into dollars.

Codex and Gemini CLI report tokens but no cost, and Claude Code reports its cost
only in its final ``result`` event; without a price, ``max_cost_usd`` could never
stop them.  So Sloop prices the tokens itself, per model, from a table: dollars
per million input, output and cached-input tokens.  The built-in table is dated
(``PRICES_AS_OF``) and every entry can be overridden, or a model added, under
``[pricing]`` in sloop.toml.  Where the vendor reports a cost (Claude Code's
``total_cost_usd``), that cost wins; a priced cost is an estimate at list prices:
no discounts, no batch or priority tiers, no long-prompt surcharges, and cache
writes priced as plain input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sloopd.util.validate import ConfigError
from sloopd.vendor.usage import ModelTokens, Usage

PER_MILLION = 1_000_000
# When the built-in figures were taken, and from where (docs/configuration.md#pricing).
PRICES_AS_OF = "2026-12-02"
PRICE_SOURCES = (
    "Anthropic: the model catalog of Claude Code 2.1.332 (the pinned CLI), standard tier",
    "OpenAI, Google: the vendors' published list prices as of November 2025",
)


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens: fresh input, output, and input served from a cache."""

    input: float
    output: float
    cached: float

    def cost(self, tokens: ModelTokens) -> float:
        cached = min(tokens.cached_tokens, tokens.input_tokens)
        fresh = tokens.input_tokens - cached
        dollars = fresh * self.input + cached * self.cached + tokens.output_tokens * self.output
        return dollars / PER_MILLION


def _same(price: Price, *models: str) -> dict[str, Price]:
    return dict.fromkeys(models, price)


BUILT_IN: Mapping[str, Price] = {
    # Claude Code 2.1.332's catalog (pricing tiers, by catalog id and first-party id).
    **_same(Price(0.8, 4, 0.08), "claude-3-5-haiku"),
    **_same(Price(1, 5, 0.1), "claude-haiku-4-5"),
    **_same(Price(0.1, 0.5, 0.01), "claude-haiku-5-5"),
    **_same(
        Price(3, 15, 0.3),
        "claude-3-5-sonnet",
        "claude-3-7-sonnet",
        "claude-sonnet-4-0",
        "claude-sonnet-4",
        "claude-sonnet-4-5",
        "claude-sonnet-4-6",
    ),
    **_same(Price(2, 10, 0.2), "claude-sonnet-5"),
    **_same(Price(2, 10, 0.1), "claude-sonnet-5-5"),
    **_same(Price(15, 75, 1.5), "claude-opus-4-0", "claude-opus-4", "claude-opus-4-1"),
    **_same(
        Price(5, 25, 0.5),
        "claude-opus-4-5",
        "claude-opus-4-6",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
    ),
    **_same(Price(4, 20, 0.2), "claude-opus-5-5"),
    **_same(Price(10, 50, 1), "claude-fable-5", "claude-mythos-5"),
    **_same(Price(10, 50, 0.25), "claude-fable-5-1", "claude-mythos-5-1"),
    **_same(Price(8, 40, 0.2), "claude-fable-5-2", "claude-mythos-5-2"),
    # OpenAI's list prices (Codex 0.171.0's own models, gpt-5.5 and later, had none
    # published that Sloop could take: price them under [pricing]).
    **_same(Price(1.25, 10, 0.125), "gpt-5", "gpt-5-codex", "gpt-5.1", "gpt-5.1-codex"),
    **_same(Price(0.25, 2, 0.025), "gpt-5-mini", "gpt-5.1-codex-mini"),
    **_same(Price(0.05, 0.4, 0.005), "gpt-5-nano"),
    # Google's list prices, prompts up to 200k tokens.
    **_same(Price(1.25, 10, 0.125), "gemini-2.5-pro"),
    **_same(Price(0.3, 2.5, 0.03), "gemini-2.5-flash"),
    **_same(Price(0.1, 0.4, 0.01), "gemini-2.5-flash-lite"),
}

# A model as a stream names it, less what does not change its price: a dated
# snapshot (claude-sonnet-4-5-20250929), a context-window suffix (claude-opus-4-6[1m]).
_SNAPSHOT = re.compile(r"(?:-\d{8}|\[[^\]]*\])+$")


def canonical(model: str) -> str:
    return _SNAPSHOT.sub("", model.strip().lower())


@dataclass(frozen=True, slots=True)
class PriceTable:
    """The built-in prices with sloop.toml's ``[pricing]`` over them."""

    overrides: Mapping[str, Price] = field(default_factory=dict)

    def price(self, model: str) -> Price | None:
        """The price of ``model`` (exactly, or its snapshot's family); None: unpriced."""
        for name in (model.strip().lower(), canonical(model)):
            found = self.overrides.get(name) or BUILT_IN.get(name)
            if found is not None:
                return found
        return None


class PricingError(ConfigError):
    """A ``[pricing]`` entry that does not validate; names the key."""


_PRICE_KEYS = ("input", "output", "cached")


def parse_pricing(section: Any) -> PriceTable:
    """``[pricing."<model>"]`` tables: ``input``, ``output`` (and ``cached``, default input)."""
    if not isinstance(section, dict):
        raise PricingError("'pricing' must be a table of models")
    overrides: dict[str, Price] = {}
    for model, entry in section.items():
        key = f'pricing."{model}"'
        if not isinstance(entry, dict):
            raise PricingError(f"'{key}' must be a table with input, output and cached")
        unknown = sorted(set(entry) - set(_PRICE_KEYS))
        if unknown:
            raise PricingError(f"unknown key '{key}.{unknown[0]}' (known: input, output, cached)")
        figures: dict[str, float] = {}
        for name in _PRICE_KEYS:
            value = entry.get(name, entry.get("input") if name == "cached" else None)
            if value is None:
                raise PricingError(f"'{key}.{name}' is missing (dollars per million tokens)")
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise PricingError(f"'{key}.{name}' must be a number of dollars, at least 0")
            figures[name] = float(value)
        overrides[model.strip().lower()] = Price(**figures)
    return PriceTable(overrides)


def priced(usage: Usage, table: PriceTable, model: str | None) -> tuple[Usage, str | None]:
    """``usage`` with a cost: the vendor's when it reported one, else priced from ``table``.

    Tokens the stream attributed to a model are priced at that model's price; the
    rest at ``model``'s, the stage's configured model (None: not known).  Returns the
    usage (a copy when priced here) and, when some tokens could not be priced, the
    model that lacks a price (``""``: the model is not known); the cost then stays
    None rather than counting part of the spend.
    """
    if usage.cost_usd is not None:
        return usage, None
    dollars = 0.0
    attributed = ModelTokens()
    for name, tokens in usage.models.items():
        price = table.price(name)
        if price is None:
            return usage, name
        dollars += price.cost(tokens)
        attributed = attributed.plus(tokens)
    rest = ModelTokens(
        max(0, usage.input_tokens - attributed.input_tokens),
        max(0, usage.output_tokens - attributed.output_tokens),
        max(0, usage.cached_tokens - attributed.cached_tokens),
    )
    if rest != ModelTokens():
        price = table.price(model) if model else None
        if price is None:
            return usage, model or ""
        dollars += price.cost(rest)
    if not usage.models and rest == ModelTokens():
        return usage, None  # nothing used yet: nothing to price
    return replace(usage, cost_usd=dollars, models=dict(usage.models)), None


class CostReader:
    """A child's usage with its cost: the vendor's, else priced from ``[pricing]``.

    Claude Code's cost arrives with its last event, Codex's and Gemini's never: a
    priced cost is what lets ``max_cost_usd`` judge them while they run.  When some
    tokens have no price, ``tell`` hears it once (the cost then stays unknown).
    """

    def __init__(
        self, prices: PriceTable, model: str | None, tell: Callable[[str], None] | None
    ) -> None:
        self.prices = prices
        self.model = model
        self.tell = tell

    def __call__(self, reported: Usage) -> Usage:
        costed, missing = priced(reported, self.prices, self.model)
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
