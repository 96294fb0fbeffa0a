"""One narrow client of a Sloop socket: send an envelope, read one back.

Failures are sorted by what the operator has to do about them, because that is
what the exit codes promise: no listener (start the daemon), a daemon that
hung up or did not reply (read its log), a daemon too busy to accept for a
while (try again), a reply of another protocol (upgrade one side).  Only "no
socket" and "connection refused" mean nobody listens, so only they advise
starting one.

Nothing is spooled, and a request is never sent twice; only a connect the
daemon's full listen backlog turned away (EAGAIN: the request was not sent)
is retried, with a short backoff, for at most ``BUSY_RETRY_S``.
"""

from __future__ import annotations

import copy
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import orjson

from sloopctl.safe_text import clean_tree
from sloopd.wire import api

CONNECT_TIMEOUT_S: Final = 1.0
# How long a connect may keep meeting a full listen backlog before "busy".
BUSY_RETRY_S: Final = 5.0
BUSY_BACKOFF_FIRST_S: Final = 0.005
BUSY_BACKOFF_MAX_S: Final = 0.2
FIX: Final = "start it with 'sloopctl daemon' (or 'systemctl start sloopd@<name>')"
LOG_FIX: Final = (
    "the daemon's log may say why (daemon.log in <git common dir>/sloop/, "
    "or 'journalctl -u sloopd@<name>')"
)
BUSY_FIX: Final = "try again in a moment"
# Inside a run, for the worker socket: an agent must not be told to start a daemon.
WORKER_FIX: Final = (
    "the run's worker socket goes away when its stage execution ends or the daemon "
    "stops; from inside the run there is nothing to do about it"
)
_READ_CHUNK: Final = 65536


