"""The configuration's one error type, and the checks every section's values go through.

Each section of ``sloop.toml`` is read by the layer that owns it (``[agent]`` and
flows by ``sloopd.flows``, ``[[notify]]`` by ``sloopd.ops``, ``[pricing]`` and
``[[vendor.patterns]]`` by ``sloopd.vendor``, ``[repo]`` and ``[executor]`` by
``sloopd.core``), and each refuses with its own subclass of ``ConfigError``, so a
traceback says which section refused.  The loader (``sloopd.core.config``) catches
the one base and names the file once, instead of re-wrapping each type by hand.

The checks word a refusal the way operators have always read it, key first:
``'agent.max_log_lines' must be an integer of at least 1``.  A section passes its
own error type (``error=``) so its callers may still catch that type alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sloopd.util.sizes import parse_bytes


class ConfigError(Exception):
    """A sloop.toml that does not validate; the message names key and reason."""


Refusal = type[ConfigError]


def duration_ms(
    value: Any,
    key: str,
    read: Callable[[str], int],
    *,
    error: Refusal = ConfigError,
    like: str = "20m",
    kind_as_reason: bool = False,
) -> int:
    """Milliseconds of a duration an operator wrote, read by ``read``.

    ``read`` is ``sloopd.wire.api.parse_duration_ms``, the one grammar ``sloopctl``
    shares; it is handed in because this layer may not import the wire.  A value that
    is no string is refused as ``'key' must be …``, or, with ``kind_as_reason`` (how
    ``[repo]`` and ``[[notify]]`` have always worded it), as ``'key': must be …``.
    """
    if not isinstance(value, str):
        wanted = f'must be a duration string like "{like}"'
        raise error(f"'{key}': {wanted}" if kind_as_reason else f"'{key}' {wanted}")
    try:
        return read(value)
    except ValueError as exc:
        raise error(f"'{key}': {exc}") from exc


def size_bytes(value: Any, key: str, kind: str, *, error: Refusal = ConfigError) -> int:
    """Bytes of a size an operator wrote (``65536``, ``"64MiB"``); ``kind`` says what a
    value of another type should have been."""
    if not isinstance(value, int | str):
        raise error(f"'{key}': {kind}")
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise error(f"'{key}': {exc}") from exc


def bounded(
    amount: int,
    key: str,
    said: str,
    *,
    least: int | None = None,
    most: int | None = None,
    error: Refusal = ConfigError,
) -> int:
    """``amount`` when it lies in ``[least, most]``; else refused as ``'key' must be
    <said>`` (``said`` in the units the operator wrote: ``at least 1s``)."""
    if (least is not None and amount < least) or (most is not None and amount > most):
        raise error(f"'{key}' must be {said}")
    return amount


def count(value: Any, key: str, *, least: int = 1, error: Refusal = ConfigError) -> int:
    """An integer of at least ``least``; TOML's ``true`` is no integer here."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise error(f"'{key}' must be an integer of at least {least}")
    return value


def flag(value: Any, key: str, *, error: Refusal = ConfigError) -> bool:
    if not isinstance(value, bool):
        raise error(f"'{key}' must be true or false")
    return value


def choice(
    value: Any,
    key: str,
    allowed: Sequence[str],
    *,
    error: Refusal = ConfigError,
    show_value: bool = False,
) -> str:
    """One of ``allowed``; ``show_value`` adds what was written to the refusal."""
    if not isinstance(value, str) or value not in allowed:
        shown = f", not {value!r}" if show_value else ""
        raise error(f"'{key}' must be one of {' | '.join(allowed)}{shown}")
    return value


def text(value: Any, key: str, *, error: Refusal = ConfigError) -> str:
    """A string with something in it besides blanks."""
    if not isinstance(value, str) or not value.strip():
        raise error(f"'{key}' must be a non-empty string")
    return value
