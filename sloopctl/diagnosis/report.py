"""What doctor reports: one ``Check`` per check, built from its ``Findings``.

Also the few words and text helpers the checks share, so every line of the
report reads alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sloopctl.layout import Paint

Status = Literal["ok", "warn", "fail"]

NOT_REACHABLE: Final = "skipped: daemon not reachable"
START: Final = "'sloopctl daemon'"
NAME_WIDTH: Final = 9
MAX_PROBLEMS_SHOWN: Final = 5
MAX_FIXES_SHOWN: Final = 3
_RANK: Final[Mapping[str, int]] = {"ok": 0, "warn": 1, "fail": 2}
_WORD: Final[Mapping[str, tuple[str, str]]] = {
    "ok": ("ok", "green"),
    "warn": ("warn", "yellow"),
    "fail": ("FAIL", "red"),
}


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: its line of the report, or its object with --json."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}

    def line(self, paint: Paint) -> str:
        word, style = _WORD[self.status]
        text = f"{paint(word.ljust(4), style)}  {self.name.ljust(NAME_WIDTH)}  {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text


@dataclass(slots=True)
class Findings:
    """The problems one check found; reported worst first, then its summary."""

    problems: list[tuple[Status, str, str | None]] = field(default_factory=list)

    def add(self, status: Status, text: str, fix: str | None = None) -> None:
        self.problems.append((status, text, fix))

    def result(self, name: str, summary: str) -> Check:
        if not self.problems:
            return Check(name, "ok", summary)
        ordered = sorted(self.problems, key=lambda p: -_RANK[p[0]])
        texts = [text for _, text, _ in ordered]
        fixes = list(dict.fromkeys(fix for _, _, fix in ordered if fix))
        # One line per check, however many worktrees or groups are in trouble.
        texts = _at_most(texts, MAX_PROBLEMS_SHOWN) + ([summary] if summary else [])
        fix = "; ".join(_at_most(fixes, MAX_FIXES_SHOWN))
        return Check(name, ordered[0][0], "; ".join(texts), fix or None)


def _at_most(items: list[str], limit: int) -> list[str]:
    if len(items) <= limit:
        return items
    return [*items[:limit], f"and {len(items) - limit} more"]


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
