"""The wire schema: the one module every client of Sloop imports.

It holds the envelope, the error codes, the verbs with their argument shapes,
the state names and the rules for finding a repository's operator socket.
It imports nothing else from the daemon, so ``sloopctl`` (and any other
client) can depend on it without pulling in the store or the server.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, Final

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (1,)
SOFTWARE_VERSION: Final = "0.8.0"

# A request line longer than this is answered with invalid_request and skipped
# up to its newline; the connection stays usable.  Ticket bodies travel as
# paths, not text, so no legitimate request comes near it.
MAX_REQUEST_BYTES: Final = 1024 * 1024

# Integers on the wire stay exactly representable in every JSON client (and
# in SQLite's 64-bit integers): 2**53 - 1.
MAX_INTEGER: Final = 2**53 - 1
# Refs (ref, run, scope) are refused above this: the pattern rung's cost grows with it.
MAX_REF_CHARS: Final = 1024
MAX_WAIT_MS: Final = 60_000  # the longest logs/events may be held for news (0.7.0)
# A ticket's body in a reply (show of a ticket, brief) is clipped past this many bytes,
# with a marker and ``body_bytes``/``body_clipped`` beside it (0.8.0): a ticket may be
# a megabyte (repo.max_ticket_bytes), and every follower would carry it each time.
MAX_SHOWN_BODY_BYTES: Final = 64 * 1024

OPERATOR_SOCKET_NAME: Final = "operator.sock"
WORKER_SOCKET_DIR_NAME: Final = "w"
DAEMON_INFO_NAME: Final = "daemon.json"
_MISSING: Final = object()  # an absent envelope field


class ErrorCode(StrEnum):
    """The ten error codes of protocol v1; no others are ever sent."""

    INVALID_ARGUMENTS = "invalid_arguments"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_VERB = "unknown_verb"
    DAEMON_UNAVAILABLE = "daemon_unavailable"
    UNAUTHORIZED = "unauthorized"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    COOLDOWN_ACTIVE = "cooldown_active"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """An error answer: raised anywhere below dispatch, sent as one envelope."""

    def __init__(
        self, code: ErrorCode, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def as_error(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, "details": self.details}


def invalid_arguments(message: str, **details: Any) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_ARGUMENTS, message, details)


# --- states --------------------------------------------------------------

TICKET_STATES: Final = ("ready", "held", "running", "merged", "failed", "needs_review")
TERMINAL_TICKET_STATES: Final = frozenset({"merged", "failed", "needs_review"})
RUN_STATES: Final = ("claimed", "running", "merged", "failed", "needs_review", "aborted")
ACTIVE_RUN_STATES: Final = frozenset({"claimed", "running"})
TERMINAL_RUN_STATES: Final = frozenset({"merged", "failed", "needs_review", "aborted"})
# How a person resolved a needs_review run (0.9.0, ``resolve``): its state stays.
RESOLUTIONS: Final = ("merged", "dismissed")
STAGE_ROW_STATES: Final = ("passed", "failed", "running", "pending")
GATE_STATES: Final = ("open", "cooldown", "paused")
WAITING_REASONS: Final = (
    "held",
    "no_trigger",
    "scheduled",
    "parallel_limit",
    "cooldown",
    "terminal",
    "invalid_flow",  # 0.6.0: the ticket's flow is no longer defined in sloop.toml
)
LOG_STREAMS: Final = ("stdout", "stderr", "note", "system")
VERDICTS: Final = ("pass", "fail")
CONFIDENCES: Final = ("low", "medium", "high")
DEFAULT_CONFIDENCE: Final = "medium"
DEFAULT_RECENT_LIMIT: Final = 10
# The runs verb (0.8.0): a page's rows by default and at most (a larger limit is cut).
DEFAULT_RUNS_PAGE: Final = 25
MAX_RUNS_PAGE: Final = 200
# The dashboard's attention (0.8.0): at most this many runs, attention_total counts all.
MAX_ATTENTION: Final = 50


# --- argument shapes -------------------------------------------------------

Validator = Callable[[str, Any], Any]


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise invalid_arguments(f"'{name}' must be a string", field=name)
    return value


def _sha256(name: str, value: Any) -> str:
    text = _string(name, value)
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise invalid_arguments(f"'{name}' must be 64 lowercase hex digits", field=name)
    return text


def _nonempty_string(name: str, value: Any, limit: int = MAX_REQUEST_BYTES) -> str:
    text = _string(name, value)
    if not text.strip():
        raise invalid_arguments(f"'{name}' must not be empty", field=name)
    if len(text) > limit:
        raise invalid_arguments(
            f"'{name}' exceeds {limit} characters", field=name, limit_chars=limit
        )
    return text


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid_arguments(f"'{name}' must be true or false", field=name)
    return value


def _integer(name: str, value: Any, minimum: int | None, maximum: int = MAX_INTEGER) -> int:
    # bool is an int subclass in Python; JSON true is not a number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_arguments(f"'{name}' must be an integer", field=name)
    if minimum is not None and value < minimum:
        raise invalid_arguments(f"'{name}' must be at least {minimum}", field=name)
    if value > maximum:
        raise invalid_arguments(f"'{name}' must be at most {maximum}", field=name)
    return value


_positive_integer = partial(_integer, minimum=1)
_non_negative_integer = partial(_integer, minimum=0)
_diff_bytes = partial(_integer, minimum=1, maximum=4 * 1024 * 1024)  # diff's max_bytes (0.7.0)
_wait_ms = partial(_integer, minimum=0, maximum=MAX_WAIT_MS)


def _one_of(choices: tuple[str, ...]) -> Validator:
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            allowed = ", ".join(choices)
            raise invalid_arguments(
                f"'{name}' must be one of: {allowed}", field=name, allowed=list(choices)
            )
        return value

    return check


def _trigger(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise invalid_arguments(f"'{name}' must be an object like {{\"at_ms\": 0}}", field=name)
    unknown = sorted(set(value) - {"at_ms"})
    if unknown:
        raise invalid_arguments(
            f"unknown field '{name}.{unknown[0]}'", field=f"{name}.{unknown[0]}"
        )
    if value.get("at_ms") is None:
        return {}
    return {"at_ms": _non_negative_integer(f"{name}.at_ms", value["at_ms"])}


@dataclass(frozen=True, slots=True)
class Field:
    validate: Validator
    required: bool = False


@dataclass(frozen=True, slots=True)
class Verb:
    """A verb's argument shape and the socket it is served on."""

    name: str
    fields: Mapping[str, Field]
    operator: bool = True
    worker: bool = False
    deprecated: bool = False
    bare: bool = False  # no field is required: empty args are valid as they are

    def parse(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate args, deny unknown fields; an explicit null means absent."""
        if not args and self.bare:
            return {}
        unknown = sorted(args.keys() - self.fields.keys())
        if unknown:
            raise invalid_arguments(
                f"unknown argument '{unknown[0]}' for verb '{self.name}'",
                field=unknown[0],
                allowed=sorted(self.fields),
            )
        parsed: dict[str, Any] = {}
        for name, spec in self.fields.items():
            value = args.get(name)
            if value is None:
                if spec.required:
                    raise invalid_arguments(
                        f"'{name}' is required for verb '{self.name}'", field=name
                    )
                continue
            parsed[name] = spec.validate(name, value)
        return parsed


def _verb(
    name: str,
    operator: bool = True,
    worker: bool = False,
    deprecated: bool = False,
    **fields: Field,
) -> Verb:
    bare = not any(f.required for f in fields.values())
    return Verb(name, fields, operator=operator, worker=worker, deprecated=deprecated, bare=bare)


_ref = partial(_nonempty_string, limit=MAX_REF_CHARS)
_REF = Field(_ref, required=True)
_TRIGGER = Field(_trigger)
_WAIT = Field(_wait_ms)  # 0.7.0: how long a request may be held for news
_WAITING: dict[str, Any] = {"since": Field(_non_negative_integer), "wait_ms": _WAIT}

VERBS: Final[Mapping[str, Verb]] = {
    v.name: v
    for v in (
        _verb("show", worker=True, ref=Field(_ref), limit=Field(_positive_integer), **_WAITING),
        _verb(
            "post",
            path=Field(_nonempty_string, required=True),
            hold=Field(_boolean),
            manual=Field(_boolean),
            trigger=_TRIGGER,
            sha256=Field(_sha256),  # additive in 0.9.0: the file the client read
        ),
        _verb("run", ref=_REF, trigger=_TRIGGER),
        _verb("hold", ref=_REF),
        _verb("ready", ref=_REF),
        _verb("abort", run=_REF, reason=Field(_nonempty_string)),  # reason: additive in 0.8.0
        _verb(
            "logs",
            run=_REF,
            stage=Field(_nonempty_string),
            tail=Field(_positive_integer),
            after=Field(_string),
            wait_ms=_WAIT,
        ),
        _verb(
            "events",
            after=Field(_string),
            tail=Field(_positive_integer),
            scope=Field(_ref),
            wait_ms=_WAIT,
        ),
        _verb("brief", operator=False, worker=True),
        _verb("note", operator=False, worker=True, text=Field(_nonempty_string, required=True)),
        _verb(
            "verdict",
            operator=False,
            worker=True,
            verdict=Field(_one_of(VERDICTS), required=True),
            reason=Field(_string),
            confidence=Field(_one_of(CONFIDENCES)),
        ),
        _verb("status", deprecated=True),
        _verb("list", deprecated=True, ref=Field(_ref), limit=Field(_positive_integer)),
        _verb("wait", deprecated=True, run=_REF, timeout_ms=Field(_non_negative_integer)),
        # Additive in 0.4.0 (documented in docs/protocol.md).
        _verb("gc"),
        _verb("pause", reason=Field(_nonempty_string)),
        _verb("resume"),
        _verb("diff", run=_REF, max_bytes=Field(_diff_bytes)),  # additive in 0.7.0
        _verb(  # additive in 0.8.0: the settled runs, a page at a time
            "runs",
            state=Field(_one_of(tuple(sorted(TERMINAL_RUN_STATES)))),
            limit=Field(_positive_integer),
            offset=Field(_non_negative_integer),
        ),
        _verb(  # additive in 0.9.0: a person's way out of needs_review
            "resolve",
            run=_REF,
            resolution=Field(_one_of(RESOLUTIONS), required=True),
            reason=Field(_string),
            by=Field(_string),
        ),
    )
}


# --- envelope -------------------------------------------------------------

RequestId = str | int | None


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    verb: Verb
    args: dict[str, Any]
    token: str | None


def readable_id(message: Any) -> RequestId:
    """The request id to echo, when the request carries a usable one."""
    if not isinstance(message, dict):
        return None
    value = message.get("id")
    if isinstance(value, str) or _is_int(value):
        return value
    return None


def _bad_envelope(message: str, name: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message, {"field": name})


def _envelope_field(
    message: dict[str, Any], name: str, types: tuple[type, ...], expected: str
) -> Any:
    # Exact types, as JSON decodes them (a bool is no integer): no call per check.
    value = message.get(name, _MISSING)
    if type(value) not in types:
        if value is _MISSING:
            raise _bad_envelope(f"missing envelope field '{name}'", name)
        raise _bad_envelope(f"envelope field '{name}' must be {expected}", name)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_envelope(message: Any) -> Request:
    """Check a decoded request line; raise ProtocolError naming what is wrong.

    The version is checked before anything else the envelope carries, so a
    client of another version is told so instead of being misparsed.
    ``token`` may be omitted (the protocol text's own shell client does);
    ``v``, ``id``, ``verb`` and ``args`` are required.  Unknown envelope
    fields are ignored, so a newer client's additions do not break it.
    """
    if not isinstance(message, dict):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "a request must be a JSON object")
    version = _envelope_field(message, "v", (int,), "an integer")
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"protocol version {version} is not supported",
            {"supported": list(SUPPORTED_VERSIONS)},
        )
    request_id = _envelope_field(message, "id", (str, int), "a string or an integer")
    verb_name = _envelope_field(message, "verb", (str,), "a string")
    verb = VERBS.get(verb_name)
    if verb is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_VERB, f"unknown verb '{verb_name}'", {"verbs": sorted(VERBS)}
        )
    args = _envelope_field(message, "args", (dict,), "an object")
    token = message.get("token")
    if token is not None and not isinstance(token, str):
        raise _bad_envelope("envelope field 'token' must be a string or null", "token")
    return Request(request_id, verb, args, token)


def request(
    verb: str, args: Mapping[str, Any], request_id: RequestId = "1", token: str | None = None
) -> dict[str, Any]:
    """A request envelope, for clients."""
    return dict(v=PROTOCOL_VERSION, id=request_id, verb=verb, args=dict(args), token=token)


def ok(request_id: RequestId, data: Any) -> dict[str, Any]:
    return {"id": request_id, "ok": True, "data": data}


def error(request_id: RequestId, err: ProtocolError) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": err.as_error()}


# --- references -------------------------------------------------------------

# -- durations as operators write them ("20m", "1h30m"): one grammar for sloop.toml's
# keys (read by the daemon) and sloopctl's --at (read by the client).  It is here
# because this is the one module both sides import; the wire itself carries only ms.
_DURATION_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_PART: Final = re.compile(r"(\d+)(ms|s|m|h|d)", re.IGNORECASE)


def parse_duration_ms(text: str, *, largest_first: bool = False) -> int:
    """Milliseconds of number-unit parts (``30s``, ``1h30m``, ``500ms``), any case, spaces
    ignored; ValueError naming ``text`` when it is none.

    ``sloop.toml`` sums parts in any order, as the daemon always did; a WHEN
    (``largest_first``) takes each unit at most once, largest first, as the client
    always did, since ``--at 30m1h`` is more likely a slip than a sum."""
    compact = "".join(text.split())
    if not compact:
        raise ValueError("empty duration")
    total, position, units = 0, 0, []
    for match in _DURATION_PART.finditer(compact):
        if match.start() != position:
            break
        unit = _DURATION_UNIT_MS[match.group(2).lower()]
        total, position = total + int(match.group(1)) * unit, match.end()
        units.append(unit)
    in_order = all(a > b for a, b in itertools.pairwise(units))
    if position != len(compact) or (largest_first and not in_order):
        raise ValueError(f"'{text}' is not a duration like 30s, 20m, 2h or 1h30m")
    return total


TICKET_ID_RE: Final = re.compile(r"^T([1-9][0-9]*)$")
RUN_ID_RE: Final = re.compile(r"^R([1-9][0-9]*)$")
TRIGGER_ID_RE: Final = re.compile(r"^TR([1-9][0-9]*)$")
RUN_ALIAS_RE: Final = re.compile(r"^(?P<ticket>.+)#(?P<attempt>[1-9][0-9]*)$")
PROJECT_PREFIX: Final = "project:"
# A ref holding any of these is a regular expression on the pattern rung.
REGEX_METACHARACTERS: Final = frozenset(".^$*+?{}[]\\|()")


# --- where the sockets live -------------------------------------------------


def repo_id(repo: Path) -> str:
    """First 12 hex digits of the SHA-256 of the repository's real path."""
    real = os.path.realpath(repo)
    return hashlib.sha256(real.encode()).hexdigest()[:12]


def default_socket_dir(repo: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The socket directory a daemon for ``repo`` uses when not told otherwise."""
    env = os.environ if environ is None else environ
    if env.get("SLOOP_SOCKET_DIR"):
        return Path(env["SLOOP_SOCKET_DIR"])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "sloop" / repo_id(repo)
    return Path(f"/tmp/sloop-{os.getuid()}") / repo_id(repo)


def untrusted_directory(path: Path) -> str | None:
    """Why a socket directory may not be trusted, or None when it may.

    Another local user who creates ``/tmp/sloop-<uid>`` first would receive the
    operator's requests and answer them, so daemon and client alike refuse a
    directory (or symlink) owned by anyone but this uid or root, or writable by
    group or others; a root-owned sticky parent (``/tmp``) is trusted.
    """
    try:
        link, info = os.lstat(path), os.stat(path)
    except FileNotFoundError:
        return None  # nothing there yet: whoever creates it makes it ours
    except OSError as exc:
        return f"{path} cannot be checked: {exc.strerror}"
    owner = next((s.st_uid for s in (link, info) if s.st_uid not in (os.getuid(), 0)), None)
    if owner is not None:
        return f"{path} belongs to uid {owner}, not to uid {os.getuid()}: remove it"
    if info.st_mode & 0o022 and not (info.st_uid == 0 and info.st_mode & 0o1000):
        return f"{path} is writable by group or others (mode {info.st_mode & 0o7777:o})"
    return None


def untrusted_socket_path(socket: Path) -> str | None:
    """The first reason, from the socket's parent's parent down, not to trust ``socket``."""
    for directory in (socket.parent.parent, socket.parent):
        if (reason := untrusted_directory(directory)) is not None:
            return reason
    return None
