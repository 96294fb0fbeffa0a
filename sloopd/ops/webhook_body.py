"""What a webhook receiver is sent: the JSON body, or a Slack-compatible one.

Built from a ``Notice`` (plain data the caller read from the store after the
event was committed), so this module knows no store and no daemon.  Text that
came from agents or tickets (a run's ``reason``, a gate's) is cut to a bounded
length and, in Slack bodies, escaped so that it can neither mention anyone
(``<!channel>``) nor forge a link.

Every string a body carries is also one line of plain characters
(``quoting.one_line``: line breaks become a space, other control characters and
bidi overrides U+FFFD).  A reason quotes what an agent named or printed; on 0.7.0 a
file named ``x\n\n:white_check_mark: *t1#1* merged`` gave a failed run's Slack
message a second, "merged" headline, and its fallback text (what a phone shows)
too.  So the daemon's own headline is always the only first line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from sloopd.ops.webhook_targets import Target
from sloopd.util import quoting

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
    "resolved": ":heavy_check_mark:",
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
    """A reason for a body: one line, at most ``limit`` characters."""
    if value is None:
        return None
    return quoting.clip(plain(value), limit)


def plain(value: Any) -> str:
    """Any text a body interpolates (an alias, a state, a name): one line, no controls."""
    return quoting.one_line(str(value))


def _plain_tree(value: Any) -> Any:
    """A row for a JSON body with every string in it (keys too) one line, no controls."""
    if isinstance(value, str):
        return quoting.one_line(value)
    if isinstance(value, dict):
        return {_plain_tree(k): _plain_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_tree(v) for v in value]
    return value


def run_words(notice: Notice) -> tuple[str, str | None]:
    """What became of the run, and why: its state and reason, or (``resolved``) how a
    person or the daemon resolved it and their words."""
    run = notice.run or {}
    resolution = run.get("resolution")
    if notice.on == "resolved" and isinstance(resolution, dict):
        how = "merged by hand" if resolution.get("resolution") == "merged" else "dismissed"
        said = f"resolved: {how}"
        if resolution.get("auto"):
            said += " (found on main)"
        elif resolution.get("by"):
            said += f" (by {plain(resolution['by'])})"
        return said, cut(resolution.get("reason"))
    return plain(run.get("state")), cut(run.get("reason"))


def summary(notice: Notice) -> str:
    """One plain sentence: ``fix-login#1 (R4) failed: stage 'test' failed …``."""
    if notice.run is not None:
        run = notice.run
        state, reason = run_words(notice)
        line = f"{plain(run.get('alias'))} ({plain(run.get('id'))}) {state}"
        return line + (f": {reason}" if reason else "")
    gate = notice.gate or {}
    line = f"gate {plain(gate.get('from'))} -> {plain(gate.get('state'))}"
    until = gate.get("until_ms")
    if isinstance(until, int):
        line += f" until {moment(until)}"
    reason = cut(gate.get("reason"))
    return line + (f": {reason}" if reason else "")


def json_body(target: Target, notice: Notice, delivery: str) -> dict[str, Any]:
    # A receiver may print any field as it is (a chat bridge, a log line): none of them
    # may start a line of its own.
    run = _plain_tree(notice.run) if notice.run is not None else None
    if run is not None:
        run["reason"] = cut(run.get("reason"))
    gate = _plain_tree(notice.gate) if notice.gate is not None else None
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
        "repo": plain(notice.repo),
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
    facts = [plain(notice.repo)]
    if notice.run is not None:
        run = notice.run
        name = slack_escape(plain(run.get("alias")))
        title = f"<{link}|{name}>" if link else name
        state, reason = run_words(notice)
        head = f"{mark} *{title}* {slack_escape(state)}"
        facts += [plain(run.get("id")), f"ticket {plain(run.get('ticket'))}"]
        usage = usage_words(run.get("usage"))
        if usage:
            facts.append(usage)
    else:
        gate = notice.gate or {}
        head = f"{mark} gate *{plain(gate.get('from'))}* → *{plain(gate.get('state'))}*"
        until = gate.get("until_ms")
        if isinstance(until, int):
            head += f" until {moment(until)}"
        reason = cut(gate.get("reason"))
        if link:
            head += f" (<{link}|details>)"
    # The only line break of the message: the daemon's headline, then the quoted reason.
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
