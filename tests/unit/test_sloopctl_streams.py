"""Agent CLIs' JSON event lines, rendered as a person reads them (and left alone otherwise)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from sloopctl.feeds_cli import record_line
from sloopctl.layout import painter
from sloopctl.streams import SHOWN_CHARS, readable
from sloopd.vendor.stream_claude import parse
from sloopd.vendor.usage import Usage


def line(event: Mapping[str, object]) -> str:
    return orjson.dumps(event).decode()


def test_claude_turns_tools_and_result() -> None:
    turn = line(
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "I'll add the file."},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "git commit"}},
                ]
            },
        }
    )
    assert readable(turn) == 'I\'ll add the file.\n→ Bash: {"command":"git commit"}'
    result = line(
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}}
    )
    assert readable(result) == "← ok"
    done = line(
        {
            "type": "result",
            "subtype": "success",
            "total_cost_usd": 0.0123,
            "usage": {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 100},
            "permission_denials": [{"tool_name": "Write"}, {"tool_name": "Edit"}],
        }
    )
    assert readable(done) == (
        "done (success): 1300 in (100 cached), 300 out, $0.0123; refused tools: Edit, Write"
    )


def test_codex_items_and_turns() -> None:
    started = line({"type": "item.started", "item": {"type": "command_execution", "command": "ls"}})
    assert readable(started) == "→ $ ls"
    finished = {"type": "command_execution", "exit_code": 1, "aggregated_output": "no such\nfile"}
    assert readable(line({"type": "item.completed", "item": finished})) == "✗ exit 1: no such file"
    said = line({"type": "item.completed", "item": {"type": "agent_message", "text": "Done."}})
    assert readable(said) == "Done."
    usage = {"input_tokens": 1500, "cached_input_tokens": 200, "output_tokens": 250}
    assert readable(line({"type": "turn.completed", "usage": usage})) == (
        "turn done: 1500 in (200 cached), 250 out"
    )
    failed = line({"type": "turn.failed", "error": {"message": "stream disconnected"}})
    assert readable(failed) == "turn failed: stream disconnected"


def test_gemini_messages_tools_and_stats() -> None:
    echo = readable(line({"type": "message", "role": "user", "content": "the\nprompt"}))
    assert echo == "prompt (10 chars): the prompt"
    assert readable(line({"type": "message", "role": "assistant", "content": "Hi"})) == "Hi"
    use = {"type": "tool_use", "tool_name": "run_shell_command", "parameters": {"command": "ls"}}
    assert readable(line(use)) == '→ run_shell_command: {"command":"ls"}'
    assert readable(line({"type": "tool_result", "status": "error", "error": "x"})) == "✗ x"
    stats = {"input_tokens": 1800, "output_tokens": 220, "cached": 300}
    assert readable(line({"type": "result", "status": "success", "stats": stats})) == (
        "success: 1800 in (300 cached), 220 out"
    )


def test_anything_else_prints_as_it_is() -> None:
    for text in ["plain output", "{not json", '{"type": "unknown.kind"}', "[1, 2]", '{"a": 1}']:
        assert readable(text) is None
    # A known type with an unexpected shape is not an error: it prints raw.
    assert readable('{"type": "assistant", "message": "text"}') is None


def test_long_tool_output_is_cut_to_one_screen_line() -> None:
    event = {"type": "tool_result", "status": "success", "output": "x" * 5000}
    shown = readable(line(event))
    assert shown is not None
    assert len(shown) <= SHOWN_CHARS + 2
    assert shown.endswith("…")


def test_logs_render_events_unless_raw() -> None:
    paint = painter(False)
    said = line({"type": "item.completed", "item": {"type": "agent_message", "text": "A\nB"}})
    record = {"stage": "implement", "attempt": 1, "stream": "stdout", "text": said}
    assert record_line(record, paint) == "[implement#1 stdout] A\n[implement#1 stdout] B"
    assert record_line(record, paint, events=False) == f"[implement#1 stdout] {said}"
    # stderr and system lines are never reinterpreted.
    assert record_line({**record, "stream": "stderr"}, paint).endswith(said)


def test_claude_tokens_are_shown_as_sloop_counts_them() -> None:
    """``logs`` and ``show`` agree: ``in`` is the uncached input plus cache writes and
    reads (Claude's own ``input_tokens`` is only the first), ``cached`` the reads."""
    usage = {
        "input_tokens": 3600,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 900,
        "output_tokens": 700,
    }
    event = line({"type": "result", "subtype": "success", "usage": usage})
    stored = Usage()
    assert parse(event, stored)
    assert readable(event) == (
        f"done (success): {stored.input_tokens} in ({stored.cached_tokens} cached), 700 out"
    )
    assert stored.input_tokens == 4800


def test_gemini_prompt_echo_is_one_short_labelled_line() -> None:
    """Gemini echoes a 200 KB ticket as one event; ``logs`` shows its size and its start."""
    prompt = "Implement the ticket.\n\n" + "word " * 40_000
    shown = readable(line({"type": "message", "role": "user", "content": prompt}))
    assert shown is not None
    assert shown.startswith(f"prompt ({len(prompt)} chars): Implement the ticket. word")
    assert len(shown) < 200
    assert "\n" not in shown


def test_claude_system_events_other_than_init_are_named_with_what_they_say() -> None:
    event = {
        "type": "system",
        "subtype": "vcs_state_changed",
        "kind": "commit",
        "branch": "sloop/t/1",
        "session_id": "s",
        "uuid": "u",
    }
    assert readable(line(event)) == 'vcs_state_changed: {"kind":"commit","branch":"sloop/t/1"}'
    assert readable(line({"type": "system", "subtype": "compact_boundary"})) == "compact_boundary"
    assert readable(line({"type": "system"})) is None  # no subtype: shown as it is
