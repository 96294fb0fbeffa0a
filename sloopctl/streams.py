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


def _short(value: Any) -> str:
    shown: str = value if isinstance(value, str) else orjson.dumps(value).decode()
    shown = " ".join(shown.split())
    return shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage_text(usage: Mapping[str, Any], cost: Any = None) -> str:
    parts = []
    for label, keys in (
        ("in", ("input_tokens", "prompt", "input")),
        ("out", ("output_tokens", "candidates", "output")),
        ("cached", ("cache_read_input_tokens", "cached_input_tokens", "cached")),
    ):
        value = next((usage[k] for k in keys if isinstance(usage.get(k), int)), None)
        if value is not None:
            parts.append(f"{value} {label}")
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


def _claude_result(event: dict[str, Any]) -> str:
    usage = _mapping(event.get("usage"))
    denied = event.get("permission_denials") or []
    names = sorted({str(d.get("tool_name")) for d in denied if isinstance(d, dict)})
    head = "error" if event.get("is_error") else "done"
    figures = _usage_text(usage, event.get("total_cost_usd"))
    text = f"{head} ({event.get('subtype', 'result')}): {figures}"
    if names:
        text += f"; refused tools: {', '.join(names)}"
    return text


def _claude_system(event: dict[str, Any]) -> str | None:
    if event.get("subtype") == "init":
        return f"session started (model {event.get('model')}, cwd {event.get('cwd')})"
    return None


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


def _gemini_message(event: dict[str, Any]) -> str | None:
    if event.get("role") == "user":
        return None  # the prompt itself, already in the ticket
    content = event.get("content")
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
