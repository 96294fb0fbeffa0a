"""Linux's limits on what ``execve`` takes, checked before a child is started.

Past them ``execve`` fails with ``E2BIG`` ("Argument list too long"), which names
neither the argument nor the limit; checking first lets the caller say both.

* ``MAX_ARG_STRLEN``: one argument or environment entry, its terminating NUL
  included: 32 pages, 131072 bytes, whatever the stack limit.
* ``ARG_MAX``: every argument and entry together, NULs and pointers included;
  a quarter of the stack limit (``sysconf(_SC_ARG_MAX)``), 2 MiB with the usual 8 MiB.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

MAX_ARG_STRLEN = 32 * 4096
POINTER_BYTES = 8
_FALLBACK_ARG_MAX = 2 << 20  # when sysconf cannot say


def argument_bytes(value: str) -> int:
    """What one argument costs against ``MAX_ARG_STRLEN``: its bytes and its NUL."""
    return len(os.fsencode(value)) + 1


def argv_bytes(argv: Iterable[str], env: Mapping[str, str] | None = None) -> int:
    """What ``argv`` and ``env`` cost against ``ARG_MAX``: strings, NULs and pointers."""
    total = sum(argument_bytes(part) + POINTER_BYTES for part in argv)
    for key, value in (env or {}).items():
        total += argument_bytes(f"{key}={value}") + POINTER_BYTES
    return total


def arg_max() -> int:
    try:
        found = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        return _FALLBACK_ARG_MAX
    return found if found > 0 else _FALLBACK_ARG_MAX


def prompt_budget() -> int:
    """The share of ``ARG_MAX`` a prompt in argv may take: half, the rest kept for the
    environment and a sandbox's own arguments (a few kilobytes in practice)."""
    return arg_max() // 2


def problem(argv: list[str], env: Mapping[str, str]) -> str | None:
    """Why ``execve(argv, env)`` would fail with ``E2BIG``, or None."""
    for index, part in enumerate(argv):
        size = argument_bytes(part)
        if size > MAX_ARG_STRLEN:
            return (
                f"argument {index} is {size} bytes with its NUL, over Linux's limit of "
                f"{MAX_ARG_STRLEN} for one argument (MAX_ARG_STRLEN)"
            )
    for key, value in env.items():
        size = argument_bytes(f"{key}={value}")
        if size > MAX_ARG_STRLEN:
            return (
                f"the environment variable {key} is {size} bytes, over Linux's limit of "
                f"{MAX_ARG_STRLEN} for one entry (MAX_ARG_STRLEN)"
            )
    total, limit = argv_bytes(argv, env), arg_max()
    if total > limit:
        return (
            f"its arguments and environment take {total} bytes, over this host's "
            f"limit of {limit} (ARG_MAX)"
        )
    return None
