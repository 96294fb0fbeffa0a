"""The CLIs' structured error events are read, not only their wording (issue 14).

Each JSON stream reports a failure as an event; its message is classified
unescaped and on one line, and where no wording matches, the class named by the
event's own fields (Claude's ``api_error_type``/``api_error_status``, Gemini's
error class) decides.  Retry chatter and agents' own text quoting an error are
no failure.
"""

from __future__ import annotations

import json

import pytest

from sloopd.vendor import classify
from sloopd.vendor.structured import error_statement, session_error
from tests.support.vendor_outputs import (
    CLAUDE_TIMED_OUT,
    CLAUDE_USAGE_LIMITS,
    GEMINI_INIT,
    GEMINI_NO_FINISH,
    GEMINI_NO_FINISH_ERROR,
    GEMINI_SUCCESS,
    LOOP_WARNING,
    PREPAID,
    PREPAID_RESULT,
    PREPAID_STDERR,
    claude_error_result,
)

NOW_MS = 1_796_131_200_000


def claude_result(**fields: object) -> str:
    event = {"type": "result", "subtype": "success", "is_error": True, "session_id": "s"}
    return json.dumps({**event, **fields})


def test_claude_error_type_decides_when_no_wording_matches() -> None:
    line = claude_result(api_error_status=429, api_error_type="rate_limit_error", result="Zut!")
    diagnosis = classify(["working", line], NOW_MS)
    assert diagnosis.classification == "rate_limited"
    assert diagnosis.vendor == "claude"
    assert diagnosis.evidence == "Zut!"


def test_claude_status_decides_when_the_type_is_unknown() -> None:
    line = claude_result(api_error_status=529, api_error_type="brand_new_error", result="hmm")
    assert classify([line], NOW_MS).classification == "overloaded"


def test_a_matched_wording_beats_the_fields() -> None:
    text = "API Error: Credit balance too low"
    line = claude_result(api_error_status=400, api_error_type="invalid_request_error", result=text)
    assert classify([line], NOW_MS).classification == "usage_limit"


def test_claude_retry_chatter_is_no_failure() -> None:
    retry = {"type": "system", "subtype": "api_retry", "error_status": 529, "error": "overloaded"}
    assert error_statement(json.dumps(retry)) is None
    assert classify([json.dumps(retry)], NOW_MS).classification == "unknown"


def test_a_successful_result_is_no_failure() -> None:
    line = json.dumps({"type": "result", "is_error": False, "api_error_status": 429, "result": ""})
    assert error_statement(line) is None


def test_an_assistant_quoting_an_error_event_is_no_failure_statement() -> None:
    quoted = claude_result(api_error_status=429, api_error_type="rate_limit_error", result="x")
    assistant = {"type": "assistant", "message": {"content": [{"type": "text", "text": quoted}]}}
    assert error_statement(json.dumps(assistant)) is None
    said = "API Error: Request rejected (429) · rate limit exceeded"
    text = {"type": "assistant", "message": {"content": [{"type": "text", "text": said}]}}
    assert classify([json.dumps(text)], NOW_MS).classification == "unknown"
    assert classify([said], NOW_MS).classification == "rate_limited"  # printed, it counts


def test_a_gemini_message_is_read_on_one_line_with_its_retry_hint() -> None:
    message = (
        "[API Error: You exceeded your current quota.\n"
        "* Quota exceeded for metric: generate_content_free_tier_requests, limit: 2\n"
        "Please retry in 20s.]\nPlease wait and try again later."
    )
    event = {"type": "result", "status": "error", "error": {"type": "unknown", "message": message}}
    diagnosis = classify([json.dumps(event)], NOW_MS)
    assert diagnosis.classification == "rate_limited"
    assert diagnosis.evidence is not None
    assert "Quota exceeded for metric" in diagnosis.evidence
    assert "Please retry in 20s." in diagnosis.evidence
    assert diagnosis.reset_at_ms is not None
    assert 19_000 <= diagnosis.reset_at_ms - NOW_MS <= 21_000


def test_gemini_error_class_decides_when_no_wording_matches() -> None:
    event = {"error": {"type": "FatalAuthenticationError", "message": "Nope.", "code": 41}}
    diagnosis = classify([json.dumps(event)], NOW_MS)
    assert diagnosis.classification == "auth_failed"
    assert diagnosis.vendor == "gemini"


def test_codex_turn_failed_message_is_classified_unescaped() -> None:
    # JSON escapes the apostrophe-like quote and the newline; the message is read as printed.
    message = "You\u2019ve hit your usage limit.\nTry again at 3:05 PM."
    event = {"type": "turn.failed", "error": {"message": message}}
    line = json.dumps(event, ensure_ascii=True)
    assert "\\u2019" in line
    diagnosis = classify([line], NOW_MS)
    assert diagnosis.classification == "usage_limit", diagnosis
    assert diagnosis.evidence is not None
    assert diagnosis.evidence.startswith("You\u2019ve hit your usage limit.")


def test_hostile_events_never_raise() -> None:
    deep = '{"error":' * 100_000 + "1" + "}" * 100_000
    lines = [deep, '{"type":"error","message":["not","text"]}', "{not json error", "[1]"]
    for line in lines:
        error_statement(line)
    assert classify(lines, NOW_MS).classification == "unknown"


