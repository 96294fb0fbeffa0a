"""``sloopd.vendor``: what a failed agent's output says, and when the vendor lets us back in.

The samples are the wording the agent CLIs really print (Claude Code, Codex
CLI, Gemini CLI, aider) and the generic HTTP/socket errors underneath them.
Every row of the default table is the deciding pattern for at least one
sample, so a row nobody can justify with a real message gets noticed, and the
negative samples pin down the output that must *not* close the gate: retry
chatter, warnings, and the agent's own work that merely mentions limits.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sloopd.vendor import (
    CLASSES,
    DEFAULT_PATTERNS,
    VENDORS,
    Diagnosis,
    Pattern,
    VendorConfigError,
    classify,
    parse_reset,
    patterns_from_config,
    prefilter,
    reset,
)
from sloopd.vendor.classify import EVIDENCE_MAX

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)  # a Thursday, noon UTC
NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


NOW_MS = ms(NOW)
RESET_EPOCH = 1768500000  # 2026-01-15T18:00:00Z
assert ms(datetime(2026, 1, 15, 18, tzinfo=UTC)) == RESET_EPOCH * 1000


def ms_of(**kwargs: float) -> int:
    return round(timedelta(**kwargs).total_seconds() * 1000)


# A clock time printed to the minute ("resets 8:01am") lasts to the end of it (0.6.0).
TO_END_OF_MINUTE = 60_000


def at(hour: int, minute: int = 0, *, day: int = 15, month: int = 1, zone: tzinfo = UTC) -> int:
    return ms(datetime(2026, month, day, hour, minute, tzinfo=zone))


# (line, classification, vendor): one or more per row of DEFAULT_PATTERNS.
SAMPLES: list[tuple[str, str, str | None]] = [
    # ------------------- issue 34: observed against the stand-ins, or in the bundles
    (
        "sloop: not starting Gemini CLI: the checkout holds .env, which Gemini CLI obeys in a "
        "trusted folder (hooks, MCP servers, tool discovery commands, environment variables) "
        "and cannot ignore while its tools are on; see docs/security.md",
        "refused",
        None,
    ),
    (
        "Error when talking to Gemini API Full report available at: /tmp/gemini-client-error.json"
        " RetryableQuotaError: Your prepayment credits are depleted. Please go to AI Studio at "
        "https://ai.studio/projects to manage your project and billing.",
        "usage_limit",
        "gemini",
    ),
    (
        "Please wait and try again later. To increase your limits, request a quota increase "
        "through AI Studio, or switch to another /auth method",
        "usage_limit",
        "gemini",
    ),
    ("Model stream ended without a finish reason.", "overloaded", "gemini"),
    ("Your org is out of usage \u00b7 add funds to continue", "usage_limit", "claude"),
    ("Your usage allocation has been disabled by your admin", "usage_limit", "claude"),
    ("Your group's usage limit is set to $0", "usage_limit", "claude"),
    ("Request timed out. Check your internet connection and proxy settings", "network", "claude"),
    # ------------------- harvested in 0.8.0 from the pinned CLIs' bundles (vendor_strings)
    (
        "[API Error: Model capacity exceeded for gemini-2.5-pro. (Status: RESOURCE_EXHAUSTED)]",
        "overloaded",
        "gemini",
    ),
    (
        "You've hit your org's monthly spend limit · visit https://claude.ai/settings/usage",
        "usage_limit",
        "claude",
    ),
    (
        "Your organization's usage credit cap is reached for this period. Contact your admin.",
        "usage_limit",
        "claude",
    ),
    ("API Error: Usage credits ran out before the response was finished.", "usage_limit", "claude"),
    (
        "You have reached your specified API usage limits. You will regain access on 2027-01-01.",
        "usage_limit",
        "claude",
    ),
    (
        "You hit your spend cap set in your workspace. Increase your spend cap to continue.",
        "usage_limit",
        "codex",
    ),
    ("Your workspace is out of credits. Add credits to continue.", "usage_limit", "codex"),
    (
        "Your included usage is exhausted. Choose an option below to continue.",
        "usage_limit",
        "codex",
    ),
    ("To continue using this model now, purchase more AI Credits.", "usage_limit", "gemini"),
    ("API Error: The API is temporarily unavailable", "overloaded", "claude"),
    ("server overloaded", "overloaded", "codex"),
    ("Policy-restricted capacity is unavailable. Please try again later.", "overloaded", "codex"),
    ("Stream timed out because of no activity for 300000 ms", "network", "claude"),
    (
        "@smithy/node-http-handler - the request socket timed out after 600000 ms of inactivity",
        "network",
        "claude",
    ),
    ("Reconnecting... waiting for network", "network", "codex"),
    ("Total timeout exceeded before any response was received", "network", "gemini"),
    ("Connect Timeout Error", "network", None),
    ("Request timed out", "network", None),
    ("Request timed out after 60000ms", "network", None),
    ("Error: capacity temporarily unavailable, try again later", "overloaded", None),
    # ------------------------------------- harvested in 0.6.0 (tests/unit/vendor_strings)
    ("You've hit your org's monthly usage limit · resets Jan 1", "usage_limit", "claude"),
    ("You're out of usage credits", "usage_limit", "claude"),
    (
        "API Error: Request rejected (429) · This request would exceed your account's rate limit.",
        "rate_limited",
        "claude",
    ),
    ("Server is temporarily limiting requests (not your usage limit)", "rate_limited", "claude"),
    ("Repeated 529 Overloaded errors", "overloaded", "claude"),
    (
        "Opus is experiencing high load, please use /model to switch to Sonnet",
        "overloaded",
        "claude",
    ),
    ("Selected model is at capacity. Please try a different model.", "overloaded", "codex"),
    ("Invalid auth token · Fix external auth token", "auth_failed", "claude"),
    (
        "Your ANTHROPIC_API_KEY belongs to a disabled organization · Unset it",
        "auth_failed",
        "claude",
    ),
    (
        "Your organization has disabled API key authentication · Sign in again",
        "auth_failed",
        "claude",
    ),
    (
        "When using Gemini API, you must specify the GEMINI_API_KEY environment variable.",
        "auth_failed",
        "gemini",
    ),
    ("Invalid auth method selected.", "auth_failed", "gemini"),
    (
        "Request timed out. If the API is slow to answer, set API_TIMEOUT_MS above 2000.",
        "network",
        "claude",
    ),
    ("API Error: No response from API", "network", "claude"),
    # ---------------------------------------------------------------- Claude Code
    (f"Claude AI usage limit reached|{RESET_EPOCH}", "usage_limit", "claude"),
    ("5-hour limit reached ∙ resets 3pm", "usage_limit", "claude"),
    ("Weekly limit reached ∙ resets Jan 20, 5pm", "usage_limit", "claude"),
    (
        "Claude usage limit reached. Your limit will reset at 5pm (America/New_York).",
        "usage_limit",
        "claude",
    ),
    ("Your limit will reset at 5pm (America/New_York).", "usage_limit", "claude"),
    ("You've hit your limit · resets 5pm (Europe/Berlin)", "usage_limit", "claude"),
    (
        "You\u2019ve hit your session limit · resets 3pm (Europe/Amsterdam) · progress saved",
        "usage_limit",
        "claude",
    ),
    (
        '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected",'
        f'"resetsAt":{RESET_EPOCH},"rateLimitType":"five_hour","overageStatus":"rejected"}}}}',
        "usage_limit",
        "claude",
    ),
    ("Credit balance is too low", "usage_limit", "claude"),
    (
        'API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This '
        "request would exceed the rate limit for your organization (8f2c) of 30,000 input "
        'tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}',
        "rate_limited",
        "claude",
    ),
    (
        'API Error: 529 {"type":"error","error":{"type":"overloaded_error",'
        '"message":"Overloaded"}}',
        "overloaded",
        "claude",
    ),
    (
        'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server '
        'error"}}',
        "overloaded",
        "claude",
    ),
    ("Invalid API key · Please run /login", "auth_failed", "claude"),
    (
        'API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"OAuth '
        'token has expired. Please obtain a new token or refresh your existing token."}}',
        "auth_failed",
        "claude",
    ),
    ("OAuth token has expired", "auth_failed", "claude"),
    ("This organization has been disabled.", "auth_failed", "claude"),
    (
        'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":'
        '"prompt is too long: 210000 tokens > 200000 maximum"}}',
        "context_length",
        "claude",
    ),
    (
        'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":'
        '"input length and `max_tokens` exceed context limit: 188000 + 32000 > 200000"}}',
        "context_length",
        "claude",
    ),
    ("API Error: Connection error.", "network", "claude"),
    ("API Error (Connection error.) · Retrying in 1 seconds… (attempt 1/10)", "network", "claude"),
    ("API Error: Request timed out.", "network", "claude"),
    ("Unable to connect to API due to poor internet connection", "network", "claude"),
    # ---------------------------------------------------------------- Codex CLI
    (
        "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) "
        "or try again in 2 days 3 hours 4 minutes.",
        "usage_limit",
        "codex",
    ),
    (
        "You've hit your usage limit. Visit https://chatgpt.com/codex/settings/usage to "
        "purchase more credits or try again at Jan 29th, 2026 10:15 PM.",
        "usage_limit",
        "codex",
    ),
    (
        '{"type":"error","error":{"type":"usage_limit_reached","plan_type":"plus"}}',
        "usage_limit",
        "codex",
    ),
    ("Quota exceeded. Check your plan and billing details.", "usage_limit", "codex"),
    (
        "stream error: exceeded retry limit, last status: 429 Too Many Requests",
        "rate_limited",
        "codex",
    ),
    (
        "Rate limit reached for gpt-5 in organization org-abc on tokens per min (TPM): Limit "
        "30000, Used 25000, Requested 8000. Please try again in 20s.",
        "rate_limited",
        "codex",
    ),
    (
        "We're currently experiencing high demand, which may cause temporary errors.",
        "overloaded",
        "codex",
    ),
    (
        "stream error: exceeded retry limit, last status: 503 Service Unavailable",
        "overloaded",
        "codex",
    ),
    (
        'unexpected status 401 Unauthorized: {"error":{"message":"Missing bearer or basic '
        'authentication in header"}}',
        "auth_failed",
        "codex",
    ),
    (
        "Your access token could not be refreshed because your refresh token has expired. "
        "Please log out and sign in again.",
        "auth_failed",
        "codex",
    ),
    (
        "Your access token could not be refreshed. Please log out and sign in again.",
        "auth_failed",
        "codex",
    ),
    # Codex 0.171.0 with its provider's env_key unset (issue 24).
    ("Missing environment variable: `OPENAI_API_KEY`.", "auth_failed", "codex"),
    (
        'unexpected status 400 Bad Request: {"error":{"message":"Your input exceeds the context '
        'window of this model.","code":"context_length_exceeded"}}',
        "context_length",
        "codex",
    ),
    (
        "Your input exceeds the context window of this model. Please adjust your input and "
        "try again.",
        "context_length",
        "codex",
    ),
    (
        "Codex ran out of room in the model's context window. Start a new conversation or clear "
        "earlier history before retrying.",
        "context_length",
        "codex",
    ),
    (
        "stream disconnected before completion: error sending request for url "
        "(https://chatgpt.com/backend-api/codex/responses)",
        "network",
        "codex",
    ),
    (
        "Error while reading the server response: error decoding response body, request id: 9f1",
        "network",
        "codex",
    ),
    (
        "Access blocked by Cloudflare. This usually happens when connecting from a restricted "
        "region (status 403 Forbidden)",
        "network",
        "codex",
    ),
    # ---------------------------------------------------------------- Gemini CLI
    ("✕ [API Error: You have exhausted your daily quota on this model.]", "usage_limit", "gemini"),
    (
        "Subagent 'codebase_investigator' failed: TerminalQuotaError: You have exhausted your "
        "daily quota on this model.",
        "usage_limit",
        "gemini",
    ),
    (
        "[API Error: You have exhausted your capacity on this model. Your quota will reset "
        "after 2h52m39s.]",
        "usage_limit",
        "gemini",
    ),
    ("You have reached your daily gemini-2.5-pro quota limit.", "usage_limit", "gemini"),
    (
        "Quota exceeded for quota metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro "
        "Requests per day per user per tier' of service 'cloudcode-pa.googleapis.com' for "
        "consumer 'project_number:681255809395'. RESOURCE_EXHAUSTED",
        "usage_limit",
        "gemini",
    ),
    (
        "Quota exceeded for quota metric 'Generate Content API requests per minute' and limit "
        "'GenerateContent request limit per minute for a region' of service "
        "'generativelanguage.googleapis.com'",
        "rate_limited",
        "gemini",
    ),
    (
        "RetryableQuotaError: Quota exceeded for metric: "
        "generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10",
        "rate_limited",
        "gemini",
    ),
    (
        '[API Error: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check '
        'quota).","status":"RESOURCE_EXHAUSTED"}}]',
        "rate_limited",
        "gemini",
    ),
    (
        "Attempt 1 failed with status 429. Retrying with backoff... GaxiosError: [{",
        "rate_limited",
        "gemini",
    ),
    (
        '[API Error: {"error":{"code":503,"message":"The model is overloaded. Please try again '
        'later.","status":"UNAVAILABLE"}}]',
        "overloaded",
        "gemini",
    ),
    (
        '    "message": "No capacity available for model gemini-3-flash-preview on the server",',
        "overloaded",
        "gemini",
    ),
    (
        "google.genai.errors.ServerError: 503 UNAVAILABLE. {'error': {'code': 503, 'message': "
        "'The service is currently unavailable.', 'status': 'UNAVAILABLE'}}",
        "overloaded",
        "gemini",
    ),
    ("[API Error: API key not valid. Please pass a valid API key.]", "auth_failed", "gemini"),
    (
        "[API Error: Request had invalid authentication credentials. Expected OAuth 2 access "
        "token, login cookie or other valid authentication credential.]",
        "auth_failed",
        "gemini",
    ),
    (
        "[API Error: The input token count (1234567) exceeds the maximum number of tokens "
        "allowed (1048576).]",
        "context_length",
        "gemini",
    ),
    # ---------------------------------------------------------- aider, through litellm
    (
        'litellm.RateLimitError: AnthropicException - {"type":"error","error":{"type":'
        '"rate_limit_error","message":"Number of request tokens has exceeded your per-minute '
        'rate limit"}}',
        "rate_limited",
        "aider",
    ),
    (
        "The API provider has rate limited you. Try again later or check your quotas.",
        "rate_limited",
        "aider",
    ),
    (
        "litellm.BudgetExceededError: Budget has been exceeded! Current cost: 10.2",
        "usage_limit",
        "aider",
    ),
    ("litellm.InternalServerError: AnthropicException - Overloaded.", "overloaded", "aider"),
    ("The API provider's servers are down or overloaded.", "overloaded", "aider"),
    ("litellm.AuthenticationError: AnthropicException - invalid x-api-key", "auth_failed", "aider"),
    (
        "The API provider is not able to authenticate you. Check your API key.",
        "auth_failed",
        "aider",
    ),
    ("litellm.APIConnectionError: AnthropicException - Connection error.", "network", "aider"),
    (
        "The API provider timed out without returning a response. They may be down or overloaded.",
        "network",
        "aider",
    ),
    (
        "litellm.ContextWindowExceededError: litellm.BadRequestError: prompt is too long",
        "context_length",
        "aider",
    ),
    (
        "Your estimated chat context of 250,123 tokens exceeds the 200,000 token limit for "
        "anthropic/claude-sonnet-4!",
        "context_length",
        "aider",
    ),
    ("Model anthropic/claude-sonnet-4 has hit a token limit!", "context_length", "aider"),
    # ---------------------------------------------------------------- generic
    ("Error: request exceeds the model's context window (131072 tokens)", "context_length", None),
    (
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130512 tokens.",
        "context_length",
        None,
    ),
    ("BadRequestError: context length exceeded (max 32768 tokens)", "context_length", None),
    ("Error: quota of 60 requests per minute exceeded", "rate_limited", None),
    (
        "429 You exceeded your current quota, please check your plan and billing details.",
        "usage_limit",
        None,
    ),
    ("Error: usage limit exceeded for this account", "usage_limit", None),
    ("Error: You have reached your spend limit for this month.", "usage_limit", None),
    ("Error 402: You are out of credits.", "usage_limit", None),
    ("The request failed because the project has exhausted its quota", "usage_limit", None),
    ("HTTP/1.1 429 Too Many Requests", "rate_limited", None),
    (
        "botocore.errorfactory.ThrottlingException: An error occurred (ThrottlingException) when "
        "calling the InvokeModel operation",
        "rate_limited",
        None,
    ),
    ("AxiosError: Request failed with status code 429", "rate_limited", None),
    ("Error: rate limit exceeded, please slow down", "rate_limited", None),
    ("You have exceeded the rate limit for this endpoint", "rate_limited", None),
    ("Error: rate-limited by upstream, giving up", "rate_limited", None),
    ("upstream error: the server is currently overloaded, try again later", "overloaded", None),
    ("Error: Overloaded", "overloaded", None),
    ("{'type': 'error', 'message': 'Overloaded'}", "overloaded", None),
    ("Overloaded", "overloaded", None),
    ("<html><head><title>503 Service Unavailable</title></head>", "overloaded", None),
    ("502 Bad Gateway", "overloaded", None),
    ("504 Gateway Time-out", "overloaded", None),
    (
        "Incorrect API key provided: sk-proj-****abcd. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "auth_failed",
        None,
    ),
    (
        "openai.PermissionDeniedError: Error code: 403 - {'error': {'message': 'Project does not "
        "have access to model gpt-5'}}",
        "auth_failed",
        None,
    ),
    ("HTTP/1.1 401 Unauthorized", "auth_failed", None),
    ("403 Forbidden", "auth_failed", None),
    ("Error: HTTP 403: API key lacks permission for this model", "auth_failed", None),
    ("Authentication failed: check ANTHROPIC_API_KEY", "auth_failed", None),
    ("Error: API key is invalid or has been revoked", "auth_failed", None),
    ("Error: auth token expired, refresh required", "auth_failed", None),
    ("An error occurred: AWS credentials have expired", "auth_failed", None),
    ("Error: read ECONNRESET", "network", None),
    ("getaddrinfo ENOTFOUND api.anthropic.com", "network", None),
    ("TypeError: fetch failed (cause: UND_ERR_CONNECT_TIMEOUT)", "network", None),
    ("TypeError: fetch failed", "network", None),
    ("Error: socket hang up", "network", None),
    (
        "curl: (7) Failed to connect to api.openai.com port 443 after 2 ms: Connection refused",
        "network",
        None,
    ),
    ("requests.exceptions.ConnectionError: Connection reset by peer", "network", None),
    ("curl: (6) Could not resolve host: api.anthropic.com", "network", None),
    ("httpx.ConnectError: [Errno -3] Temporary failure in name resolution", "network", None),
    ("anthropic.APITimeoutError: Request timed out.", "network", None),
    ("httpx.ReadTimeout: The read operation timed out", "network", None),
]

# Output that must not be read as a vendor failure.
NOT_FAILURES = [
    "Retrying in 0.5 seconds...",
    "Retrying in 5 seconds… (attempt 2/10)",
    "Suggested retry after 57s.. Retrying after 65901ms...",
    '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1768500000}}',
    '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning",'
    '"overageStatus":"rejected","rateLimitType":"seven_day"}}',
    "Approaching 5-hour limit · resets 3pm",
    "Approaching usage limit",
    "/upgrade to increase your usage limit.",
    "Added an overloaded constructor for Vec3",
    "error: overloaded 'operator<<' must be a binary operator",
    "The C++ API provides overloaded functions",
    "Implemented the token bucket rate limiter in worker.py",
    "the rate limit is 10 requests per second",
    "E       AssertionError: assert 'unknown' == 'rate_limited'",
    "tests/test_auth.py:401: AssertionError: token mismatch",
    '  File "app.py", line 429, in handler',
    "SyntaxError: invalid token",
    "FAILED tests/test_api.py::test_quota - AssertionError",
    "I'll try again in 5 minutes once the build finishes.",
    "",
    "   ",
]


def deciding_pattern(line: str) -> int:
    """The index of the default row that decides ``line`` (the first one matching)."""
    return next(i for i, p in enumerate(DEFAULT_PATTERNS) if p.regex.search(line))


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize(("line", "classification", "vendor"), SAMPLES)
def test_a_realistic_message_is_classified(
    line: str, classification: str, vendor: str | None
) -> None:
    diagnosis = classify(["Thinking…", line, ""], NOW_MS)
    assert (diagnosis.classification, diagnosis.vendor) == (classification, vendor)
    assert diagnosis.evidence == line.strip()


@pytest.mark.parametrize("line", NOT_FAILURES)
def test_chatter_warnings_and_the_agents_own_work_are_not_failures(line: str) -> None:
    assert classify([line], NOW_MS) == Diagnosis("unknown", None, None, None)


def test_every_row_of_the_table_is_justified_by_a_sample() -> None:
    decided = {deciding_pattern(line) for line, _, _ in SAMPLES}
    unused = [f"{i}: {p.regex.pattern}" for i, p in enumerate(DEFAULT_PATTERNS) if i not in decided]
    assert unused == []


def test_the_samples_cover_every_class_and_every_vendor() -> None:
    classes = {classification for _, classification, _ in SAMPLES}
    assert classes == set(CLASSES) - {"unknown"}
    for name in VENDORS:
        covered = {c for _, c, v in SAMPLES if v == name}
        assert len(covered) >= 5, (name, covered)
    assert len(SAMPLES) >= 25


def test_the_default_table_is_well_formed() -> None:
    for pattern in DEFAULT_PATTERNS:
        assert pattern.classification in CLASSES
        assert pattern.classification != "unknown"
        assert pattern.vendor is None or pattern.vendor in VENDORS
        assert pattern.regex.flags & re.IGNORECASE
        assert pattern.regex.search("") is None, pattern.regex.pattern


def test_a_pattern_refuses_an_unusable_classification() -> None:
    with pytest.raises(ValueError, match="unknown"):
        Pattern("unknown", re.compile("x"), None)
    with pytest.raises(ValueError, match="slow"):
        Pattern("slow", re.compile("x"), None)


# --------------------------------------------------------------------------- classify


OVERLOAD = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}'
USAGE = f"Claude AI usage limit reached|{RESET_EPOCH}"


def test_the_last_matching_line_wins() -> None:
    lines = [OVERLOAD, "Retrying in 1 seconds… (attempt 1/10)", USAGE, "Retrying in 2 seconds…"]
    assert classify(lines, NOW_MS).classification == "usage_limit"
    assert classify([USAGE, "ok", OVERLOAD, "done"], NOW_MS).classification == "overloaded"


def test_on_one_line_the_earlier_row_wins() -> None:
    # A 429 naming a quota is a plan limit, not throttling: usage rows precede the 429 rows.
    line = "429 Too Many Requests: You exceeded your current quota"
    assert classify([line], NOW_MS).classification == "usage_limit"
    both = (
        Pattern("network", re.compile("boom", re.I), None),
        Pattern("auth_failed", re.compile("boom", re.I), "claude"),
    )
    assert classify(["a boom"], NOW_MS, both).classification == "network"
    assert classify(["a boom"], NOW_MS, both[::-1]).classification == "auth_failed"


def test_no_match_is_unknown() -> None:
    diagnosis = classify(["all good", "exit 1"], NOW_MS)
    assert diagnosis == Diagnosis("unknown", None, None, None)
    assert classify([], NOW_MS).classification == "unknown"


def test_as_json_has_the_documented_keys() -> None:
    diagnosis = classify([USAGE], NOW_MS)
    assert diagnosis.as_json() == {
        "classification": "usage_limit",
        "evidence": USAGE,
        "vendor": "claude",
        "reset_at_ms": RESET_EPOCH * 1000,
    }
    assert classify([], NOW_MS).as_json() == {
        "classification": "unknown",
        "evidence": None,
        "vendor": None,
        "reset_at_ms": None,
    }


def test_colour_codes_and_carriage_returns_do_not_hide_an_error() -> None:
    painted = "\x1b[31m\x1b[1mAPI Error: 529\x1b[0m overloaded_error\r\n"
    diagnosis = classify([painted], NOW_MS)
    assert diagnosis.classification == "overloaded"
    assert diagnosis.evidence == "API Error: 529 overloaded_error"
    redraw = "⠋ Working…\r⠙ Working…\rClaude AI usage limit reached|1768500000"
    assert classify([redraw], NOW_MS).evidence == USAGE
    chunk = f"{OVERLOAD}\n{USAGE}\n"
    assert classify([chunk], NOW_MS).classification == "usage_limit"


def test_evidence_is_the_matched_line_trimmed_around_the_match() -> None:
    short = classify(["   Error: read ECONNRESET   "], NOW_MS)
    assert short.evidence == "Error: read ECONNRESET"
    long_line = (
        '{"type":"result","result":"' + "x" * 3000 + ' Error: read ECONNRESET "' + "y" * 3000
    )
    evidence = classify([long_line], NOW_MS).evidence
    assert evidence is not None
    assert len(evidence) == EVIDENCE_MAX
    assert "ECONNRESET" in evidence
    assert evidence.startswith("…")
    assert evidence.endswith("…")
    head = "Error: read ECONNRESET " + "z" * 2000
    assert classify([head], NOW_MS).evidence == head[: EVIDENCE_MAX - 1] + "…"


@pytest.mark.parametrize("pad", range(0, 12))
def test_evidence_is_cut_between_words(pad: int) -> None:
    """``rate_limited (…I Error: You exceeded …)`` read as a word that is not there:
    a window's edges fall between words, wherever the match sits in the line."""
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod "
    line = (
        "x" * pad
        + words * 8
        + "API Error: You exceeded your current quota, please check your plan."
        + " and more"
        + words * 8
    )
    evidence = classify([line], NOW_MS).evidence
    assert evidence is not None
    assert len(evidence) <= EVIDENCE_MAX
    assert "exceeded your current quota" in evidence
    inner = evidence.removeprefix("\u2026").removesuffix("\u2026")
    at = line.index(inner)
    assert evidence.startswith("\u2026") == (at > 0)
    assert at == 0 or line[at - 1] == " ", evidence
    after = at + len(inner)
    assert after == len(line) or line[after] == " ", evidence


