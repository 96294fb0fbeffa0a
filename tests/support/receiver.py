"""A webhook receiver on loopback for the notification tests: a small threaded HTTP server.

It records every request (path, headers, body) and answers with the next status of
its script (then ``then``), or never answers (``hang``: it reads the request and
holds the connection until the test closes it).  With ``tls`` it serves HTTPS.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

# The secret part of every receiver URL: tests check no record or log line names it.
SECRET_PATH = "hooks/T0K3N-in-the-path"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    at: float

    def json(self) -> Any:
        return orjson.loads(self.body)

    def verifies(self, secret: str, tolerance_s: float = 300) -> bool:
        """The check docs/operator-guide.md describes: HMAC of "<timestamp>." + body."""
        timestamp = self.headers.get("x-sloop-timestamp", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance_s:
            return False
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + self.body, hashlib.sha256)
        return hmac.compare_digest(
            "sha256=" + mac.hexdigest(), self.headers.get("x-sloop-signature", "")
        )


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    then: int = 200
    hang: bool = False
    tls: ssl.SSLContext | None = None
    location: str | None = None  # sent as Location (with a 3xx status: a redirect)
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.received.append(Received(self.path, headers, body, time.time()))
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.then
                if receiver.hang:
                    receiver._closed.wait(120)
                    return
                self.send_response(status)
                if receiver.location is not None:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if self.tls is not None:
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        port: int = self.server.server_address[1]
        return port

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{SECRET_PATH}"

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.requests()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{count} requests expected, {len(self.requests())} received")

    def close(self) -> None:
        self._closed.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
