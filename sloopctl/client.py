"""One narrow client of a Sloop socket: send an envelope, read one back.

Failures are sorted by what the operator has to do about them, because that is
what the exit codes promise: no socket (start the daemon), a socket nobody
answers on (restart it), a reply of another protocol (upgrade one side).
Nothing is spooled or retried: a client of a down daemon fails within a second.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import orjson

from sloopd.wire import api

CONNECT_TIMEOUT_S: Final = 1.0
FIX: Final = "start it with 'sloopctl daemon' (or 'systemctl start sloopd@<name>')"
_READ_CHUNK: Final = 65536


class ClientError(Exception):
    """A request that got no usable answer; ``code`` is what --json reports."""

    code: str = api.ErrorCode.DAEMON_UNAVAILABLE

    def __init__(self, message: str, socket_path: Path, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.socket_path = socket_path
        self.details: dict[str, Any] = {"socket": str(socket_path), **details}

    def envelope(self) -> dict[str, Any]:
        """The error envelope a daemon would have sent, for --json output."""
        return {
            "id": None,
            "ok": False,
            "error": {"code": str(self.code), "message": self.message, "details": self.details},
        }


class DaemonNotRunning(ClientError):
    """The socket path does not exist: no daemon has been started for it."""

    def __init__(self, socket_path: Path) -> None:
        super().__init__(
            f"no daemon is running: no socket at {socket_path}; {FIX}", socket_path, fix=FIX
        )


class DaemonNotAnswering(ClientError):
    """A socket exists but nothing answered on it (refused, timed out, hung up)."""

    def __init__(self, socket_path: Path, reason: str) -> None:
        super().__init__(
            f"the daemon is not answering on {socket_path} ({reason}); {FIX}",
            socket_path,
            fix=FIX,
        )


class ProtocolMismatch(ClientError):
    """The peer speaks another protocol version, or sent something unreadable."""

    code = api.ErrorCode.UNSUPPORTED_VERSION

    def __init__(
        self, socket_path: Path, message: str, reply: dict[str, Any] | None = None, **details: Any
    ) -> None:
        super().__init__(message, socket_path, **details)
        # The daemon's own unsupported_version envelope, printed verbatim with --json.
        self.reply = reply

    def envelope(self) -> dict[str, Any]:
        return self.reply if self.reply is not None else super().envelope()


@dataclass(frozen=True, slots=True)
class Reply:
    """A decoded response envelope and the exact line it came from (for --json)."""

    envelope: dict[str, Any]
    line: bytes

    @property
    def ok(self) -> bool:
        return self.envelope["ok"] is True

    @property
    def data(self) -> Any:
        return self.envelope.get("data")

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.envelope["error"]
        return error


class Client:
    """A connection to one socket; reused across calls while it is open.

    One call is one request line and one response line.  Use it as a context
    manager: the first call connects, later calls (a polling loop) reuse the
    connection, and leaving the block closes it.  ``read_timeout`` bounds the
    wait for each reply; by default there is none, since the daemon answers.
    """

    def __init__(
        self,
        socket_path: Path,
        token: str | None = None,
        *,
        read_timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.socket_path = socket_path
        self.token = token
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._next_id = 1

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout)
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, NotADirectoryError):
            sock.close()
            raise DaemonNotRunning(self.socket_path) from None
        except TimeoutError:
            sock.close()
            raise DaemonNotAnswering(self.socket_path, "connect timed out") from None
        except ConnectionRefusedError:
            sock.close()
            raise DaemonNotAnswering(self.socket_path, "connection refused") from None
        except BlockingIOError:
            # Linux answers EAGAIN at once, not after the timeout, when the
            # listen backlog is full: the daemon is alive but not accepting.
            sock.close()
            raise DaemonNotAnswering(self.socket_path, "not accepting connections") from None
        except OSError as exc:
            sock.close()
            raise DaemonNotAnswering(self.socket_path, exc.strerror or str(exc)) from None
        sock.settimeout(self.read_timeout)
        self._sock = sock
        return sock

    def call(self, verb: str, args: dict[str, Any] | None = None) -> Reply:
        """Send one request and return the daemon's answer, error answers included.

        Raises ClientError when there is no answer to return; raises
        ProtocolMismatch for ``unsupported_version`` since no later field of
        such a reply can be trusted.
        """
        request_id = str(self._next_id)
        self._next_id += 1
        line = orjson.dumps(api.request(verb, args or {}, request_id, self.token)) + b"\n"
        sock = self._connect()
        try:
            sock.sendall(line)
            raw = self._read_line(sock)
        except TimeoutError:
            self.close()
            raise DaemonNotAnswering(self.socket_path, "no reply in time") from None
        except OSError as exc:
            self.close()
            raise DaemonNotAnswering(self.socket_path, exc.strerror or str(exc)) from None
        return self._decode(raw, request_id)

    def _read_line(self, sock: socket.socket) -> bytes:
        while b"\n" not in self._buffer:
            chunk = sock.recv(_READ_CHUNK)
            if not chunk:
                self.close()
                raise DaemonNotAnswering(self.socket_path, "connection closed before a reply")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _decode(self, raw: bytes, request_id: str) -> Reply:
        try:
            envelope = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.close()
            raise ProtocolMismatch(
                self.socket_path,
                f"unreadable reply from {self.socket_path}: not JSON",
                reply_start=raw[:200].decode(errors="replace"),
            ) from None
        problem = envelope_problem(envelope, request_id)
        if problem is not None:
            self.close()
            raise ProtocolMismatch(
                self.socket_path,
                f"unreadable reply from {self.socket_path}: {problem}",
                reply_start=raw[:200].decode(errors="replace"),
            )
        reply = Reply(envelope, raw)
        if not reply.ok and reply.error["code"] == api.ErrorCode.UNSUPPORTED_VERSION:
            self.close()
            raise ProtocolMismatch(
                self.socket_path,
                f"the daemon does not speak protocol v{api.PROTOCOL_VERSION}: "
                f"{reply.error['message']}; upgrade sloopctl or sloopd so they match",
                reply=envelope,
            )
        return reply


def envelope_problem(envelope: Any, request_id: str) -> str | None:
    """What makes ``envelope`` not a v1 response to ``request_id``; None if nothing."""
    if not isinstance(envelope, dict):
        return "not a JSON object"
    ok = envelope.get("ok")
    if not isinstance(ok, bool):
        return "field 'ok' missing or not a boolean"
    # A daemon that could not read a request answers with a null id.
    if envelope.get("id") not in (request_id, None):
        return f"reply is for request {envelope.get('id')!r}, not {request_id!r}"
    if ok:
        return None if "data" in envelope else "field 'data' missing"
    error = envelope.get("error")
    if not isinstance(error, dict):
        return "field 'error' missing or not an object"
    if not isinstance(error.get("code"), str) or not isinstance(error.get("message"), str):
        return "error without a string 'code' and 'message'"
    return None