def test_a_limit_carries_its_reset_time() -> None:
    diagnosis = classify(
        ["You've hit your usage limit. Try again in 2 days 3 hours 4 minutes."], NOW_MS
    )
    assert diagnosis.reset_at_ms == NOW_MS + ms_of(days=2, hours=3, minutes=4)
    assert classify(["5-hour limit reached ∙ resets 3pm"], NOW_MS, tz=BERLIN).reset_at_ms == at(
        15, zone=BERLIN
    )


def test_a_reset_time_on_the_lines_after_the_evidence_counts() -> None:
    lines = [
        "* Quota exceeded for metric: generate_content_free_tier_requests, limit: 5",
        "Please retry in 57.637196847s.",
        "Retrying in 0.5 seconds...",
    ]
    diagnosis = classify(lines, NOW_MS)
    # A quota whose retry is seconds away is a per-minute quota: throttling (0.6.0).
    assert diagnosis.classification == "rate_limited"
    assert diagnosis.evidence == lines[0]
    assert diagnosis.reset_at_ms == NOW_MS + 57_637
    # The CLI's own back-off is not the vendor's reset time.
    chatter = [
        "litellm.RateLimitError: AnthropicException - slow down",
        "Retrying in 0.5 seconds...",
    ]
    assert classify(chatter, NOW_MS).reset_at_ms is None


