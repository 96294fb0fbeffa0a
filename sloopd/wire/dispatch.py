"""From a request line to a response line: envelope checks, authority, verbs.

Every failure becomes one structured error envelope; nothing a client sends
can raise out of here, so a bad line never costs the connection or the daemon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, Final, Protocol

import orjson

from sloopd.wire import api, salvage
from sloopd.wire.api import ErrorCode, ProtocolError

log = logging.getLogger(__name__)

Result = Any | Awaitable[Any]
Handler = Callable[[dict[str, Any]], Result]
Reply = bytes | Awaitable[bytes]


class Waiting(Protocol):
    """What a held request waits on (``sloopd.core.longpoll.Waiter``)."""

    def cut(self) -> None:
        """End the wait now; the answer is then the data as things are."""

    def release(self) -> None:
        """Forget the wait (idempotent): the reply was written, or will never be."""

    @property
    def waited_s(self) -> float:
        """Seconds spent waiting: a request's duration in the metrics leaves them out."""


class Hold:
    """A verb's answer that waits for news (``wait_ms``): ``answer`` gives the data.

    The connection cuts the wait when its client half-closed (no one is left to
    wait) or when it already holds its share of held requests, and releases it
    once the reply is done, even if ``answer`` never ran (the client went away).
    """

    __slots__ = ("answer", "waiting")

    def __init__(self, answer: Awaitable[Any], waiting: Waiting) -> None:
        self.answer = answer
        self.waiting = waiting


class HeldReply:
    """The reply line of a ``Hold``: awaited like any reply, cut and released by the connection."""

    __slots__ = ("_line", "waiting")

    def __init__(self, line: Coroutine[Any, Any, bytes], waiting: Waiting) -> None:
        self._line = line
        self.waiting = waiting

    def __await__(self) -> Generator[Any, None, bytes]:
        return self._line.__await__()


def encode(envelope: dict[str, Any]) -> bytes:
    # The newline is written by orjson: no second copy of a large reply.
    return orjson.dumps(envelope, option=orjson.OPT_APPEND_NEWLINE)


def error_line(request_id: api.RequestId, err: ProtocolError) -> bytes:
    return encode(api.error(request_id, err))


OVERLONG_LINE = ProtocolError(
    ErrorCode.INVALID_REQUEST,
    f"request line longer than {api.MAX_REQUEST_BYTES} bytes; it was skipped",
    {"limit_bytes": api.MAX_REQUEST_BYTES},
)


# A hot verb's handler of its plainest requests: given the raw ``args`` and the bytes
# the reply line has before and after the data, the whole reply line, or None.
FastHandler = Callable[[dict[str, Any], tuple[bytes, bytes]], bytes | None]
_OK_TAIL: Final = b"}\n"


class Dispatcher:
    """Envelope checks and error mapping shared by both sockets.

    Subclasses decide authority and call the verb: ``_call`` gets a parsed
    envelope and returns the verb's data, or an awaitable of it.
    """

    # Told (verb, code, seconds) for every answered request; set by the server
    # for metrics.  Lines that never name a known verb count as verb "-".
    observer: Callable[[str, str, float], None] | None = None
    # Hot verbs answered without the general path (OperatorDispatcher's ``fast``).
    _fast: Mapping[str, FastHandler] = {}

    def handle_line(self, line: bytes) -> Reply:
        started = time.perf_counter()
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            # Strict JSON only; a lenient reread (only now, off the hot path)
            # still finds the id of a line that is JSON in all but orjson's bounds.
            err = ProtocolError(ErrorCode.INVALID_REQUEST, f"malformed JSON: {exc}")
            return self._error(salvage.recover_id(line), err, "-", started)
        # The plain request of a hot verb: every envelope check would pass and there is
        # no token (only the operator socket has hot verbs, and it refuses tokens).
        # Anything else, or a handler that declines or fails, goes the general way,
        # which answers the same request again in full.  Written out here, not a method:
        # on the hot page every Python call counts, several times more in a served
        # daemon than in a loop (benchmarks/RESULTS.md).
        if self._fast and type(message) is dict and message.get("token") is None:
            name, args = message.get("verb"), message.get("args")
            handler = self._fast.get(name) if type(name) is str else None
            version, request_id = message.get("v"), message.get("id")
            if handler is not None and type(args) is dict and version == 1 and type(version) is int:
                # The envelope of api.ok, as orjson writes it, up to the data.
                if type(request_id) is int:
                    head = b'{"id":%d,"ok":true,"data":' % request_id
                elif type(request_id) is str:
                    head = b'{"id":' + orjson.dumps(request_id) + b',"ok":true,"data":'
                else:
                    head = None
                try:
                    fast = None if head is None else handler(args, (head, _OK_TAIL))
                except Exception:
                    fast = None
                if fast is not None:
                    observer = self.observer  # ``_observe`` written out
                    if observer is not None:
                        observer(message["verb"], "ok", time.perf_counter() - started)
                    return fast
        return self._answer(message, started)

    def _answer(self, message: Any, started: float) -> Reply:
        """The general path: every envelope check, authority, the verb."""
        verb = "-"
        request = _plain_request(message)
        request_id = request.id if request is not None else api.readable_id(message)
        try:
            if request is None:
                try:
                    request = api.parse_envelope(message)
                except ProtocolError as err:
                    raise self._envelope_error(err) from None
            verb = request.verb.name
            result = self._call(request)
        except ProtocolError as err:
            return self._error(request_id, err, verb, started)
        except Exception as exc:
            return self._error(request_id, _unexpected(exc, request_id), verb, started)
        if type(result) is not dict and type(result) is not orjson.Fragment:
            if isinstance(result, Hold):
                answer = self._finish(request_id, result.answer, verb, started, result.waiting)
                return HeldReply(answer, result.waiting)
            if isinstance(result, Awaitable):
                return self._finish(request_id, result, verb, started)
        reply = _encode_ok(request_id, result)
        self._observe(verb, "ok", started)
        return reply

    def _call(self, request: api.Request) -> Result:
        raise NotImplementedError

    def _envelope_error(self, err: ProtocolError) -> ProtocolError:
        """How an error found before authority is answered on this socket."""
        return err

    def _error(
        self, request_id: api.RequestId, err: ProtocolError, verb: str, started: float
    ) -> bytes:
        self._observe(verb, str(err.code), started)
        return error_line(request_id, err)

    def _observe(self, verb: str, code: str, started: float) -> None:
        if self.observer is not None:
            self.observer(verb, code, time.perf_counter() - started)

    async def _finish(
        self,
        request_id: api.RequestId,
        pending: Awaitable[Any],
        verb: str,
        started: float,
        waiting: Waiting | None = None,
    ) -> bytes:
        try:
            data = await pending
            reply = _encode_ok(request_id, data)
        except ProtocolError as err:
            return self._error(request_id, err, verb, started)
        except Exception as exc:
            return self._error(request_id, _unexpected(exc, request_id), verb, started)
        # A held request's wait is the client's choice, not time spent answering it.
        self._observe(verb, "ok", started + (waiting.waited_s if waiting is not None else 0.0))
        return reply


