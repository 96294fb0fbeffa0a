"""The ``id`` of a line orjson refused, when the line is still a JSON object.

orjson is strict, and a line can fail it while its envelope stays readable: a
leading byte order mark, a lone surrogate escape or invalid UTF-8 inside a
string, a number beyond 64 bits or a double's range (``1e400``), or nesting
deeper than 1024 levels.  Such a line is still ``invalid_request``, but the
reply carries its ``id`` (docs/protocol.md, "The response id"), so a client
matching replies by id is not left with a ``null``.

Only lines orjson has already refused come here, so valid lines never pay.
Python's ``json`` reads the line first, with integers past 21 digits left
unread (they could not be an id, and ``int`` would refuse them) and ``NaN`` or
``Infinity`` refused as the grammar refuses them.  Nesting too deep for it
falls to a scan that is iterative however deep the nesting and reads nothing
but the top-level object's member names and its last ``id`` member, for at
most MAX_DEEP_TOKENS tokens.  A line that is not an object by the JSON
grammar (with the departures above) has no readable id.
"""

from __future__ import annotations

import json
import re
from typing import Final

from sloopd.wire import api

BOM: Final = b"\xef\xbb\xbf"
# Integer ids must survive being echoed: orjson writes 64-bit integers only.
MIN_INTEGER_ID: Final = -(2**63)
MAX_INTEGER_ID: Final = 2**64 - 1
# A line nested past what ``json`` reads costs one step per token: bounded.
MAX_DEEP_TOKENS: Final = 16_384

# One token after optional whitespace.  The string pattern is the unrolled
# loop (no nested quantifier can backtrack); any byte but '"', '\' and a
# control character is string content, so invalid UTF-8 is read as text.
_TOKEN: Final = re.compile(
    rb'[ \t\r\n]*(?:(?P<s>"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*")'
    rb"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)"
    rb"|(?P<open>\[[\[ \t\r\n]*|\{)"
    rb"|(?P<close>[\]}][\]} \t\r\n]*)"
    rb"|(?P<p>[:,]))"
)
_END: Final = re.compile(rb"[ \t\r\n]*\Z")
_INTEGER: Final = re.compile(rb"-?(?:0|[1-9][0-9]{0,19})")
_CLOSER: Final = bytes.maketrans(b"[{", b"]}")


class _NotAnObject(Exception):
    pass


def recover_id(line: bytes) -> api.RequestId:
    """The id ``line`` carries, if a lenient reader finds a usable one; else None."""
    text = line[len(BOM) :] if line.startswith(BOM) else line
    try:
        # Invalid UTF-8 becomes lone surrogates, as lone surrogate escapes do.
        message = json.loads(
            text.decode("utf-8", "surrogateescape"),
            parse_int=_short_int,
            parse_constant=_no_constant,
        )
    except RecursionError:
        return _deep_id(text)
    except ValueError:
        return None
    return _usable(message.get("id")) if isinstance(message, dict) else None


def _short_int(digits: str) -> int | None:
    return int(digits) if len(digits) <= 21 else None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _usable(value: object) -> api.RequestId:
    """A string id that is valid Unicode, or an integer id orjson can write back."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return None  # no reply line could carry it
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if MIN_INTEGER_ID <= value <= MAX_INTEGER_ID else None
    return None  # a float, true, false, null, an array or an object


def _deep_id(text: bytes) -> api.RequestId:
    try:
        token = _last_id_token(text)
    except _NotAnObject:
        return None
    if token is None or not token:
        return None
    if token.startswith(b'"'):
        return _usable(_decode_string(token))
    return _usable(int(token)) if _INTEGER.fullmatch(token) else None


def _last_id_token(text: bytes) -> bytes | None:
    """The raw value of the top-level object's last ``id`` member (b"" for a container)."""
    first = _TOKEN.match(text)
    if first is None or first.group("open") != b"{":
        raise _NotAnObject
    scan = _Scan()
    pos = first.end()
    for _ in range(MAX_DEEP_TOKENS):
        if not scan.stack:
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise _NotAnObject
        scan.step(match.lastgroup or "", match.group(match.lastgroup or 0))
        pos = match.end()
    if scan.stack or _END.match(text, pos) is None:
        raise _NotAnObject
    return scan.found


class _Scan:
    """The JSON grammar as a stack of open containers and what may come next."""

    def __init__(self) -> None:
        self.stack = bytearray(b"{")  # each b"[" or b"{"
        self.expect = "key_or_close"  # key | colon | value | value_or_close | after
        self.found: bytes | None = None
        self.is_id = False  # the top-level member being read is named "id"

    def step(self, kind: str, token: bytes) -> None:
        expect = self.expect
        if kind == "close" and expect in ("after", "value_or_close", "key_or_close"):
            self._close(token)
        elif expect in ("key", "key_or_close"):
            if kind != "s":
                raise _NotAnObject
            if len(self.stack) == 1:
                self.is_id = _is_id_key(token)
            self.expect = "colon"
        elif expect == "colon":
            if token != b":":
                raise _NotAnObject
            self.expect = "value"
        elif expect in ("value", "value_or_close"):
            self._value(kind, token)
        elif token == b",":  # after a value
            self.expect = "key" if self.stack[-1:] == b"{" else "value"
        else:
            raise _NotAnObject

    def _value(self, kind: str, token: bytes) -> None:
        if len(self.stack) == 1 and self.is_id:
            self.found = token if kind in ("s", "n") else b""
        if kind == "open":
            self.stack += token.translate(None, b" \t\r\n")
            self.expect = "value_or_close" if token.startswith(b"[") else "key_or_close"
        elif kind in ("s", "n"):
            self.expect = "after"
        else:
            raise _NotAnObject

    def _close(self, token: bytes) -> None:
        closers = token.translate(None, b" \t\r\n")
        depth = len(self.stack) - len(closers)
        if depth < 0 or closers != bytes(self.stack[depth:][::-1]).translate(_CLOSER):
            raise _NotAnObject
        del self.stack[depth:]
        self.expect = "after"


def _is_id_key(token: bytes) -> bool:
    if b"\\" not in token:
        return token == b'"id"'
    return bool(_decode_string(token) == "id")


def _decode_string(token: bytes) -> str:
    value = json.loads(token.decode("utf-8", "surrogateescape"))
    assert isinstance(value, str)
    return value