def test_only_limits_read_a_reset_time() -> None:
    line = "curl: (28) Connection timed out after 30 seconds"
    assert parse_reset(line, NOW_MS) == NOW_MS + 30_000
    assert classify([line], NOW_MS) == Diagnosis("network", line, None, None)


def test_the_prefilter_never_hides_a_match() -> None:
    """Needles derived from a regex occur in everything the regex matches."""
    for pattern in DEFAULT_PATTERNS:
        assert prefilter._needles(pattern.regex) is not None, pattern.regex.pattern
    for line, _, _ in SAMPLES:
        folded = prefilter._fold(line)
        for pattern in DEFAULT_PATTERNS:
            needles = prefilter._needles(pattern.regex)
            if pattern.regex.search(line) and needles is not None:
                assert any(n in folded for n in needles), (pattern.regex.pattern, line)


@pytest.mark.parametrize(
    ("source", "needles"),
    [
        ("colou?r", ("colo",)),
        (r"API Error:? \(?429\b", ("api error",)),
        (r"rate[ _-]?limit(?:ed)?|too many requests", ("limit", "too many requests")),
        (r"\bE(?:CONNRESET|TIMEDOUT)\b", None),
        (r"a{2,3}bcd\x41", None),
        (r"(?x) rate limit", None),
        (r"[\]|(]quota\.", ("quota.",)),
        (r"retry(?=after)", ("retry",)),
        ("überlastet", ("berlastet",)),
    ],
)
def test_needles_are_derived_conservatively(source: str, needles: tuple[str, ...] | None) -> None:
    assert prefilter._needles(re.compile(source, re.IGNORECASE)) == needles