class OperatorDispatcher(Dispatcher):
    """The operator socket: authority by transport, every operator verb.

    ``fast`` maps a hot verb to a handler of its plainest requests: given the raw
    ``args`` and the envelope around the data it returns the reply line (the data
    written in place, no second encoding), or None for anything it does not take
    (then the request goes the general way, which checks and, when something is
    wrong, names it).  It must answer exactly what the general handler would.
    """

    def __init__(
        self, handlers: Mapping[str, Handler], fast: Mapping[str, FastHandler] | None = None
    ) -> None:
        self._handlers = handlers
        self._fast = dict(fast or {})

    def _call(self, request: api.Request) -> Result:
        # A token here means a worker is knocking on the wrong door.
        if request.token is not None or not request.verb.operator:
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED,
                "worker tokens and worker verbs are not accepted on the operator socket",
            )
        args = request.verb.parse(request.args)
        handler = self._handlers.get(request.verb.name)
        if handler is None:
            raise ProtocolError(
                ErrorCode.UNKNOWN_VERB,
                f"verb '{request.verb.name}' is not served by this daemon",
                {"verbs": sorted(self._handlers)},
            )
        return handler(args)


REFUSED_PEER = ProtocolError(
    ErrorCode.UNAUTHORIZED,
    "this connection comes from inside a run; agents use their worker socket",
)


class RefusingDispatcher(Dispatcher):
    """For a peer that descends from a run's child: every request is unauthorized."""

    def _envelope_error(self, err: ProtocolError) -> ProtocolError:
        return REFUSED_PEER

    def _call(self, request: api.Request) -> Result:
        raise REFUSED_PEER


def _plain_request(message: Any) -> api.Request | None:
    """A request every check of ``api.parse_envelope`` would pass, read in a few
    type tests (the hot path); None for anything else, which that function then
    reads and, when something is wrong, names."""
    if type(message) is not dict:
        return None
    version, request_id, args = message.get("v"), message.get("id"), message.get("args")
    token = message.get("token")
    if version != 1 or type(version) is not int or type(args) is not dict:
        return None
    if (type(request_id) is not str and type(request_id) is not int) or (
        token is not None and type(token) is not str
    ):
        return None
    name = message.get("verb")
    verb = api.VERBS.get(name) if type(name) is str else None
    return None if verb is None else api.Request(request_id, verb, args, token)


def _encode_ok(request_id: api.RequestId, data: Any) -> bytes:
    # A verb whose result cannot be encoded failed like any other verb.
    try:
        return encode(api.ok(request_id, data))
    except orjson.JSONEncodeError:
        log.exception("internal error encoding the reply to request %r", request_id)
        return error_line(request_id, _internal())


def _unexpected(exc: Exception, request_id: api.RequestId) -> ProtocolError:
    """An exception no verb turned into an answer.

    One that carries ``wire_error`` (code, message, details) is a condition the
    daemon knows, raised by a layer that cannot import this one (the store's
    "cannot be written now"); anything else is a bug, logged with its stack.
    """
    known = getattr(exc, "wire_error", None)
    if known is not None:
        code, message, details = known
        return ProtocolError(ErrorCode(code), message, details)
    log.exception("internal error handling request %r", request_id, exc_info=exc)
    return _internal()


def _internal() -> ProtocolError:
    return ProtocolError(
        ErrorCode.INTERNAL, "the daemon failed to handle this request; see its log"
    )
