"""What a webhook receiver is sent: the JSON body, or a Slack-compatible one.

Built from a ``Notice`` (plain data the caller read from the store after the
event was committed), so this module knows no store and no daemon.  Text that
came from agents or tickets (a run's ``reason``, a gate's) is cut to a bounded
length and, in Slack bodies, escaped so that it can neither mention anyone
(``<!channel>``) nor forge a link.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from sloopd.ops.webhook_targets import Target

BODY_VERSION: Final = 1
# A reason longer than this is cut (with "…"): a body stays small whatever an
# agent printed, and a receiver's message limit (Slack: 3000 a block) holds.
REASON_MAX: Final = 1000
_MARKS: Final = {
    "merged": ":white_check_mark:",
    "failed": ":x:",
    "needs_review": ":eyes:",
    "aborted": ":no_entry_sign:",
    "gate_changed": ":vertical_traffic_light:",
}


@dataclass(frozen=True, slots=True)
class Notice:
    """One committed event worth telling: ``on`` is the name a target listens for."""

    on: str
    cursor: str
    kind: str
    at_ms: int
    repo: str
    run: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None


def moment(at_ms: int) -> str:
    """RFC 3339 in UTC with milliseconds: ``2026-12-01T12:48:49.501Z``."""
    stamp = datetime.fromtimestamp(at_ms / 1000, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at_ms % 1000:03d}Z"


def cut(value: Any, limit: int = REASON_MAX) -> str | None:
    if value is None:
        return None
    words = str(value)
    return words if len(words) <= limit else words[: limit - 1] + "…"


def summary(notice: Notice) -> str:
    """One plain sentence: ``fix-login#1 (R4) failed: stage 'test' failed …``."""
    if notice.run is not None:
        run = notice.run
        line = f"{run.get('alias')} ({run.get('id')}) {run.get('state')}"
        reason = cut(run.get("reason"))
        return line + (f": {reason}" if reason else "")
    gate = notice.gate or {}
    line = f"gate {gate.get('from')} -> {gate.get('state')}"
    until = gate.get("until_ms")
    if isinstance(until, int):
        line += f" until {moment(until)}"
    reason = cut(gate.get("reason"))
    return line + (f": {reason}" if reason else "")


def json_body(target: Target, notice: Notice, delivery: str) -> dict[str, Any]:
    run = dict(notice.run) if notice.run is not None else None
    if run is not None:
        run["reason"] = cut(run.get("reason"))
    gate = dict(notice.gate) if notice.gate is not None else None
    if gate is not None:
        gate["reason"] = cut(gate.get("reason"))
    return {
        "version": BODY_VERSION,
        "delivery": delivery,
        "on": notice.on,
        "event": {
            "cursor": notice.cursor,
            "kind": notice.kind,
            "at_ms": notice.at_ms,
            "at": moment(notice.at_ms),
        },
        "repo": notice.repo,
        "run": run,
        "gate": gate,
        "link": target.link_for(notice.run),
        "text": summary(notice),
    }


def slack_escape(text: str) -> str:
    """Slack's three control characters (api.slack.com "Escaping text")."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def usage_words(usage: Any) -> str | None:
    if not isinstance(usage, dict):
        return None
    tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    words = f"{tokens:,} tokens"
    cost = usage.get("cost_usd")
    return words + (f" · ${float(cost):.2f}" if isinstance(cost, int | float) else "")


def slack_body(target: Target, notice: Notice) -> dict[str, Any]:
    """``{"text", "blocks"}``: an incoming webhook's message, text as the fallback."""
    mark = _MARKS.get(notice.on, "")
    link = target.link_for(notice.run)
    facts = [notice.repo]
    if notice.run is not None:
        run = notice.run
        name = slack_escape(str(run.get("alias")))
        title = f"<{link}|{name}>" if link else name
        head = f"{mark} *{title}* {slack_escape(str(run.get('state')))}"
        reason = cut(run.get("reason"))
        facts += [str(run.get("id")), f"ticket {run.get('ticket')}"]
        usage = usage_words(run.get("usage"))
        if usage:
            facts.append(usage)
    else:
        gate = notice.gate or {}
        head = f"{mark} gate *{gate.get('from')}* → *{gate.get('state')}*"
        until = gate.get("until_ms")
        if isinstance(until, int):
            head += f" until {moment(until)}"
        reason = cut(gate.get("reason"))
        if link:
            head += f" (<{link}|details>)"
    section = head + (f"\n> {slack_escape(reason)}" if reason else "")
    return {
        "text": slack_escape(summary(notice)),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": section}},
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": slack_escape(" · ".join(facts))},
                ],
            },
        ],
    }


def encode(target: Target, notice: Notice, delivery: str) -> bytes:
    """The exact bytes posted (and signed)."""
    if target.format == "slack":
        return orjson.dumps(slack_body(target, notice))
    return orjson.dumps(json_body(target, notice, delivery))