def test_case_twins_of_ascii_letters_still_reach_the_regex() -> None:
    # re.IGNORECASE equates the Kelvin sign with "k" and the long s with "s".
    line = "Error: Too many reque\u017fts"
    assert re.search("too many requests", line, re.IGNORECASE)
    assert classify([line], NOW_MS).classification == "rate_limited"


def test_a_long_quiet_output_is_unknown() -> None:
    noise = [f"line {i}: compiled module_{i} in 0.{i % 10}s, 12 passed" for i in range(2000)]
    assert classify(noise, NOW_MS).classification == "unknown"


# --------------------------------------------------------------------------- config


def test_user_patterns_come_before_the_defaults() -> None:
    section = {
        "patterns": [
            {"classification": "network", "regex": "rate_limit_error", "vendor": "corp-proxy"},
            {"classification": "usage_limit", "regex": r"budget \w+ spent"},
        ],
        "cooldown": "15m",  # other [vendor] keys are the caller's
    }
    user = patterns_from_config(section)
    assert user == (
        Pattern("network", re.compile("rate_limit_error", re.I), "corp-proxy"),
        Pattern("usage_limit", re.compile(r"budget \w+ spent", re.I), None),
    )
    assert patterns_from_config(section["patterns"]) == user  # the array alone will do
    table = user + DEFAULT_PATTERNS
    line = 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error"}}'
    assert classify([line], NOW_MS, table) == Diagnosis("network", line, "corp-proxy", None)
    assert classify([line], NOW_MS).classification == "rate_limited"
    assert classify(["Budget Q3 SPENT"], NOW_MS, table).classification == "usage_limit"
    assert classify(["Budget Q3 SPENT"], NOW_MS, table).vendor is None


