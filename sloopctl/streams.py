"""Agent CLIs' JSON event streams, rendered as a person reads them.

The presets run Claude Code (``--output-format stream-json``), Codex
(``exec --json``) and Gemini CLI (``-o stream-json``) with a JSON object per
output line.  The log keeps the raw line; ``sloopctl logs`` shows what it says:
assistant text, tool calls and their results, errors, the final usage.
``--raw`` shows the JSON as stored.

``readable(line)`` answers None for anything it does not recognise, so a line
that is not such an event (or an event of a newer CLI version) prints unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

# Longest rendering of a tool's input or output, so a file dump stays one screen line.
SHOWN_CHARS: Final = 200


def readable(line: str) -> str | None:
    """A person's rendering of one event line, or None to print the line as it is."""
    if not line.startswith("{") or '"type"' not in line:
        return None
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict):
        return None
    kind = event.get("type")
    render = _RENDERERS.get(kind) if isinstance(kind, str) else None
    if render is None:
        return None
    try:
        return render(event)
    except (AttributeError, TypeError, ValueError):
        return None  # an event of a shape we do not know: show it as it is


def rendered(record: Mapping[str, Any]) -> str | None:
    """A log record's text as ``readable`` renders it, or None where it is shown raw.

    The one rendering of a record's text: ``sloopctl logs`` prints it and the web
    gateway sends it beside the raw text, so both show an agent's stream alike.
    Only stdout carries an agent CLI's events; the other streams are never parsed.
    """
    body = record.get("text")
    if record.get("stream") != "stdout" or not isinstance(body, str):
        return None
    return readable(body)


def where(record: Mapping[str, Any]) -> str:
    """``stage#attempt``, with ``seat N`` for a panel seat's record (its ``reviewer``)."""
    stage, attempt, seat = record.get("stage"), record.get("attempt"), record.get("reviewer")
    shown = "-" if stage is None else str(stage)
    if attempt is not None:
        shown += f"#{attempt}"
    if isinstance(seat, int) and not isinstance(seat, bool):
        shown += f" seat {seat}"
    return shown


