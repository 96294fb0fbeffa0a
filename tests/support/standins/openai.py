"""A scripted stand-in for the OpenAI Responses API, as the Codex CLI calls it.

Codex 0.171.0 posts every model turn to ``POST {base_url}/responses`` (JSON, with
``"stream": true``) and reads the answer as server-sent events: ``response.created``,
``response.output_item.added`` / ``…done`` per output item, text or argument deltas,
and ``response.completed`` carrying the usage.  Its shell tool is ``exec_command``
(arguments ``{"cmd": "<shell command>"}``); the command's result comes back on the
next request as a ``function_call_output`` input item.

**Code mode.**  With no model named, Codex 0.171.0 picks its default (``gpt-6.2-sol``),
whose tools are declared as an ``additional_tools`` input item (role ``developer``), not
in the body's ``tools``: a ``functions`` namespace holding one *custom* tool ``exec``
(free-form input, a Lark grammar: JavaScript source, optionally led by a
``// @exec: {…}`` pragma line) that runs in Codex's V8 host, where the shell is
``await tools.exec_command({cmd})`` (resolving to ``{output, exit_code, …}``); ``wait``
resumes a yielded cell.  The model calls it with a ``custom_tool_call`` output item
(``name: "exec"``, ``input``: the source; streamed as ``response.custom_tool_call_input``
deltas), and Codex sends the result back as a ``custom_tool_call_output`` input item.
When a request declares ``exec`` so, a ``Shell`` step answers in that protocol
(``code_mode_turns`` counts them; see ``tests.support.standins.openai_code_mode``);
otherwise with the classic ``exec_command`` function call.  Codex also accepts that
from its default model, so only answering in code mode makes a test run what a user's
default runs.

``OpenAIStandin`` is a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) in a thread.
Its ``script`` says what each turn answers: a ``Shell`` step makes the model call
``exec_command``; a ``Say`` step is the final assistant message (``busy_script`` is a
long session of tool calls for budget tests).  Every response reports ``usage``.
Which step a request gets is the number of ``function_call_output`` items in its
input, so a retried request gets the same answer.  ``mode`` makes every
``/responses`` request fail instead (``Mode``); every request is logged (``requests``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.standins.openai_code_mode import code_mode_call, declares_code_mode

# Fixed usage of every completed response: what the tests expect Codex to report.
USAGE = {"input_tokens": 1500, "output_tokens": 250, "cached_tokens": 200}

HELLO_COMMAND = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -m 'add hello'"
HELLO_DONE = "Created and committed hello.txt."

RATE_LIMIT_MESSAGE = (
    "Rate limit reached for gpt-5 in organization org-standin on tokens per min (TPM): "
    "Limit 30000, Used 30000, Requested 1750. Please try again in 20s."
)
CAPACITY_MESSAGE = "Selected model is at capacity. Please try a different model."
AUTH_MESSAGE = (
    "Incorrect API key provided: sk-stand***-key. You can find your API key at "
    "https://platform.openai.com/account/api-keys."
)
CONTEXT_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


class Mode(Enum):
    """How ``/responses`` answers."""

    NORMAL = "normal"
    RATE_LIMITED = "rate_limited"  # 429, retry-after and x-ratelimit-reset-* headers
    USAGE_LIMIT = "usage_limit"  # 429 usage_limit_reached, as ChatGPT-plan accounts get
    OVERLOADED = "overloaded"  # 503 "Selected model is at capacity"
    UNAUTHORIZED = "unauthorized"  # 401 invalid_api_key
    CONTEXT = "context"  # 400 context_length_exceeded
    SLOW = "slow"  # normal answers, each event ``delay`` seconds apart
    DISCONNECT = "disconnect"  # the stream ends after response.created, never completed


@dataclass(frozen=True)
class Shell:
    """The model calls Codex's shell tool with this command."""

    command: str


@dataclass(frozen=True)
class Say:
    """The model ends the turn with this assistant message."""

    text: str


Step = Shell | Say
HELLO_SCRIPT: tuple[Step, ...] = (Shell(HELLO_COMMAND), Say(HELLO_DONE))

# The input items that carry a tool's result back, classic and code mode.
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")