def test_an_absent_section_adds_nothing() -> None:
    assert patterns_from_config(None) == ()
    assert patterns_from_config({}) == ()
    assert patterns_from_config([]) == ()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("nope", "vendor: must be a table"),
        ({"patterns": {"regex": "x"}}, "vendor.patterns: must be an array of tables"),
        ({"patterns": ["x"]}, "vendor.patterns[0]: must be a table"),
        ({"patterns": [{"regex": "quota"}]}, "vendor.patterns[0].classification: required"),
        (
            {"patterns": [{"classification": "unknown", "regex": "quota"}]},
            "vendor.patterns[0].classification: 'unknown' is not one of rate_limited,",
        ),
        (
            {"patterns": [{"classification": "slow", "regex": "quota"}]},
            "vendor.patterns[0].classification: 'slow' is not one of",
        ),
        (
            {"patterns": [{"classification": 3, "regex": "quota"}]},
            "vendor.patterns[0].classification: 3 is not one of",
        ),
        ({"patterns": [{"classification": "network"}]}, "vendor.patterns[0].regex: required"),
        (
            {"patterns": [{"classification": "network", "regex": 5}]},
            "vendor.patterns[0].regex: must be a non-empty string",
        ),
        (
            {"patterns": [{"classification": "network", "regex": ""}]},
            "vendor.patterns[0].regex: must be a non-empty string",
        ),
        (
            {"patterns": [{"classification": "network", "regex": "(unclosed"}]},
            "vendor.patterns[0].regex: not a valid regular expression: missing ),",
        ),
        (
            {"patterns": [{"classification": "network", "regex": "x*"}]},
            "vendor.patterns[0].regex: matches the empty string",
        ),
        (
            {"patterns": [{"classification": "network", "regex": "x", "vendor": 7}]},
            "vendor.patterns[0].vendor: must be a non-empty string",
        ),
        (
            {"patterns": [{"classification": "network", "regex": "x", "colour": "red"}]},
            "vendor.patterns[0].colour: unknown key (known: classification, regex, vendor)",
        ),
        (
            {
                "patterns": [
                    {"classification": "network", "regex": "fine"},
                    {"classification": "network", "regex": "[a-"},
                ]
            },
            "vendor.patterns[1].regex: not a valid regular expression",
        ),
    ],
)
def test_config_errors_name_the_key_and_the_reason(section: Any, message: str) -> None:
    with pytest.raises(VendorConfigError) as caught:
        patterns_from_config(section)
    assert str(caught.value).startswith(message), str(caught.value)


