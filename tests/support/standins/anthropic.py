"""A scripted stand-in for the Anthropic Messages API, as Claude Code uses it.

``AnthropicStandIn`` is a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) in a thread.
``POST /v1/messages`` answers the next turn of its session's *script* (a list of
``Turn``: content blocks and a stop reason; ``scripts`` holds one per CLI session,
told apart by ``metadata.user_id``), streamed as server-sent events when the request
says ``stream: true`` (message_start, content_block_start/delta/stop per block,
text as ``text_delta``, tool input as ``input_json_delta``, message_delta with the
stop reason and usage, message_stop), or as one JSON message otherwise.  Which turn
answers a request is the number of ``assistant`` messages it carries, so a CLI's
retries answer the same turn again.  A request without ``tools`` (a CLI's side
request: a title, a quota probe) gets a short text answer and does not advance the
script.  ``count_tokens`` and every other path get small, well-formed answers.

Every request is logged (``requests``: path, selected headers, parsed body) so a
test can see what the CLI asked; pointed at as the CLI's ``HTTPS_PROXY``, it also
logs (and refuses) every ``CONNECT`` to another host, so a test sees any traffic
that was not meant for the API.  ``mode`` makes the server fail the way the API
does (``MODES``): a 429 with ``retry-after`` and ``anthropic-ratelimit-*-reset``
headers, a 529 ``overloaded_error``, a 401 ``authentication_error``, a 400
``invalid_request_error`` "prompt is too long", a slow answer, or no server at all
(``close``: the port then refuses connections).  Every answer reports the same usage
(``usage``, by default ``USAGE``) so a cost test can compare what the CLI reports;
``busy_script`` is a long session of tool-calling turns for budget tests.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-sonnet-4-5-20250929"
USAGE: dict[str, int] = {
    "input_tokens": 1200,
    "output_tokens": 300,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 0,
}
MODES = ("normal", "rate_limit", "overloaded", "auth", "too_long", "slow")
RESET_IN_S = 3600  # a 429's reset, from the moment it is answered


@dataclass
class Turn:
    """One assistant answer: content blocks (Messages API shapes) and a stop reason."""

    blocks: list[dict[str, Any]]
    stop_reason: str = "end_turn"


def text(words: str) -> Turn:
    """A final answer: ``words``, then end_turn."""
    return Turn([{"type": "text", "text": words}])


def bash(command: str, description: str = "Run a shell command", say: str = "") -> Turn:
    """A call of Claude Code's ``Bash`` tool running ``command`` (optionally after text)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    blocks.append(
        {
            "type": "tool_use",
            "id": "toolu_" + uuid.uuid4().hex[:24],
            "name": "Bash",
            "input": {"command": command, "description": description},
        }
    )
    return Turn(blocks, stop_reason="tool_use")


HELLO_COMMAND = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -m 'add hello'"


def hello_script() -> list[Turn]:
    """Turn 1 commits hello.txt through Bash; turn 2 says so and ends."""
    return [
        bash(HELLO_COMMAND, "Create and commit hello.txt"),
        text("Created and committed hello.txt."),
    ]


def busy_script(turns: int) -> list[Turn]:
    """``turns`` tool-calling turns (each a harmless Bash call), then a final answer."""
    return [bash(f"echo turn {n}", f"Turn {n}") for n in range(1, turns + 1)] + [text("Done.")]


def verdict_script(verdict: str = "pass", reason: str = "looks good") -> list[Turn]:
    """A reviewer: reports ``verdict`` through ``sloopctl verdict``, then ends."""
    command = f"sloopctl verdict {verdict} --reason '{reason}'"
    return [bash(command, "Report the verdict"), text(f"Reported {verdict}.")]


@dataclass
class Request:
    """What the CLI sent: the path, a few headers, the JSON body (or None)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class AnthropicStandIn:
    """The server; ``start`` it (or use it as a context manager), point the CLI at ``url``."""

    # One script per CLI session, in the order the sessions first call (the last one
    # serves any further session): a flow's stages are sessions of their own.
    scripts: list[Sequence[Turn]] = field(default_factory=lambda: [hello_script()])
    mode: str = "normal"
    delay_s: float = 0.0  # "slow": seconds before each /v1/messages answer
    retry_after_s: int = RESET_IN_S  # "rate_limit": the 429's retry-after and resets
    # What every answer reports having used (message_start, message_delta, a message).
    usage: dict[str, int] = field(default_factory=lambda: dict(USAGE))
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _port: int = 0
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sessions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; one of {MODES}")

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> AnthropicStandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: the port (``url`` stays valid) refuses connections from now on."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> AnthropicStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._port, "start the stand-in first"
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what was asked -----------------------------------------------------------

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def message_requests(self) -> list[Request]:
        """The ``/v1/messages`` requests of the conversation (those offering tools)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.path.split("?")[0] == "/v1/messages"
                and isinstance(r.body, dict)
                and r.body.get("tools")
            ]

    # -- answers -------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """The CLI sessions seen, in order of their first conversation request."""
        with self._lock:
            return list(self._sessions)

    def turn_for(self, body: dict[str, Any]) -> Turn:
        if not body.get("tools"):
            return text("Sloop stand-in.")
        key = session_of(body)
        with self._lock:
            number = self._sessions.setdefault(key, len(self._sessions))
        script = self.scripts[min(number, len(self.scripts) - 1)]
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if done < len(script):
            return script[done]
        return text("Done.")