class ClientError(Exception):
    """A request that got no usable answer; ``code`` is what --json reports."""

    code: str = api.ErrorCode.DAEMON_UNAVAILABLE

    def __init__(
        self, message: str, socket_path: Path, fix: str | None = None, **details: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.socket_path = socket_path
        self.fix = fix
        fixed = {"fix": fix} if fix else {}
        self.details: dict[str, Any] = {"socket": str(socket_path), **fixed, **details}

    def for_worker(self) -> ClientError:
        """The same error about a run's worker socket: advice that fits an agent, not
        "start it with 'sloopctl daemon'"."""
        if self.fix != FIX:
            return self
        found = copy.copy(self)
        found.message = self.message.replace(FIX, WORKER_FIX)
        found.args = (found.message,)
        found.fix = WORKER_FIX
        found.details = {**self.details, "fix": WORKER_FIX}
        return found

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
    """A socket exists but gave no answer; ``fix`` says what to do about it.

    The default, FIX, is for a socket nobody listens on (connection refused):
    a daemon that died without removing it.
    """

    def __init__(self, socket_path: Path, reason: str, fix: str = FIX) -> None:
        super().__init__(
            f"the daemon is not answering on {socket_path} ({reason}); {fix}",
            socket_path,
            fix=fix,
        )


class DaemonBusy(DaemonNotAnswering):
    """The daemon's listen backlog stayed full for the retry time: alive, overloaded."""

    def __init__(self, socket_path: Path, waited_s: float) -> None:
        ClientError.__init__(
            self,
            f"the daemon on {socket_path} is busy (its connection backlog stayed full "
            f"for {waited_s:g} s); {BUSY_FIX}",
            socket_path,
            fix=BUSY_FIX,
        )


class DaemonHungUp(DaemonNotAnswering):
    """The daemon accepted, then closed or reset the connection before replying."""

    def __init__(self, socket_path: Path, reason: str) -> None:
        ClientError.__init__(
            self,
            f"the daemon on {socket_path} hung up ({reason}); {LOG_FIX}",
            socket_path,
            fix=LOG_FIX,
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
    """A decoded response envelope and the exact line it came from (for --json).

    The envelope's strings are cleaned for a terminal unless the client is verbatim.
    """

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

    Every string of a decoded reply is cleaned of terminal control sequences
    (``sloopctl.safe_text``) unless ``verbatim``: replies carry agents' and
    tickets' text, and renderers print it.  ``Reply.line`` is always the
    bytes as received.
    """

    def __init__(
        self,
        socket_path: Path,
        token: str | None = None,
        *,
        read_timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        busy_retry: float | None = None,
        verbatim: bool = False,
    ) -> None:
        self.socket_path = socket_path
        self.token = token
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.busy_retry = BUSY_RETRY_S if busy_retry is None else busy_retry
        self.verbatim = verbatim
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
        started = time.monotonic()
        delay = BUSY_BACKOFF_FIRST_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.connect_timeout)
            try:
                sock.connect(str(self.socket_path))
            except BlockingIOError:
                # Linux answers EAGAIN at once, not after the timeout, when the
                # listen backlog is full: the daemon is alive, only behind on
                # accepting.  Nothing was sent, so trying again is safe.
                sock.close()
                left = started + self.busy_retry - time.monotonic()
                if left <= 0:
                    raise DaemonBusy(self.socket_path, self.busy_retry) from None
                # Jitter keeps a crowd of clients from coming back in step.
                time.sleep(min(left, delay * random.uniform(0.5, 1.0)))
                delay = min(delay * 2, BUSY_BACKOFF_MAX_S)
                continue
            except (FileNotFoundError, NotADirectoryError):
                sock.close()
                raise DaemonNotRunning(self.socket_path) from None
            except ConnectionRefusedError:
                sock.close()
                # A socket file nobody listens on: a daemon that died without cleaning up.
                raise DaemonNotAnswering(self.socket_path, "connection refused") from None
            except TimeoutError:
                sock.close()
                raise DaemonNotAnswering(self.socket_path, "connect timed out", LOG_FIX) from None
            except OSError as exc:
                sock.close()
                reason = exc.strerror or str(exc)
                raise DaemonNotAnswering(self.socket_path, reason, LOG_FIX) from None
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
            raise DaemonNotAnswering(self.socket_path, "no reply in time", LOG_FIX) from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            # ECONNRESET, EPIPE: a daemon was there and accepted; it is not a
            # missing daemon, so starting one is the wrong advice.
            self.close()
            raise DaemonHungUp(self.socket_path, (exc.strerror or str(exc)).lower()) from None
        except OSError as exc:
            self.close()
            reason = exc.strerror or str(exc)
            raise DaemonNotAnswering(self.socket_path, reason, LOG_FIX) from None
        return self._decode(raw, request_id)

    def _read_line(self, sock: socket.socket) -> bytes:
        while b"\n" not in self._buffer:
            chunk = sock.recv(_READ_CHUNK)
            if not chunk:
                self.close()
                raise DaemonHungUp(self.socket_path, "closed before a reply")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _decode(self, raw: bytes, request_id: str) -> Reply:
        try:
            return decode_reply(raw, request_id, self.socket_path, verbatim=self.verbatim)
        except ProtocolMismatch:
            self.close()  # nothing later on this connection can be trusted
            raise


def decode_reply(raw: bytes, request_id: str, socket_path: Path, *, verbatim: bool) -> Reply:
    """One reply line as a ``Reply``; ``ProtocolMismatch`` for anything not a v1 answer.

    Shared by every client of the operator socket (``Client``, the web gateway's link).
    """
    try:
        envelope = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProtocolMismatch(
            socket_path,
            f"unreadable reply from {socket_path}: not JSON",
            reply_start=raw[:200].decode(errors="replace"),
        ) from None
    problem = envelope_problem(envelope, request_id)
    if problem is not None:
        raise ProtocolMismatch(
            socket_path,
            f"unreadable reply from {socket_path}: {problem}",
            reply_start=raw[:200].decode(errors="replace"),
        )
    reply = Reply(envelope if verbatim else clean_tree(envelope), raw)
    if not reply.ok and reply.error["code"] == api.ErrorCode.UNSUPPORTED_VERSION:
        raise ProtocolMismatch(
            socket_path,
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