# --------------------------------------------------------------------------- parse_reset


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # epoch seconds or milliseconds
        (f"Claude AI usage limit reached|{RESET_EPOCH}", RESET_EPOCH * 1000),
        (f"Claude AI usage limit reached|{RESET_EPOCH}123", RESET_EPOCH * 1000 + 123),
        (f"limit hit, reset at {RESET_EPOCH}", RESET_EPOCH * 1000),
        (f'{{"status":"rejected","resetsAt":{RESET_EPOCH}}}', RESET_EPOCH * 1000),
        (f"x-ratelimit-reset: {RESET_EPOCH}", RESET_EPOCH * 1000),
        # ISO timestamps
        ("Your limit will reset at 2026-01-15T18:30:00Z", at(18, 30)),
        ("quota resets 2026-01-16 09:00:00+01:00", at(8, day=16)),
        # clock times, next occurrence (UTC unless the line or tz says otherwise)
        ("5-hour limit reached ∙ resets 3pm", at(15)),
        ("Session limit reached ∙ resets 9:30pm", at(21, 30) + TO_END_OF_MINUTE),
        ("Claude usage limit reached. Your limit will reset at 5pm.", at(17)),
        ("resets 5 p.m.", at(17)),
        ("Rate limited until 17:30", at(17, 30) + TO_END_OF_MINUTE),
        ("Try again at 3:14 PM.", at(15, 14) + TO_END_OF_MINUTE),
        ("You've hit your limit · resets 12am", at(0, day=16)),
        ("resets 10:30am", at(10, 30, day=16) + TO_END_OF_MINUTE),  # 90 minutes ago: tomorrow
        ("resets 11:15am", at(11, 15) + TO_END_OF_MINUTE),  # 45 minutes ago: it has lifted already
        ("Your limit will reset at 5pm (America/New_York).", at(17, zone=NEW_YORK)),
        ("You've hit your limit · resets 5pm (Europe/Berlin)", at(17, zone=BERLIN)),
        ("resets 11am (America/New_York)", at(11, zone=NEW_YORK)),  # 16:00 UTC
        ("resets 3pm (UTC)", at(15)),
        ("resets 3pm (Mars/Olympus_Mons)", at(15)),
        ("resets 3pm (attempt 2/10)", at(15)),
        ("Weekly limit reached ∙ resets Jan 20, 5pm", at(17, day=20)),
        ("resets Jan 20 at 5pm", at(17, day=20)),
        ("resets Tue 5pm", at(17, day=20)),
        ("resets Thursday 1pm", at(13)),
        ("try again at Jan 29th, 2026 10:15 PM.", at(22, 15, day=29) + TO_END_OF_MINUTE),
        (
            "try again at Feb 1st, 2026 9:00 AM (Europe/Berlin)",
            at(9, day=1, month=2, zone=BERLIN) + TO_END_OF_MINUTE,
        ),
        # relative delays
        ("Please try again in 20s.", NOW_MS + 20_000),
        ("try again in 5 minutes", NOW_MS + ms_of(minutes=5)),
        ("or try again in 2 days 3 hours 4 minutes.", NOW_MS + ms_of(days=2, hours=3, minutes=4)),
        ("try again in 2 days, 3 hours and 4 minutes", NOW_MS + ms_of(days=2, hours=3, minutes=4)),
        ("rate limited, retry in 1h30m", NOW_MS + ms_of(hours=1, minutes=30)),
        ("Please retry in 57.637196847s.", NOW_MS + 57_637),
        ("Please retry in 900ms.", NOW_MS + 900),
        ("Your quota will reset after 2h52m39s.", NOW_MS + ms_of(hours=2, minutes=52, seconds=39)),
        ("Suggested retry after 60s.", NOW_MS + 60_000),
        ("You've hit your limit · resets 45m", NOW_MS + ms_of(minutes=45)),
        ('"retryDelay": "32s"', NOW_MS + 32_000),
        ("Retry-After: 30", NOW_MS + 30_000),
        ("resets in 1 week", NOW_MS + ms_of(days=7)),
    ],
)
def test_a_reset_time_is_read(line: str, expected: int) -> None:
    assert parse_reset(line, NOW_MS) == expected


