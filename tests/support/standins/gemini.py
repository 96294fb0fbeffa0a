"""A scripted stand-in for the Gemini API (generativelanguage v1beta), as the Gemini CLI uses it.

``GeminiStandIn`` is a ``ThreadingHTTPServer`` on 127.0.0.1 (a port of its own) in a
thread.  It logs every request (method, path, decoded JSON body) in ``requests`` and
answers:

* ``POST models/<m>:streamGenerateContent?alt=sse``: the script, as server-sent events.
  Turn 1 (no ``functionResponse`` in the request yet) is a ``functionCall`` of the CLI's
  shell tool (``run_shell_command``, as the request's ``tools`` declare it) that writes
  and commits ``hello.txt`` (or runs the stand-in's ``command``); turn 2 (after the
  ``functionResponse``) is the text ``Created and committed hello.txt.`` with
  ``finishReason: STOP``.  With ``turns`` above 1, the first ``turns`` answers are shell
calls (the count of ``functionResponse`` parts says which turn a request is), each
finished answer reporting ``usage`` in ``usageMetadata``.
* ``POST models/<m>:generateContent``: side calls the CLI makes (next-speaker checks,
  titles, routing): a short JSON text answer (``{}``-shaped when JSON is asked for).
* ``POST models/<m>:countTokens``: a fixed ``totalTokens``; ``GET models``: one model.

``mode`` makes every model call fail instead (see ``MODES``): ``rate_minute`` (429
RESOURCE_EXHAUSTED, a per-minute quota and ``RetryInfo`` ``retryDelay: 20s``),
``quota_daily`` (429, the per-day quota), ``prepaid`` (429, "Your prepayment credits are
depleted"), ``overloaded`` (503 UNAVAILABLE), ``auth`` (400 API_KEY_INVALID), ``forbidden``
(403 PERMISSION_DENIED), ``context`` (400, input token count too long), ``slow`` (answers
after ``delay`` seconds).  ``broken_streams`` makes that many stream answers break off
(text, then no ``finishReason``) before the script resumes.  ``refused_url()`` is a base
URL nobody listens on.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

USAGE = {
    "promptTokenCount": 1800,
    "candidatesTokenCount": 220,
    "cachedContentTokenCount": 300,
    "totalTokenCount": 2020,
}
SHELL_TOOL = "run_shell_command"
COMMAND = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -m 'add hello'"
FINAL_TEXT = "Created and committed hello.txt."
MODEL_VERSION = "gemini-2.5-pro"

PREPAID_DEPLETED = (
    "Your prepayment credits are depleted. Please go to AI Studio at "
    "https://ai.studio/projects to manage your project and billing."
)
PER_MINUTE_QUOTA = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
PER_DAY_QUOTA = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"


def _quota_error(quota_id: str, limit: int, retry: str | None) -> dict[str, Any]:
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    message = (
        f"You exceeded your current quota, please check your plan and billing details. "
        f"For more information on this error, head to: "
        f"https://ai.google.dev/gemini-api/docs/rate-limits.\n"
        f"* Quota exceeded for metric: {metric}, limit: {limit}, model: gemini-2.5-pro"
    )
    if retry:
        message += f"\nPlease retry in {retry}."
    details: list[dict[str, Any]] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": metric,
                    "quotaId": quota_id,
                    "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
                    "quotaValue": str(limit),
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [
                {
                    "description": "Learn more about Gemini API quotas",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                }
            ],
        },
    ]
    if retry:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry})
    return {
        "error": {
            "code": 429,
            "message": message,
            "status": "RESOURCE_EXHAUSTED",
            "details": details,
        }
    }


def _error(code: int, status: str, message: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "status": status}
    body.update(extra)
    return {"error": body}


# mode -> (HTTP status, JSON error body)
MODES: dict[str, tuple[int, dict[str, Any]]] = {
    "rate_minute": (429, _quota_error(PER_MINUTE_QUOTA, 2, "20s")),
    "quota_daily": (429, _quota_error(PER_DAY_QUOTA, 50, None)),
    "prepaid": (
        429,
        _error(429, "RESOURCE_EXHAUSTED", PREPAID_DEPLETED),
    ),
    "overloaded": (
        503,
        _error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    ),
    "auth": (
        400,
        _error(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            details=[
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ],
        ),
    ),
    "forbidden": (
        403,
        _error(
            403,
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without established identity)."
            " Please use API Key or other form of API consumer identity to call this API.",
        ),
    ),
    "context": (
        400,
        _error(
            400,
            "INVALID_ARGUMENT",
            "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",
        ),
    ),
}


@dataclass
class Request:
    method: str
    path: str
    body: Any = None


@dataclass
class GeminiStandIn:
    """The server; ``start()`` it, point ``GOOGLE_GEMINI_BASE_URL`` at ``url``, ``stop()``."""

    mode: str = "normal"
    delay: float = 0.0
    # The shell command turn 1 calls (the same for every session of the CLI).
    command: str = COMMAND
    # How many answers are shell calls before the final text (budget tests: many).
    turns: int = 1
    # The usageMetadata of every finished answer.
    usage: dict[str, int] = field(default_factory=lambda: dict(USAGE))
    # How many stream answers break off (text, then no finishReason: Gemini CLI's "Model
    # stream ended without a finish reason.") before the script resumes.
    broken_streams: int = 0
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None, "start the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> GeminiStandIn:
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def model_calls(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if "GenerateContent" in r.path]

    def __enter__(self) -> GeminiStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def model_info() -> dict[str, Any]:
    return {
        "name": f"models/{MODEL_VERSION}",
        "displayName": "Gemini 2.5 Pro",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }


def _declared_tools(body: Any) -> list[str]:
    names: list[str] = []
    if isinstance(body, dict):
        for tool in body.get("tools") or []:
            for decl in (tool or {}).get("functionDeclarations") or []:
                if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                    names.append(decl["name"])
    return names


def _function_responses(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    found = 0
    for content in body.get("contents") or []:
        for part in (content or {}).get("parts") or []:
            if isinstance(part, dict) and "functionResponse" in part:
                found += 1
    return found


def turn(
    body: Any, command: str = COMMAND, turns: int = 1, usage: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """The SSE chunks of one streamGenerateContent answer (the first ``turns`` run ``command``)."""
    usage = usage or USAGE
    done = _function_responses(body)
    if done < turns:
        # Gemini CLI stops a session that repeats one tool call (its loop detection).
        command = command if turns == 1 else f"{command} # turn {done + 1}"
        tools = _declared_tools(body)
        if SHELL_TOOL not in tools:
            text = f"I have no {SHELL_TOOL} tool (declared: {', '.join(tools) or 'none'})."
            return [_candidate([{"text": text}], "STOP", usage)]
        call = {
            "functionCall": {
                "name": SHELL_TOOL,
                "args": {"command": command, "description": "Create and commit hello.txt"},
            }
        }
        return [_candidate([call], "STOP", usage)]
    return [
        _candidate([{"text": "Created and committed "}], None),
        _candidate([{"text": "hello.txt."}], "STOP", usage),
    ]


def _candidate(
    parts: list[dict[str, Any]], finish: str | None, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL_VERSION}
    if finish:
        chunk["usageMetadata"] = dict(usage or USAGE)
    return chunk


def side_answer(body: Any) -> dict[str, Any]:
    """A generateContent answer: JSON when the request asks for JSON, else a short text."""
    config = body.get("generationConfig") if isinstance(body, dict) else None
    wants_json = isinstance(config, dict) and "json" in str(config.get("responseMimeType", ""))
    # One JSON object answers every structured side call the CLI makes: the next-speaker
    # check and the model router's complexity classifier.
    answer = {
        "reasoning": "The model answered; the user speaks next.",
        "next_speaker": "user",
        "complexity_reasoning": "A single small file.",
        "complexity_score": 10,
    }
    text = json.dumps(answer) if wants_json else "ok"
    return _candidate([{"text": text}], "STOP")


def refused_url() -> str:
    """A loopback base URL nobody listens on: connections are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class _Handler(BaseHTTPRequestHandler):
    """One request: logged on the stand-in, answered by its mode and script."""

    protocol_version = "HTTP/1.1"
    standin: GeminiStandIn  # set on a subclass per server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.standin._log(Request("GET", self.path))
        if urlsplit(self.path).path.rstrip("/").endswith("/models"):
            self._json(200, {"models": [model_info()]})
        else:
            self._json(404, _error(404, "NOT_FOUND", f"no {self.path}"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.standin._log(Request("POST", self.path, body))
        path = urlsplit(self.path).path
        if self.standin.delay:
            threading.Event().wait(self.standin.delay)
        if path.endswith(":countTokens"):
            self._json(200, {"totalTokens": 1800})
            return
        if self.standin.mode in MODES:
            status, error = MODES[self.standin.mode]
            self._json(status, error)
            return
        if path.endswith(":streamGenerateContent"):
            standin = self.standin
            with standin._lock:
                broken = standin.broken_streams > 0
                standin.broken_streams -= broken
            if broken:
                self._sse([_candidate([{"text": "Working on it"}], None)])
                return
            self._sse(turn(body, standin.command, standin.turns, standin.usage))
        elif path.endswith(":generateContent"):
            self._json(200, side_answer(body))
        else:
            self._json(404, _error(404, "NOT_FOUND", f"no {path}"))

    def _json(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, chunks: list[dict[str, Any]]) -> None:
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
