"""What an agent's run cost: tokens and dollars, read from its CLI's JSON event stream.

Each vendor's CLI reports usage in its own shape (Claude Code's ``assistant`` and
``result`` events, Codex's ``turn.completed``, Gemini's ``stats``); a parser per stream
turns the lines it recognises into one ``Usage``, with the tokens of each model the
stream names (``models``: what ``sloopd.vendor.pricing`` prices when the vendor
reports no cost).  Parsers never raise on a line they do not
understand: an agent's output is untrusted text, and most lines are not usage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, cast

COST_DECIMALS: Final = 6
"""Dollars are kept to a millionth: the vendors price tokens no finer, and a sum of
floats would otherwise show its binary rounding (``0.018480000000000003``)."""


def rounded_cost(cost: float | None) -> float | None:
    """``cost`` to ``COST_DECIMALS`` places, where a cost is produced or summed."""
    return None if cost is None else round(cost, COST_DECIMALS)


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """One model's share of a Usage, counted as ``Usage`` counts (cached within input)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def plus(self, other: ModelTokens) -> ModelTokens:
        return ModelTokens(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
        )


@dataclass(slots=True)
class Usage:
    """Tokens and cost of one stage execution (or seat), as the vendor reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None  # None: the vendor does not report cost
    # The tokens of each model the stream named (a part of the totals above, or all of
    # them); never stored: a settled stage keeps its cost, priced or reported.
    models: dict[str, ModelTokens] = field(default_factory=dict, compare=False)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        if other.cost_usd is not None:
            self.cost_usd = rounded_cost((self.cost_usd or 0.0) + other.cost_usd)
        for model, tokens in other.models.items():
            self.models[model] = self.models.get(model, ModelTokens()).plus(tokens)

    def row(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": rounded_cost(self.cost_usd),
        }


# A stream parser: told each output line, it updates the execution's Usage in place
# and returns True when the line was one of its events.
StreamParser = Callable[[str, Usage], bool]


class UnknownStream(Exception):
    """A stream name with no parser in this installation; names what is missing."""


# Each vendor's parser lives in its own module, imported the first time a stage
# names its stream: adding a vendor is its module plus one line here.
STREAM_MODULES: dict[str, str] = {
    "claude": "sloopd.vendor.stream_claude",
    "codex": "sloopd.vendor.stream_codex",
    "gemini": "sloopd.vendor.stream_gemini",
}
PYTHON_SPEC = "python:"

# Parsers resolved so far, by stream name.  ``register`` adds one by hand (a
# plugin, a test); a ``python:<module>:<function>`` name resolves itself.
PARSERS: dict[str, StreamParser] = {}


def register(name: str, parser: StreamParser) -> None:
    PARSERS[name] = parser


def parser(name: str) -> StreamParser | None:
    """The parser of stream ``name``; None for ``"none"``; UnknownStream if there is none."""
    if name == "none":
        return None
    found = PARSERS.get(name)
    if found is not None:
        return found
    if name.startswith(PYTHON_SPEC):
        module_name, _, function = name.removeprefix(PYTHON_SPEC).partition(":")
    elif name in STREAM_MODULES:
        module_name, function = STREAM_MODULES[name], "parse"
    else:
        raise UnknownStream(f"no usage parser is known for stream {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownStream(f"stream {name!r}: cannot import {module_name}: {exc}") from exc
    loaded = getattr(module, function, None)
    if not callable(loaded):
        raise UnknownStream(f"stream {name!r}: {module_name} has no function {function!r}")
    PARSERS[name] = cast(StreamParser, loaded)
    return PARSERS[name]


def for_execution(name: str) -> StreamParser | None:
    """The parser one stage execution reads its stream with.

    A stream whose events must be told apart across lines (Claude Code repeats one
    API message's usage on each of its content blocks) keeps what it saw per
    execution: its module offers ``new_parser()``, and each execution gets its own.
    Every other stream's parser is the shared function ``parser`` resolves.
    """
    shared = parser(name)
    module_name = STREAM_MODULES.get(name)
    if shared is None or module_name is None:
        return shared
    module = importlib.import_module(module_name)
    if shared is not getattr(module, "parse", None):
        return shared  # registered by hand over the built-in one: used as it is
    factory = getattr(module, "new_parser", None)
    return cast(StreamParser, factory()) if callable(factory) else shared


def metric_vendor(name: str) -> str:
    """The ``vendor`` label of a stream: its name, or ``custom`` for a python: spec."""
    return "custom" if name.startswith(PYTHON_SPEC) else name


def total(usages: Iterable[Usage | None]) -> Usage | None:
    """The sum of what was reported; None when nothing was."""
    result: Usage | None = None
    for usage in usages:
        if usage is not None:
            if result is None:
                result = Usage()
            result.add(usage)
    return result


def from_row(row: Any) -> Usage | None:
    """A stored ``usage`` object back as a Usage; None for null or a malformed row."""
    if not isinstance(row, dict):
        return None
    try:
        cost = row.get("cost_usd")
        return Usage(
            int(row.get("input_tokens") or 0),
            int(row.get("output_tokens") or 0),
            int(row.get("cached_tokens") or 0),
            rounded_cost(None if cost is None else float(cost)),
        )
    except (TypeError, ValueError):
        return None