@pytest.mark.parametrize(
    "line",
    [
        "You have exhausted your daily quota on this model.",
        "Retrying in 0.5 seconds...",
        "Retrying after 65901ms...",
        "resets Tuesday",
        "meet at 5 places",
        "in 3 months",
        "in 2024 we shipped",
        "resets 13pm",
        "at 25:00",
        "at 12:75",
        "resets 0am",
        "resets Feb 30, 5pm",
        "Claude AI usage limit reached|1000000000",  # 2001: a misreading, not a reset
        "Claude AI usage limit reached|9999999999",  # 2286
        "try again in 999 days",
        "resets Jan 10, 5pm",  # next January: further than any vendor window
        "try again at Dec 29th, 2025 10:15 PM",  # weeks ago
        "Limit 30000, Used 25000, Requested 8000.",
        "",
    ],
)
def test_no_reset_time_without_a_plausible_one(line: str) -> None:
    assert parse_reset(line, NOW_MS) is None


def test_a_zone_given_by_the_caller_applies_to_bare_clock_times() -> None:
    assert parse_reset("resets 3pm", NOW_MS, NEW_YORK) == at(15, zone=NEW_YORK)
    # A zone in the line beats the caller's: 9am Berlin has passed (it is 1pm there), 9am in
    # New York has not.
    assert parse_reset("resets 9am", NOW_MS, NEW_YORK) == at(9, zone=NEW_YORK)
    assert parse_reset("resets 9am (Europe/Berlin)", NOW_MS, NEW_YORK) == at(9, day=16, zone=BERLIN)
    # An unknown zone falls back to the caller's.
    assert parse_reset("resets 3pm (Nowhere/Land)", NOW_MS, NEW_YORK) == at(15, zone=NEW_YORK)


def test_clock_times_across_a_daylight_saving_change() -> None:
    # 2026-03-08 02:00 America/New_York springs forward: from 10pm the evening before, 9am
    # is 11 hours on the wall clock but 10 real hours away.
    evening = ms(datetime(2026, 3, 7, 22, 0, tzinfo=NEW_YORK))
    expected = ms(datetime(2026, 3, 8, 9, 0, tzinfo=NEW_YORK))
    assert expected - evening == ms_of(hours=10)
    assert parse_reset("resets 9am", evening, NEW_YORK) == expected


