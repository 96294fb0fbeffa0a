"""What the agent CLIs print when they fail, as recorded from the pinned versions (issue 34).

Shared by the classifier's unit tests and the script agents of the integration tests,
which print these lines as the real CLIs do (stdout and stderr apart, with the CLI's
exit status).  Recorded from Gemini CLI 0.61.0 against tests/support/standins/gemini.py
(a stream that ends without a finish reason; a 429 whose message says the prepaid
balance is spent) and from Claude Code 2.1.332's bundle (tests/unit/vendor_strings).
"""

from __future__ import annotations

import json
from pathlib import Path

# Gemini CLI 0.61.0's stream when the API's stream ends without a finish reason (issue 34,
# item 7): an error event, a result of status "error", and exit 0.
GEMINI_INIT = '{"type":"init","session_id":"6539e487","model":"gemini-2.5-pro"}'
GEMINI_NO_FINISH_ERROR = (
    '{"type":"error","timestamp":"2026-12-06T07:56:43.505Z","severity":"error",'
    '"message":"Model stream ended without a finish reason."}'
)
GEMINI_ERROR_RESULT = (
    '{"type":"result","timestamp":"2026-12-06T07:56:43.505Z","status":"error","stats":'
    '{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,'
    '"duration_ms":547,"tool_calls":0}}'
)
GEMINI_SUCCESS = '{"type":"result","status":"success","stats":{"total_tokens":10}}'
GEMINI_NO_FINISH = [
    GEMINI_INIT,
    '{"type":"message","role":"user","content":"Create hello.txt and commit it."}',
    '{"type":"message","role":"assistant","content":"Working on it","delta":true}',
    GEMINI_NO_FINISH_ERROR,
    GEMINI_ERROR_RESULT,
]
LOOP_WARNING = '{"type":"error","severity":"warning","message":"Loop detected, stopping execution"}'

PREPAID = (
    "[API Error: Your prepayment credits are depleted. Please go to AI Studio at "
    "https://ai.studio/projects to manage your project and billing.]\nPlease wait and try "
    "again later. To increase your limits, request a quota increase through AI Studio, or "
    "switch to another /auth method"
)
PREPAID_RESULT = json.dumps(
    {"type": "result", "status": "error", "error": {"type": "unknown", "message": PREPAID}}
)
# What Gemini CLI 0.61.0 prints on stderr for the same 429: its report, then a stack dump.
PREPAID_STDERR = [
    "Attempt 1 failed: Your prepayment credits are depleted. Please go to AI Studio at "
    "https://ai.studio/projects to manage your project and billing.. Max attempts reached",
    "Error when talking to Gemini API Full report available at: /tmp/gemini-client-error.json "
    "RetryableQuotaError: Your prepayment credits are depleted. Please go to AI Studio at "
    "https://ai.studio/projects to manage your project and billing.",
    *[f"    at frame{i} (file:///gemini/bundle/chunk.js:{i}:1)" for i in range(10)],
    "  cause: {",
    "    code: 429,",
    "    message: 'Your prepayment credits are depleted.',",
    "    details: []",
    "  },",
    "  retryDelayMs: undefined,",
    "  status: 429",
    "}",
]


# Claude Code 2.1.332's notices for a Team or Enterprise seat's usage credits, and its
# ETIMEDOUT wording (printed as the result event's text, exit 1).
CLAUDE_USAGE_LIMITS = (
    "Your org is out of usage \u00b7 add funds to continue",
    "Your org is out of usage \u00b7 contact your admin",
    "Your usage allocation has been disabled by your admin",
    "Your group's usage limit is set to $0",
)
CLAUDE_TIMED_OUT = "Request timed out. Check your internet connection and proxy settings"


# Claude Code 2.1.332's final event of a session that failed on an API error, recorded.
_CLAUDE_RECORDED = (
    Path(__file__).parents[1] / "unit" / "streams" / "claude-connection-refused.jsonl"
)


def claude_error_result(text: str) -> str:
    """Claude Code's final stream-json event of a failed session saying ``text`` (its
    recorded shape, the API's fields cleared: the wording alone must classify it)."""
    event = json.loads(_CLAUDE_RECORDED.read_text(encoding="utf-8").splitlines()[-1])
    assert event["type"] == "result"
    assert event["is_error"] is True
    event.update(result=text, api_error=None, api_error_status=None)
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))