def _short(value: Any) -> str:
    shown: str = value if isinstance(value, str) else orjson.dumps(value).decode()
    shown = " ".join(shown.split())
    return shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _tokens(usage: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    return next((usage[k] for k in keys if isinstance(usage.get(k), int)), None)


def _usage_text(usage: Mapping[str, Any], cost: Any = None) -> str:
    """Sloop's one convention (docs/agents.md "Tokens"): ``in`` counts every input token,
    cached ones included, and ``(N cached)`` says how many of them the cache served,
    exactly as ``usage.input_tokens`` and ``usage.cached_tokens`` count them."""
    parts = []
    taken = _tokens(usage, ("input_tokens", "prompt", "input"))
    cached = _tokens(usage, ("cache_read_input_tokens", "cached_input_tokens", "cached"))
    if taken is not None:
        parts.append(f"{taken} in ({cached} cached)" if cached else f"{taken} in")
    given = _tokens(usage, ("output_tokens", "candidates", "output"))
    if given is not None:
        parts.append(f"{given} out")
    if isinstance(cost, int | float):
        parts.append(f"${cost:.4f}")
    return ", ".join(parts)


# --- Claude Code ------------------------------------------------------------------


def _claude_content(event: dict[str, Any]) -> str | None:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return None
    shown = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            shown.append(str(block["text"]).strip())
        elif kind == "tool_use":
            shown.append(f"→ {block.get('name')}: {_short(block.get('input'))}")
        elif kind == "tool_result":
            mark = "✗" if block.get("is_error") else "←"
            shown.append(f"{mark} {_short(block.get('content'))}")
    return "\n".join(shown) if shown else None


def _claude_input(usage: Mapping[str, Any]) -> Mapping[str, Any]:
    """Claude's usage with ``input_tokens`` as Sloop counts it: its ``input_tokens`` is
    only the uncached part, so cache writes and reads are added (sloopd.vendor.stream_claude)."""
    parts = [usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens")]
    parts.append(usage.get("cache_read_input_tokens"))
    counted = [p for p in parts if isinstance(p, int) and not isinstance(p, bool)]
    if not counted:
        return usage
    return {**usage, "input_tokens": sum(counted)}


def _claude_result(event: dict[str, Any]) -> str:
    usage = _claude_input(_mapping(event.get("usage")))
    denied = event.get("permission_denials") or []
    names = sorted({str(d.get("tool_name")) for d in denied if isinstance(d, dict)})
    head = "error" if event.get("is_error") else "done"
    figures = _usage_text(usage, event.get("total_cost_usd"))
    text = f"{head} ({event.get('subtype', 'result')}): {figures}"
    if names:
        text += f"; refused tools: {', '.join(names)}"
    return text


# What every Claude system event repeats: no news for a reader.
_CLAUDE_SYSTEM_NOISE: Final = frozenset({"type", "subtype", "session_id", "uuid"})


def _claude_system(event: dict[str, Any]) -> str | None:
    subtype = event.get("subtype")
    if subtype == "init":
        return f"session started (model {event.get('model')}, cwd {event.get('cwd')})"
    if not isinstance(subtype, str) or not subtype:
        return None
    # Newer subtypes (vcs_state_changed, compact_boundary, …): named, with what they say.
    rest = {k: v for k, v in event.items() if k not in _CLAUDE_SYSTEM_NOISE}
    return f"{subtype}: {_short(rest)}" if rest else subtype


# --- Codex ------------------------------------------------------------------------


def _codex_item(event: dict[str, Any]) -> str | None:
    item = event.get("item")
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind in ("agent_message", "reasoning") and item.get("text"):
        return str(item["text"]).strip()
    if kind == "command_execution":
        if event.get("type") == "item.started":
            return f"→ $ {_short(item.get('command'))}"
        code = item.get("exit_code")
        mark = "←" if code in (0, None) else "✗"
        output = item.get("aggregated_output") or ""
        return f"{mark} exit {code}: {_short(output)}" if output else f"{mark} exit {code}"
    if kind == "file_change":
        return f"→ files: {_short(item.get('changes'))}"
    if kind == "error":
        return f"error: {_short(item.get('message'))}"
    return None


def _codex_turn_completed(event: dict[str, Any]) -> str:
    usage = _mapping(event.get("usage"))
    return f"turn done: {_usage_text(usage)}"


def _error(event: dict[str, Any]) -> str:
    message = event.get("message") or event.get("error")
    return f"error: {_short(message)}"


def _codex_turn_failed(event: dict[str, Any]) -> str:
    error = event.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return f"turn failed: {_short(message)}"


# --- Gemini CLI -------------------------------------------------------------------


# How much of Gemini's echo of the prompt is shown: enough to recognise it.
PROMPT_SHOWN_CHARS: Final = 80


def _gemini_message(event: dict[str, Any]) -> str | None:
    content = event.get("content")
    if event.get("role") == "user":
        # Gemini echoes the whole prompt (the ticket, up to megabytes) as one event:
        # one labelled line with its size, the prompt itself is in the ticket.
        text = content if isinstance(content, str) else ""
        head = " ".join(text[: PROMPT_SHOWN_CHARS * 4].split())  # never split megabytes
        if len(head) > PROMPT_SHOWN_CHARS:
            head = head[: PROMPT_SHOWN_CHARS - 1] + "…"
        return f"prompt ({len(text)} chars): {head}"
    return str(content) if content else None


def _gemini_tool_use(event: dict[str, Any]) -> str:
    return f"→ {event.get('tool_name')}: {_short(event.get('parameters'))}"


def _gemini_tool_result(event: dict[str, Any]) -> str:
    mark = "←" if event.get("status") == "success" else "✗"
    body = event.get("output") if event.get("output") is not None else event.get("error")
    return f"{mark} {_short(body)}" if body is not None else mark


def _gemini_result(event: dict[str, Any]) -> str:
    stats = _mapping(event.get("stats"))
    usage = {
        "input": stats.get("input_tokens"),
        "output": stats.get("output_tokens"),
        "cached": stats.get("cached"),
    }
    return f"{event.get('status', 'done')}: {_usage_text(usage)}"


def _init(event: dict[str, Any]) -> str | None:
    model = event.get("model")
    return f"session started (model {model})" if model else None


_RENDERERS: Final[dict[str, Callable[[dict[str, Any]], str | None]]] = {
    # Claude Code
    "assistant": _claude_content,
    "user": _claude_content,
    "result": lambda e: _gemini_result(e) if "stats" in e else _claude_result(e),
    "system": _claude_system,
    # Codex
    "item.started": _codex_item,
    "item.completed": _codex_item,
    "turn.completed": _codex_turn_completed,
    "turn.failed": _codex_turn_failed,
    "error": _error,
    # Gemini CLI
    "init": _init,
    "message": _gemini_message,
    "tool_use": _gemini_tool_use,
    "tool_result": _gemini_tool_result,
}