def busy_script(turns: int) -> tuple[Step, ...]:
    """``turns`` harmless shell calls, one model request each, then a final message."""
    return (*(Shell(f"echo turn {n}") for n in range(1, turns + 1)), Say("Done."))


@dataclass
class Request:
    """One request the stand-in received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or None


@dataclass
class OpenAIStandin:
    script: Sequence[Step] = HELLO_SCRIPT
    mode: Mode = Mode.NORMAL
    delay: float = 0.0  # seconds between events (Mode.SLOW)
    retry_after_s: int = 20
    # What every completed response reports having used.
    usage: dict[str, int] = field(default_factory=lambda: dict(USAGE))
    requests: list[Request] = field(default_factory=list)
    code_mode_turns: int = 0  # Shell steps answered with a custom ``exec`` call
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> OpenAIStandin:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin.handle(self)

            def do_POST(self) -> None:
                standin.handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OpenAIStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start the stand-in first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- what was asked -------------------------------------------------------------

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def turns(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/responses")]

    def tool_outputs(self) -> list[str]:
        """The output of every shell call, as Codex sent it back (last request's input)."""
        turns = self.turns()
        if not turns or not isinstance(turns[-1].body, dict):
            return []
        items = turns[-1].body.get("input", [])
        return [_output_text(i.get("output")) for i in items if i.get("type") in OUTPUT_ITEMS]

    # -- answering ------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Request(h.command, h.path, dict(h.headers.items()), body))
        path = h.path.split("?")[0]
        if h.command == "POST" and path.endswith("/responses"):
            self.respond(h, body if isinstance(body, dict) else {})
        elif path.endswith("/models"):
            self.send_json(h, 200, {"object": "list", "data": [], "models": []})
        else:
            self.send_json(h, 404, {"error": {"message": "not found", "type": "not_found"}})

    def send_json(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        value: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(value).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for key, text in (headers or {}).items():
            h.send_header(key, text)
        h.end_headers()
        h.wfile.write(data)

    def respond(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        error = self.error_answer()
        if error is not None:
            status, value, headers = error
            self.send_json(h, status, value, headers)
            return
        items = body.get("input", [])
        done = sum(1 for i in items if isinstance(i, dict) and i.get("type") in OUTPUT_ITEMS)
        step = self.script[min(done, len(self.script) - 1)]
        code_mode = isinstance(step, Shell) and declares_code_mode(body)
        if code_mode:
            with self._lock:
                self.code_mode_turns += 1
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("connection", "close")
        h.end_headers()
        events = self.events(step, done + 1, code_mode)
        if self.mode is Mode.DISCONNECT:
            events = events[:1]
        for event in events:
            payload = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
            h.wfile.write(payload.encode())
            h.wfile.flush()
            if self.mode is Mode.SLOW and self.delay:
                time.sleep(self.delay)
        h.close_connection = True

    def error_answer(self) -> tuple[int, Any, dict[str, str]] | None:
        def error(message: str, kind: str, code: str | None, param: str | None = None) -> Any:
            return {"error": {"message": message, "type": kind, "param": param, "code": code}}

        reset = f"{self.retry_after_s}s"
        if self.mode is Mode.RATE_LIMITED:
            headers = {
                "retry-after": str(self.retry_after_s),
                "x-ratelimit-limit-requests": "500",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": reset,
                "x-ratelimit-limit-tokens": "30000",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": reset,
            }
            return 429, error(RATE_LIMIT_MESSAGE, "tokens", "rate_limit_exceeded"), headers
        if self.mode is Mode.USAGE_LIMIT:
            resets = int(time.time()) + self.retry_after_s
            value = {
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": resets,
                    "resets_in_seconds": self.retry_after_s,
                }
            }
            return 429, value, {"retry-after": str(self.retry_after_s)}
        if self.mode is Mode.OVERLOADED:
            return 503, error(CAPACITY_MESSAGE, "server_error", "server_is_overloaded"), {}
        if self.mode is Mode.UNAUTHORIZED:
            return 401, error(AUTH_MESSAGE, "invalid_request_error", "invalid_api_key"), {}
        if self.mode is Mode.CONTEXT:
            value = error(
                CONTEXT_MESSAGE, "invalid_request_error", "context_length_exceeded", "input"
            )
            return 400, value, {}
        return None

    def events(self, step: Step, turn: int, code_mode: bool = False) -> list[dict[str, Any]]:
        rid = f"resp_standin_{turn}"
        created = {"id": rid, "object": "response", "status": "in_progress", "output": []}
        item: dict[str, Any]
        middle: list[dict[str, Any]]
        if isinstance(step, Shell) and code_mode:
            item, middle = code_mode_call(turn, step.command)
        elif isinstance(step, Shell):
            arguments = json.dumps({"cmd": step.command})
            item = {
                "type": "function_call",
                "id": f"fc_{turn}",
                "call_id": f"call_standin_{turn}",
                "name": "exec_command",
                "arguments": arguments,
                "status": "completed",
            }
            middle = [
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                },
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "delta": arguments,
                },
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": 0,
                    "arguments": arguments,
                },
                {"type": "response.output_item.done", "output_index": 0, "item": item},
            ]
        else:
            part = {"type": "output_text", "text": step.text, "annotations": []}
            item = {
                "type": "message",
                "id": f"msg_{turn}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
            middle = [
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**item, "content": [], "status": "in_progress"},
                },
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": step.text,
                },
                {"type": "response.output_item.done", "output_index": 0, "item": item},
            ]
        used = self.usage
        usage = {
            "input_tokens": used["input_tokens"],
            "input_tokens_details": {"cached_tokens": used["cached_tokens"]},
            "output_tokens": used["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used["input_tokens"] + used["output_tokens"],
        }
        completed = {**created, "status": "completed", "output": [item], "usage": usage}
        return [
            {"type": "response.created", "response": created},
            {"type": "response.in_progress", "response": created},
            *middle,
            {"type": "response.completed", "response": completed},
        ]


def _output_text(output: Any) -> str:
    """A tool result as text: a string, or code mode's list of ``{type, text}`` items."""
    if isinstance(output, list):
        return "\n".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return str(output)


def refused_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --- Codex against the stand-in -----------------------------------------------------

KEY_VAR = "CODEX_STANDIN_KEY"  # the API key's variable: in the daemon's env and agent.env
PROVIDER = "standin"


def codex_argv(codex: str, base_url: str) -> list[str]:
    """The command that runs the real ``codex exec`` unattended inside Sloop's sandbox.

    * Sloop's sandbox is the sandbox: Codex's own (landlock/bwrap) is bypassed.
    * ``allow_login_shell=false``: Codex's shell tool runs ``bash -c``, not ``bash -lc``
      (a login shell resets PATH, losing ``sloopctl``).
    * the provider points at the stand-in, without retries, and
      ``unbounded_connection_retries`` off: otherwise an unreachable API is retried
      forever ("Reconnecting... waiting for network").
    * plugins, remote plugins, apps, updates, analytics and feedback off: with them
      Codex looks up github.com, api.github.com and chatgpt.com at start.
    * the prompt is read from standard input (``-``), so any size fits.
    """
    provider = f"model_providers.{PROVIDER}"
    return [
        "sh",
        "-c",
        'exec "$@" - < "$SLOOP_PROMPT_FILE"',
        "codex",
        codex,
        "exec",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "--disable",
        "unbounded_connection_retries",
        "--disable",
        "plugins",
        "--disable",
        "remote_plugin",
        "--disable",
        "apps",
        "--disable",
        "in_app_updates",
        "-c",
        "allow_login_shell=false",
        "-c",
        "analytics.enabled=false",
        "-c",
        "feedback.enabled=false",
        "-c",
        "check_for_update_on_startup=false",
        "-c",
        f'{provider}.name="{PROVIDER}"',
        "-c",
        f'{provider}.base_url="{base_url}"',
        "-c",
        f'{provider}.wire_api="responses"',
        "-c",
        f'{provider}.env_key="{KEY_VAR}"',
        "-c",
        f"{provider}.request_max_retries=0",
        "-c",
        f"{provider}.stream_max_retries=0",
        "-c",
        f'model_provider="{PROVIDER}"',
        "-m",
        "gpt-5.5",  # a model Codex has metadata for (gpt-5 draws a warning event)
    ]
