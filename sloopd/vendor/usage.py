"""What an agent's run cost: tokens and dollars, read from its CLI's JSON event stream.

Each vendor's CLI reports usage in its own shape (Claude Code's ``result`` event,
Codex's ``turn.completed``, Gemini's ``stats``); a parser per stream turns the
lines it recognises into one ``Usage``.  Parsers never raise on a line they do not
understand: an agent's output is untrusted text, and most lines are not usage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Usage:
    """Tokens and cost of one stage execution (or seat), as the vendor reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None  # None: the vendor does not report cost

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def row(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": self.cost_usd,
        }


# A stream parser: told each output line, it updates the execution's Usage in place
# and returns True when the line was one of its events.
StreamParser = Callable[[str, Usage], bool]