def session_of(body: dict[str, Any]) -> str:
    """The session a request belongs to: Claude Code puts its id in ``metadata.user_id``."""
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user, str):
        return ""
    try:
        parsed = json.loads(user)
    except ValueError:
        return user
    session = parsed.get("session_id") if isinstance(parsed, dict) else None
    return session if isinstance(session, str) else user


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_" + uuid.uuid4().hex[:24],
    }


FAILURES: dict[str, tuple[int, str, str]] = {
    "rate_limit": (
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization (00000000-sloop) of "
        "50,000 input tokens per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits.",
    ),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "auth": (401, "authentication_error", "invalid x-api-key"),
    "too_long": (
        400,
        "invalid_request_error",
        "prompt is too long: 212345 tokens > 200000 maximum",
    ),
}


class _Handler(BaseHTTPRequestHandler):
    owner: AnthropicStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the stand-in keeps its own log

    def _body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _record(self, body: Any) -> None:
        keep = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta", "user-agent")
        headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
        self.owner.log(Request(self.command, self.path, headers, body))

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._record(None)
        self._json(200, {"data": [], "has_more": False})

    def do_HEAD(self) -> None:
        self._record(None)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # the CLI gave up on an answer (a timeout): nothing to tell
            self.close_connection = True

    def do_CONNECT(self) -> None:
        """A proxy tunnel (the CLI's ``HTTPS_PROXY`` pointed here): logged, refused."""
        self._record(None)
        self._json(403, error_body("permission_error", "the stand-in proxies nothing"))
        self.close_connection = True

    def do_POST(self) -> None:
        body = self._body()
        self._record(body)
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": self.owner.usage["input_tokens"]})
            return
        if path != "/v1/messages" or not isinstance(body, dict):
            self._json(200, {})
            return
        mode = self.owner.mode
        if mode in FAILURES:
            self._fail(mode)
            return
        if mode == "slow" and self.owner.delay_s:
            time.sleep(self.owner.delay_s)
        turn = self.owner.turn_for(body)
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            self._stream(turn, model)
        else:
            self._json(200, message(turn, model, self.owner.usage))

    def _fail(self, mode: str) -> None:
        status, kind, words = FAILURES[mode]
        headers: dict[str, str] = {"x-should-retry": "true" if status >= 429 else "false"}
        if status == 429:
            reset = time.time() + self.owner.retry_after_s
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
            headers.update(
                {
                    "retry-after": str(self.owner.retry_after_s),
                    "anthropic-ratelimit-requests-limit": "50",
                    "anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": stamp,
                    "anthropic-ratelimit-input-tokens-limit": "50000",
                    "anthropic-ratelimit-input-tokens-remaining": "0",
                    "anthropic-ratelimit-input-tokens-reset": stamp,
                    "anthropic-ratelimit-tokens-reset": stamp,
                    "date": formatdate(usegmt=True),
                }
            )
        self._json(status, error_body(kind, words), headers)

    def _stream(self, turn: Turn, model: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event, data in events(turn, model, self.owner.usage):
            payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(payload)
            self.wfile.flush()


def message(turn: Turn, model: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """The non-streaming answer for ``turn``, reporting ``usage`` (default ``USAGE``)."""
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": turn.blocks,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": dict(usage or USAGE),
    }


def events(
    turn: Turn, model: str, usage: dict[str, int] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of ``turn``, in the API's order, reporting ``usage``."""
    usage = usage or USAGE
    start = message(Turn([], turn.stop_reason), model, usage)
    start["stop_reason"] = None
    start["usage"] = {**usage, "output_tokens": 1}
    out: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(turn.blocks):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[:half]},
                {"type": "input_json_delta", "partial_json": raw[half:]},
            ]
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        for delta in deltas:
            out.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out
