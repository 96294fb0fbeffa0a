"""How the remote protocol's messages (``sloopd.remote.messages``) travel: one encoder,
one strict decoder.

A message is a frozen dataclass registered under a kind (``register``).  It is
encoded as a JSON object, ``{"kind": ..., <every field>}``, nested messages the
same way, tuples as arrays and bytes as base64 text.  ``decode`` reads it back by
the dataclass's own field types and refuses, with ``ProtocolError``, anything it
was not written as: a kind it does not know or did not expect, a key it does not
know, a key missing, a value of the wrong type.  A message from another version of
Sloop is refused whole, never half-read.  This module and ``messages`` are the
schema: nothing else in ``sloopd.remote`` reads a message by key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

KIND = "kind"
_BY_KIND: dict[str, type[Any]] = {}
_KIND_OF: dict[type[Any], str] = {}


class ProtocolError(ValueError):
    """A message that does not read as the schema says; the text says where and why.

    ``kind`` and ``ident`` are the message's, when it said them (the reader may end
    the one child an unreadable report was about)."""

    def __init__(self, text: str, kind: str | None = None, ident: str | None = None) -> None:
        super().__init__(text)
        self.kind = kind
        self.ident = ident


def register(kind: str) -> Callable[[type[T]], type[T]]:
    """Make a frozen dataclass a message of ``kind``."""

    def add(cls: type[T]) -> type[T]:
        assert dataclasses.is_dataclass(cls), cls
        assert kind not in _BY_KIND and cls not in _KIND_OF, kind
        _BY_KIND[kind] = cls
        _KIND_OF[cls] = kind
        return cls

    return add


def kind_of(cls: type[Any]) -> str:
    return _KIND_OF[cls]


# --- encoding ------------------------------------------------------------------------


def encode(message: object) -> bytes:
    """``message`` as one line of JSON (no newline in it)."""
    return orjson.dumps(plain(message))


def plain(value: Any) -> Any:
    """``value`` as JSON-able plain values: messages as objects with their kind."""
    cls = type(value)
    if cls in _KIND_OF:
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {KIND: _KIND_OF[cls], **fields}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if value is None or isinstance(value, str | int | float):
        return value
    raise TypeError(f"{cls.__name__} is not part of the remote protocol")


# --- decoding ------------------------------------------------------------------------


def decode(raw: bytes | str, expected: type[T]) -> T:
    """The message of class ``expected`` in ``raw``; ``ProtocolError`` for anything else."""
    value = decode_any(raw, expected)
    assert isinstance(value, expected)
    return value


def decode_any(raw: bytes | str, expected: Any) -> Any:
    """The message in ``raw`` of the type (a class or a union of classes) ``expected``."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    kind = ident = None
    if isinstance(data, dict):
        kind = data.get(KIND) if isinstance(data.get(KIND), str) else None
        ident = data.get("id") if isinstance(data.get("id"), str) else None
    try:
        return of_plain(data, expected)
    except ProtocolError as exc:
        raise ProtocolError(f"a message Sloop cannot read: {exc}", kind, ident) from None


def of_plain(data: Any, hint: Any, where: str = "the message") -> Any:
    """The value of type ``hint`` that ``plain`` made ``data`` from."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return _union(data, typing.get_args(hint), where)
    if hint is type(None):
        if data is not None:
            raise ProtocolError(f"{where} is {_name(data)}, not null")
        return None
    if hint in _KIND_OF:
        return _message(data, (hint,), where)
    if hint is bytes:
        if not isinstance(data, str):
            raise ProtocolError(f"{where} is {_name(data)}, not base64 text")
        try:
            return base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise ProtocolError(f"{where} is not base64: {exc}") from None
    if hint in (str, int, float, bool):
        return _scalar(data, hint, where)
    if origin is tuple:
        return _tuple(data, typing.get_args(hint), where)
    if origin in (Mapping, dict):
        _key, item = typing.get_args(hint)
        if not isinstance(data, dict):
            raise ProtocolError(f"{where} is {_name(data)}, not an object")
        return {key: of_plain(value, item, f"{where}[{key!r}]") for key, value in data.items()}
    raise TypeError(f"{hint!r} is not part of the remote protocol")  # a bug in the schema


def _union(data: Any, options: tuple[Any, ...], where: str) -> Any:
    if data is None and type(None) in options:
        return None
    messages = tuple(option for option in options if option in _KIND_OF)
    if messages:
        return _message(data, messages, where)
    problems = []
    for option in options:
        try:
            return of_plain(data, option, where)
        except ProtocolError as exc:
            problems.append(str(exc))
    raise ProtocolError("; or ".join(problems))


def _message(data: Any, allowed: tuple[type[Any], ...], where: str) -> Any:
    if not isinstance(data, dict):
        raise ProtocolError(f"{where} is {_name(data)}, not a message")
    kind = data.get(KIND)
    cls = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"{where} is of unknown kind {kind!r}")
    if cls not in allowed:
        wanted = ", ".join(_KIND_OF[option] for option in allowed)
        raise ProtocolError(f"{where} is a {kind!r} message, not one of: {wanted}")
    hints = _fields(cls)
    unknown = sorted(set(data) - set(hints) - {KIND})
    if unknown:
        raise ProtocolError(f"{where} ({kind}) has unknown keys {unknown}")
    missing = sorted(set(hints) - set(data))
    if missing:
        raise ProtocolError(f"{where} ({kind}) lacks the keys {missing}")
    values = {name: of_plain(data[name], hint, f"{kind}.{name}") for name, hint in hints.items()}
    return cls(**values)


_FIELDS: dict[type[Any], dict[str, Any]] = {}


def _fields(cls: type[Any]) -> dict[str, Any]:
    """A message's fields and their types (resolved once: the schema is fixed)."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _FIELDS[cls] = {field.name: hints[field.name] for field in dataclasses.fields(cls)}
    return found


def _scalar(data: Any, hint: type[Any], where: str) -> Any:
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if type(data) is not hint:
        raise ProtocolError(f"{where} is {_name(data)}, not {hint.__name__}")
    return data


def _tuple(data: Any, args: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    if not isinstance(data, list):
        raise ProtocolError(f"{where} is {_name(data)}, not an array")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(of_plain(item, args[0], f"{where}[{n}]") for n, item in enumerate(data))
    if len(data) != len(args):
        raise ProtocolError(f"{where} has {len(data)} items, not {len(args)}")
    pairs = enumerate(zip(data, args, strict=True))
    return tuple(of_plain(item, arg, f"{where}[{n}]") for n, (item, arg) in pairs)


def _name(data: Any) -> str:
    return "null" if data is None else type(data).__name__