# --------------------------------------------------------------------------- fuzz

FRAGMENTS = st.sampled_from(
    [
        "resets ",
        "reset at ",
        "at ",
        "until ",
        "in ",
        "after ",
        "try again in ",
        "Retrying in ",
        "retryDelay: ",
        "Retry-After: ",
        "|",
        'resetsAt":',
        "3",
        "12",
        "99",
        ":",
        ":30",
        "pm",
        "am",
        " ",
        ",",
        "h",
        "m",
        "s",
        "ms",
        " days ",
        " and ",
        ".5",
        "1768500000",
        "1768500000123",
        "99999999999999",
        "2026-01-15T18:30:00Z",
        "2026-13-45T99:99",
        "Jan ",
        "Feb 30",
        "Tue ",
        "th, ",
        "2026 ",
        "(America/New_York)",
        "(Nowhere/Land)",
        "(../../etc/passwd)",
        "(UTC)",
        "İ",
        "\x1b[31m",
        "\r",
        "\n",
        "429 Too Many Requests",
        "usage limit reached",
        "overloaded",
    ]
)
LINES = st.one_of(st.text(max_size=200), st.lists(FRAGMENTS, max_size=12).map("".join))
NOWS = st.integers(
    min_value=ms(datetime(2001, 1, 1, tzinfo=UTC)), max_value=ms(datetime(2200, 1, 1, tzinfo=UTC))
)
ZONES = st.sampled_from([None, UTC, NEW_YORK, BERLIN, ZoneInfo("Pacific/Chatham")])


@settings(max_examples=400, deadline=None)
@given(line=LINES, now_ms=NOWS, tz=ZONES)
@example(line="resets 3pm (America/)", now_ms=NOW_MS, tz=None)
@example(line="in 999999999 weeks", now_ms=NOW_MS, tz=None)
def test_parse_reset_never_raises_and_stays_plausible(
    line: str, now_ms: int, tz: tzinfo | None
) -> None:
    result = parse_reset(line, now_ms, tz)
    assert result is None or (isinstance(result, int) and result >= now_ms - ms_of(days=1))


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINES, max_size=20), now_ms=NOWS, tz=ZONES)
def test_classify_never_raises(lines: list[str], now_ms: int, tz: tzinfo | None) -> None:
    diagnosis = classify(lines, now_ms, tz=tz)
    assert diagnosis.classification in CLASSES
    assert (diagnosis.evidence is None) == (diagnosis.classification == "unknown")
    assert diagnosis.evidence is None or len(diagnosis.evidence) <= EVIDENCE_MAX


@settings(max_examples=300, deadline=None)
@given(
    line=st.sampled_from([s[0] for s in SAMPLES]),
    prefix=st.text(max_size=30),
    suffix=st.text(max_size=30),
)
def test_the_prefilter_agrees_with_a_plain_search(line: str, prefix: str, suffix: str) -> None:
    """Classification with needles equals what searching every regex would answer."""
    text = reset.clean_line(prefix + line + suffix)
    folded = prefilter._fold(text)
    for pattern in DEFAULT_PATTERNS:
        needles = prefilter._needles(pattern.regex)
        if pattern.regex.search(text) and needles is not None:
            assert any(n in folded for n in needles), (pattern.regex.pattern, text)


REGEX_ATOMS = st.sampled_from(
    ["a", "b", "k", "s", " ", "-", r"\.", r"\(", "[ab]", r"[\]x]", ".", r"\d", r"\b", "é"]
)
REGEX_GROUPS = st.sampled_from(["(?:ab|ba)", "(a)", "(?=b)", "(?!a)"])
REGEX_QUANTIFIERS = st.sampled_from(["", "", "", "?", "*", "+", "{1,2}", "??", "{2}"])


@st.composite
def small_regexes(draw: st.DrawFn) -> str:
    branches = []
    for _ in range(draw(st.integers(1, 3))):
        atoms = draw(
            st.lists(
                st.tuples(st.one_of(REGEX_ATOMS, REGEX_GROUPS), REGEX_QUANTIFIERS),
                min_size=1,
                max_size=8,
            )
        )
        branches.append(
            "".join(a + ("" if a.startswith(("(?=", "(?!", "\\b")) else q) for a, q in atoms)
        )
    return "|".join(branches)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), source=small_regexes())
def test_needles_occur_in_every_match_of_any_regex(data: st.DataObject, source: str) -> None:
    regex = re.compile(source, re.IGNORECASE)
    needles = prefilter._needles(regex)
    text = data.draw(st.from_regex(regex))
    if needles is not None and regex.search(text):
        folded = prefilter._fold(text)
        assert any(n in folded for n in needles), (source, text, needles)


def test_a_reset_printed_to_the_minute_holds_once_that_minute_has_begun() -> None:
    # At 8:01:30, "resets 8:01am" is 30 s ahead, not past (the default cooldown).
    now = at(8, 1) + 30_000
    assert parse_reset("You've hit your limit · resets 8:01am", now) == at(8, 2)


def test_the_clis_own_wording_wins_over_a_later_generic_status_line() -> None:
    # Gemini prints its daily-quota message, then the HTTP response's fields.
    lines = [
        "You have exhausted your daily quota on this model.",
        "  status: 429,",
        "  statusText: 'Too Many Requests'",
    ]
    diagnosis = classify(lines, NOW_MS)
    assert (diagnosis.classification, diagnosis.vendor) == ("usage_limit", "gemini")
    assert diagnosis.evidence == lines[0]
    # Alone, the status line still says what it says.
    assert classify(lines[1:], NOW_MS).classification == "rate_limited"
