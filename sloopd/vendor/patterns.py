"""The built-in table of vendor diagnostics: which output means which failure.

:func:`sloopd.vendor.classify` reads it; this module is only the data, the
``Pattern`` row type and the vocabulary (``CLASSES``, ``VENDORS``) it is
validated against, so it imports nothing else from Sloop.

How the table is written:

* **Ordered from the most specific diagnosis to the least**, since on a
  single line the earliest pattern wins: context length, then usage limits (a
  quota 429 is a plan limit, not throttling), rate limits, overload,
  authentication, network.  Within a class, a CLI's own phrasing comes before
  the generic wording so ``vendor`` names the tool when it can.
* **Patterns need error context.**  Agent output also carries the agent's own
  work: code about rate limiters, C++ "overloaded" operators, test failures at
  ``line 401``.  A false ``usage_limit`` would pause the whole repository, so
  the generic patterns insist on error wording ("rate limit exceeded", "status
  429"), never a bare keyword.  Retry chatter ("Retrying in 0.5 seconds...")
  matches nothing: it is not the failure, and its delay is the CLI's own
  back-off, not the vendor's reset.
* **Every alternative needs literal text.**  ``classify`` skips a pattern on
  a line that lacks the literal words each top-level alternative of its regex
  contains (``sloopd.vendor.classify``'s prefilter); a pattern without them would be
  searched on every line, and tests/unit/test_vendor.py refuses such a row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

CLASSES: Final = (
    "rate_limited",
    "usage_limit",
    "overloaded",
    "auth_failed",
    "network",
    "context_length",
    "refused",
    "unknown",
)
VENDORS: Final = ("claude", "codex", "gemini", "aider")


@dataclass(frozen=True)
class Pattern:
    """One row of the table: output matching ``regex`` means ``classification``."""

    classification: str
    regex: re.Pattern[str]
    vendor: str | None

    def __post_init__(self) -> None:
        # Fail at import (defaults) or load (config), never mid-diagnosis.
        if self.classification not in CLASSES or self.classification == "unknown":
            raise ValueError(f"pattern classification {self.classification!r} is not usable")


def _p(classification: str, vendor: str | None, regex: str) -> Pattern:
    return Pattern(classification, re.compile(regex, re.IGNORECASE), vendor)


_APOS = "['\u2019]"  # "You've" is printed with a straight or a typographic apostrophe
_STATUS = r"(?:status|code|error|http(?:/\d(?:\.\d)?)?)\W{0,5}(?:code\W{0,3})?"
_AUTH_WORDS = r"(?:auth\w*|api[ _-]?key|token|credential|forbidden|unauthori[sz]ed|permission)"
_NODE_NET_CODES = (
    "ECONNRESET",
    "ECONNREFUSED",
    "ECONNABORTED",
    "ETIMEDOUT",
    "ENOTFOUND",
    "EAI_AGAIN",
    "ENETUNREACH",
    "EHOSTUNREACH",
)

DEFAULT_PATTERNS: Final[tuple[Pattern, ...]] = (
    # --- refused: a preset's own check would not start its CLI in this checkout
    # (sloopd.flows.presets, Sloop's wording, printed before the CLI runs).  No vendor
    # was asked, so no vendor is named, and no other line can be the cause.
    _p("refused", None, r"^sloop: not starting [^:\n]{1,80}: "),
    # --- context_length: the most specific wording; a 400 naming it is about it.
    _p("context_length", "aider", r"ContextWindowExceededError"),
    _p("context_length", "aider", r"exceeds the \S+ token limit for"),
    _p("context_length", "aider", r"has hit a token limit|exhausted context window"),
    _p("context_length", "claude", r"prompt is too long"),
    _p("context_length", "claude", r"exceed context limit"),
    _p("context_length", "codex", r"context_length_exceeded"),
    _p("context_length", "codex", r"ran out of room in the model's context window"),
    _p("context_length", "codex", r"your input exceeds the context window"),
    _p("context_length", "gemini", r"input token count.{0,40}exceeds the maximum number of tokens"),
    _p("context_length", None, r"exceed(?:s|ed)? (?:the )?(?:model'?s? |maximum )?context"),
    _p("context_length", None, r"maximum context length"),
    _p("context_length", None, r"context[ _-]?(?:length|window)[ _-]?exceed"),
    # --- overloaded first where a capacity error arrives as RESOURCE_EXHAUSTED: the
    # model's capacity is the vendor's, not the account's quota.
    _p("overloaded", "gemini", r"model capacity exceeded|MODEL_CAPACITY_EXHAUSTED"),
    # A spent prepaid balance arrives as a RetryableQuotaError 429: the account's, for
    # good, not throttling.
    _p("usage_limit", "gemini", r"prepayment credits are depleted"),
    # --- rate_limited, first the quotas that are per minute: throttling, not a plan limit.
    _p("rate_limited", "gemini", r"RetryableQuotaError|PerMinute"),
    _p("rate_limited", "gemini", r"quota exceeded for (?:quota )?metric.{0,160}\bper[ _]?minute\b"),
    _p("rate_limited", None, r"quota\b.{0,160}\bper[ _]?min(?:ute)?\b"),
    # --- usage_limit: plan and quota limits (checked before the 429 they arrive with).
    _p("usage_limit", "aider", r"BudgetExceededError"),
    _p("usage_limit", "claude", r"claude(?: ai)? usage limit reached"),
    _p(
        "usage_limit",
        "claude",
        r"\b(?:5-hour|five[- ]hour|session|weekly|daily|opus|sonnet)(?: usage)? limit reached",
    ),
    _p("usage_limit", "claude", r"your limit will reset"),
    _p("usage_limit", "claude", r"rate_limit_event.{0,200}\"status\"\s*:\s*\"rejected\""),
    _p("usage_limit", "claude", r"credit balance (?:is )?too low"),
    _p("usage_limit", "claude", rf"you{_APOS}?ve hit your org{_APOS}?s (?:\w+ )?usage limit"),
    _p("usage_limit", "claude", r"\bout of (?:extra )?usage credits\b|out of extra usage"),
    # Monthly spend limits: the member's own, the organisation's, a channel's.
    _p(
        "usage_limit",
        "claude",
        rf"you{_APOS}?ve hit your (?:(?:org|organi[sz]ation|channel){_APOS}?s )?"
        r"(?:monthly )?spend limit",
    ),
    _p("usage_limit", "claude", r"usage credit cap is reached|usage credits are capped"),
    _p("usage_limit", "claude", r"usage credits (?:ran out|required for)"),
    # Usage credits of a Team or Enterprise seat: the org's, the admin's, the group's.
    _p("usage_limit", "claude", r"your org is out of usage\b"),
    _p("usage_limit", "claude", r"your usage allocation has been disabled"),
    _p("usage_limit", "claude", rf"your group{_APOS}?s usage limit is set to \$0"),
    # The API's wording of a console spend limit (Claude Code's usage_cap_reached).
    _p("usage_limit", "claude", r"reached your specified (?:[\w-]+ ){0,3}usage limits"),
    _p("usage_limit", "codex", rf"you{_APOS}?ve hit your usage limit|usage_limit_reached"),
    _p(
        "usage_limit",
        "claude",
        rf"you(?:{_APOS}?ve| have) (?:hit|reached) your "
        r"(?:(?!(?:rate|usage|spend)\b)[\w-]+ )?limit",
    ),
    _p("usage_limit", "codex", r"quota exceeded\. check your plan"),
    _p("usage_limit", "codex", r"you hit your spend cap|spend_control_reached"),
    _p("usage_limit", "codex", rf"workspace is out of credits|you{_APOS}?re out of credits"),
    _p("usage_limit", "codex", r"included usage is exhausted"),
    _p("usage_limit", "gemini", r"TerminalQuotaError|QUOTA_EXHAUSTED|INSUFFICIENT_G1_CREDITS"),
    _p("usage_limit", "gemini", r"exhausted your (?:daily |monthly )?(?:quota|capacity)"),
    _p("usage_limit", "gemini", r"reached your daily .{0,40}quota"),
    _p("usage_limit", "gemini", r"quota exceeded for (?:quota )?metric"),
    _p("usage_limit", "gemini", r"purchase more AI Credits"),
    # The suffix Gemini CLI adds to every 429 it reports; a per-minute quota's own
    # "Please retry in 20s" makes it rate_limited (sloopd.vendor.classify._throttled).
    _p("usage_limit", "gemini", r"request a quota increase"),
    _p("usage_limit", None, r"insufficient_quota|exceeded your current quota"),
    _p("usage_limit", None, r"usage limit (?:reached|exceeded|hit)"),
    _p("usage_limit", None, r"(?:reached|hit|exceeded) (?:your |the )?(?:usage|spend) limit"),
    _p("usage_limit", None, r"quota (?:exceeded|exhausted|reached)|out of (?:credits|quota)"),
    _p("usage_limit", None, r"(?:exceeded|exhausted) (?:your |the )?(?:\w+ )?quota"),
    # --- rate_limited: short-term throttling.
    _p("rate_limited", "aider", r"litellm\.RateLimitError|rate limited you"),
    _p("rate_limited", "claude", r"rate_limit_error|API Error:? \(?429\b"),
    _p("rate_limited", "claude", r"API Error:? Request rejected \(429\)"),
    _p("rate_limited", "claude", r"server is temporarily limiting requests"),
    _p("rate_limited", "codex", r"last status:? 429\b|rate limit reached for"),
    _p("rate_limited", "gemini", r"RESOURCE_EXHAUSTED|resource has been exhausted"),
    _p("rate_limited", "gemini", r"failed with status 429\b"),
    _p("rate_limited", None, r"too many requests|ThrottlingException|RateLimitError"),
    _p("rate_limited", None, _STATUS + r"429\b"),
    _p("rate_limited", None, r"rate[ _-]?limit(?:ed|s)?[ _-]?(?:reached|exceeded|hit)"),
    _p("rate_limited", None, r"(?:hit|reached|exceeds?|exceeded) (?:the |your )?rate[ _-]?limit"),
    _p("rate_limited", None, r"\brate[ -]?limited\b"),
    # --- overloaded: the vendor's side is busy or broken (5xx); it is not our fault.
    _p("overloaded", "aider", r"litellm\.(?:ServiceUnavailableError|InternalServerError)"),
    _p("overloaded", "aider", r"servers are down or overloaded"),
    _p("overloaded", "claude", r"overloaded_error|API Error:? \(?5\d\d\b"),
    _p("overloaded", "claude", r"repeated 529 overloaded errors"),
    _p("overloaded", "claude", r"\b(?:opus|sonnet|haiku|claude)\b.{0,20}experiencing high load"),
    _p("overloaded", "claude", r"API Error:? The API is temporarily unavailable"),
    _p("overloaded", "codex", r"currently experiencing high demand|server_is_overloaded"),
    _p("overloaded", "codex", r"selected model is at capacity"),
    _p(
        "overloaded",
        "codex",
        r"codex is currently experiencing high load|^\W*server overloaded\W*$",
    ),
    _p("overloaded", "codex", r"(?:policy-restricted|flex) capacity (?:is )?unavailable"),
    _p("overloaded", "codex", r"(?:last|unexpected) status:? 5\d\d\b"),
    _p("overloaded", "gemini", r"model is overloaded|MODEL_CAPACITY_EXHAUSTED"),
    _p("overloaded", "gemini", r"no capacity available for model"),
    # The API's stream broke off mid-answer (Gemini CLI's InvalidStreamError NO_FINISH_REASON,
    # printed as an error event before a result of status "error", exit 0).
    _p("overloaded", "gemini", r"model stream ended without a finish reason"),
    _p("overloaded", "gemini", r"\b503\W{1,3}UNAVAILABLE\b|\"status\"\s*:\s*\"UNAVAILABLE\""),
    _p(
        "overloaded",
        None,
        r"\b(?:model|server|service|api|engine|system|backend|upstream|provider)s?\b(?:'s)?"
        r"\s+(?:is|are|was|were|seems|appears|currently|temporarily)\b[^.\n]{0,20}\boverloaded\b",
    ),
    _p("overloaded", None, r"(?:error|exception)\W{1,5}overloaded\W*$"),
    _p("overloaded", None, r"message[\"']?\s*[:=]\s*[\"']overloaded[\"']"),
    _p("overloaded", None, r"^\W*overloaded\W*$"),
    _p("overloaded", None, r"\b503\b\W{0,3}service (?:temporarily )?unavailable"),
    _p("overloaded", None, r"\bcapacity (?:is )?(?:currently |temporarily )?unavailable\b"),
    _p("overloaded", None, r"\b502\b\W{0,3}bad gateway|\b504\b\W{0,3}gateway time-?out"),
    # Codex's answer from a blocked region comes with a 403 but is no credential problem.
    _p("network", "codex", r"access blocked by cloudflare"),
    # --- auth_failed: a person must log in again or fix a key; retrying will not help.
    _p("auth_failed", "aider", r"litellm\.AuthenticationError|not able to authenticate you"),
    _p("auth_failed", "claude", r"please run /login|invalid x-api-key|authentication_error"),
    _p("auth_failed", "claude", r"oauth token (?:has )?(?:expired|been revoked|revoked)"),
    _p("auth_failed", "claude", r"organization has been disabled"),
    _p("auth_failed", "claude", r"invalid auth token|fix external (?:api key|auth token)"),
    _p("auth_failed", "claude", r"belongs to a disabled organization"),
    _p("auth_failed", "claude", r"organization has disabled api key authentication"),
    _p("auth_failed", "codex", r"refresh token (?:has )?(?:expired|was already used|revoked)"),
    _p("auth_failed", "codex", r"access token could not be refreshed|log out and sign in again"),
    _p("auth_failed", "codex", r"(?:last|unexpected) status:? 40[13]\b"),
    # Its provider's env_key unset: "Missing environment variable: `OPENAI_API_KEY`."
    _p("auth_failed", "codex", r"missing environment variable:? \W?\w*(?:KEY|TOKEN)\b"),
    _p("auth_failed", "gemini", r"api key not valid|API_KEY_INVALID|UNAUTHENTICATED"),
    _p("auth_failed", "gemini", r"invalid authentication credentials|PERMISSION_DENIED"),
    _p("auth_failed", "gemini", r"you must specify the GEMINI_API_KEY environment variable"),
    _p("auth_failed", "gemini", r"invalid auth method selected"),
    _p("auth_failed", None, r"incorrect api key|invalid[_ -]?api[_ -]?key|invalid credentials"),
    _p("auth_failed", None, r"AuthenticationError|PermissionDeniedError"),
    _p("auth_failed", None, r"\b401\b\W{0,3}unauthori[sz]ed|\b403\b\W{0,3}forbidden"),
    _p("auth_failed", None, _STATUS + r"40[13]\b.{0,60}" + _AUTH_WORDS),
    _p("auth_failed", None, r"authentication (?:failed|error|required)"),
    _p("auth_failed", None, r"\bapi[ _-]?key (?:is |has )?(?:invalid|expired|revoked|not valid)"),
    _p("auth_failed", None, r"\b(?:auth|access) token (?:is |has )?(?:invalid|expired|revoked)"),
    _p("auth_failed", None, r"\bcredentials (?:are |have )?(?:invalid|expired|revoked)"),
    # --- network: we never reached the vendor, or lost it half-way.
    _p("network", "aider", r"litellm\.(?:APIConnectionError|Timeout|APITimeoutError)"),
    _p("network", "aider", r"timed out without returning a response"),
    _p(
        "network",
        "claude",
        r"API Error:? \(?(?:Connection (?:error|lost|dropped|closed)|Request timed out)",
    ),
    _p("network", "claude", r"stream timed out because of no activity|a request to AWS timed out"),
    _p("network", "claude", r"request socket timed out after"),
    _p("network", "claude", r"unable to connect to API"),
    _p("network", "claude", r"request timed out\. if the API is slow"),
    _p("network", "claude", r"request timed out\. check your internet connection"),
    # Claude Code's headless result event says only "Request timed out" (or the SDK's
    # "…out."); so do other CLIs' fetch errors: no vendor is named by it.
    _p("network", None, r"^\W*request timed out\.?\W*$"),
    _p("network", "claude", r"API Error:? No response from API"),
    _p("network", "codex", r"stream disconnected before completion|error sending request for url"),
    _p("network", "codex", r"connection failed:|error while reading the server response"),
    # Not retry chatter: the words say the network is down (its reconnect loop).
    _p("network", "codex", r"reconnecting\.{3} waiting for network"),
    _p("network", "gemini", r"total timeout exceeded before any response"),
    _p("network", None, "|".join(rf"\b{code}\b" for code in _NODE_NET_CODES) + r"|\bUND_ERR_\w+"),
    _p("network", None, r"getaddrinfo|socket hang up|fetch failed"),
    _p("network", None, r"connection (?:refused|reset|timed out|aborted|closed|error)"),
    _p("network", None, r"network (?:error|is (?:unreachable|down))|could not resolve host"),
    _p("network", None, r"\bNetworkError\b|\b(?:Connect|Headers|Body) Timeout Error\b"),
    _p("network", None, r"\brequest timed out after \d"),
    _p("network", None, r"temporary failure in name resolution|name or service not known"),
    _p("network", None, r"APIConnectionError|APITimeoutError"),
    _p("network", None, r"\b(?:Connect|Read)Timeout(?:Error)?\b"),
)