CODEX_NO_KEY = [
    '{"type":"thread.started","thread_id":"01a234a8-c59d-78f0-bb55-54430666008f"}',
    '{"type":"turn.started"}',
    '{"type":"error","message":"Missing environment variable: `OPENAI_API_KEY`."}',
    '{"type":"turn.failed","error":{"message":"Missing environment variable: `OPENAI_API_KEY`."}}',
]


def test_codex_without_its_key_is_an_auth_failure() -> None:
    # Codex 0.171.0's exact stream when its provider's env_key is unset (issue 24, item 7).
    diagnosis = classify(CODEX_NO_KEY, NOW_MS)
    assert diagnosis.classification == "auth_failed"
    assert diagnosis.vendor == "codex"
    assert diagnosis.evidence == "Missing environment variable: `OPENAI_API_KEY`."


UNRECOGNISED = "The frobnicator declined: 42"
# One error event per CLI whose message no pattern knows and whose fields name no class.
UNKNOWN_EVENTS = {
    "claude": claude_result(result=UNRECOGNISED),
    "codex": json.dumps({"type": "turn.failed", "error": {"message": UNRECOGNISED}}),
    "gemini": json.dumps(
        {"type": "result", "status": "error", "error": {"type": "Error", "message": UNRECOGNISED}}
    ),
}


def test_an_unknown_failure_keeps_the_words_of_its_error_event() -> None:
    """``unknown`` is not mute: the last error event's message is its evidence."""
    for vendor, line in UNKNOWN_EVENTS.items():
        diagnosis = classify(["working", line, "bye"], NOW_MS)
        assert diagnosis.classification == "unknown", vendor
        assert diagnosis.evidence == UNRECOGNISED, vendor
        assert diagnosis.vendor == vendor
        assert diagnosis.reset_at_ms is None


def test_without_an_error_event_unknown_has_no_evidence() -> None:
    assert classify(["it broke", '{"type":"turn.started"}'], NOW_MS).evidence is None


SESSIONS = [
    # (stream, output lines, what session_error says)
    ("gemini", GEMINI_NO_FINISH, 'a result of status "error"'),
    ("gemini", [*GEMINI_NO_FINISH, "Ripgrep is not available.", ""], 'a result of status "error"'),
    ("gemini", [GEMINI_INIT, GEMINI_NO_FINISH_ERROR], "an error event"),  # no result after it
    ("gemini", [GEMINI_INIT, GEMINI_NO_FINISH_ERROR, GEMINI_SUCCESS], None),
    ("gemini", [GEMINI_INIT, LOOP_WARNING], None),
    ("gemini", [GEMINI_INIT, '{"type":"tool_use","tool_name":"run_shell_command"}'], None),
    ("gemini", [GEMINI_INIT, GEMINI_SUCCESS], None),
    ("gemini", ["no events at all"], None),
    ("gemini", [], None),
    # Claude Code and Codex exit non-zero when their session failed: their exit status says.
    ("claude", GEMINI_NO_FINISH, None),
    ("codex", GEMINI_NO_FINISH, None),
    ("none", GEMINI_NO_FINISH, None),
]


@pytest.mark.parametrize(("stream", "lines", "said"), SESSIONS)
def test_a_stream_says_when_its_session_failed(
    stream: str, lines: list[str], said: str | None
) -> None:
    assert session_error(stream, lines) == said


def test_a_stream_without_a_finish_reason_is_an_overload_in_gemini_words() -> None:
    diagnosis = classify(GEMINI_NO_FINISH, NOW_MS)
    assert diagnosis.classification == "overloaded"
    assert diagnosis.vendor == "gemini"
    assert diagnosis.evidence == "Model stream ended without a finish reason."


@pytest.mark.parametrize(
    "lines",
    [[PREPAID_RESULT, *PREPAID_STDERR], [*PREPAID_STDERR, PREPAID_RESULT]],
    ids=["stack-after-the-event", "stack-before-the-event"],
)
def test_a_spent_prepaid_balance_is_a_usage_limit_in_the_vendors_words(lines: list[str]) -> None:
    diagnosis = classify(lines, NOW_MS)
    assert diagnosis.classification == "usage_limit", diagnosis
    assert diagnosis.vendor == "gemini"
    # The structured event's message, not a line of the stack dump ("status: 429").
    assert diagnosis.evidence == " ".join(PREPAID.split())
    assert diagnosis.reset_at_ms is None


def test_lines_after_an_unrecognised_error_event_still_count() -> None:
    """The event's words win only when a pattern knows them."""
    event = json.dumps(
        {"type": "result", "status": "error", "error": {"type": "x", "message": "Zut."}}
    )
    diagnosis = classify([event, "Error: connect ECONNREFUSED 127.0.0.1:443"], NOW_MS)
    assert diagnosis.classification == "network"


@pytest.mark.parametrize(
    ("text", "classification"),
    [*((text, "usage_limit") for text in CLAUDE_USAGE_LIMITS), (CLAUDE_TIMED_OUT, "network")],
)
def test_claudes_seat_limits_and_its_timeout_are_read_from_its_result_event(
    text: str, classification: str
) -> None:
    """Issue 34, item 10: these were ``unknown`` (0.8.0)."""
    diagnosis = classify(["working", claude_error_result(text)], NOW_MS)
    assert (diagnosis.classification, diagnosis.vendor) == (classification, "claude")
    assert diagnosis.evidence == text
