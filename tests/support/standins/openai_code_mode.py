"""Codex's code mode, as the OpenAI stand-in answers it (tests.support.standins.openai).

With no model named, Codex 0.171.0 uses its default model, whose tools are declared as
an ``additional_tools`` input item: a ``functions`` namespace holding the custom tool
``exec`` (JavaScript source run in Codex's V8 host, where the shell is
``tools.exec_command``).  These helpers tell such a request and build the model's
``custom_tool_call`` answer to it.
"""

from __future__ import annotations

import json
from typing import Any


def declares_code_mode(body: dict[str, Any]) -> bool:
    """Whether a request offers the shell only through code mode's custom ``exec`` tool."""
    declared: list[Any] = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            declared += item.get("tools") or []
    for tool in declared:
        inner = tool.get("tools") if isinstance(tool, dict) else None
        for nested in [tool, *(inner if isinstance(inner, list) else [])]:
            if isinstance(nested, dict) and (nested.get("type"), nested.get("name")) == (
                "custom",
                "exec",
            ):
                return True
    return False


def code_mode_source(command: str) -> str:
    """The JavaScript a code-mode model sends to run ``command`` and show its result."""
    return (
        f"const r = await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
        'text(r.output ?? "");\n'
        'text("exit " + r.exit_code);\n'
    )


def code_mode_call(turn: int, command: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``custom_tool_call`` item running ``command``, and the events that stream it."""
    source = code_mode_source(command)
    item: dict[str, Any] = {
        "type": "custom_tool_call",
        "id": f"ctc_{turn}",
        "call_id": f"call_standin_{turn}",
        "name": "exec",
        "input": source,
        "status": "completed",
    }
    middle: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "input": "", "status": "in_progress"},
        },
        {
            "type": "response.custom_tool_call_input.delta",
            "item_id": item["id"],
            "output_index": 0,
            "delta": source,
        },
        {
            "type": "response.custom_tool_call_input.done",
            "item_id": item["id"],
            "output_index": 0,
            "input": source,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
    return item, middle
