"""Handing freed heap back to the operating system after a flood of output.

A child that prints 100 MB makes the daemon allocate and free that much in
short-lived strings and batches.  CPython's allocator and glibc's malloc keep
the freed memory in their arenas, so the resident set stays near its peak long
after the flood (measured: 36 MiB idle, ~160 MiB for good after one agent's
100 MB).  ``malloc_trim(0)`` returns glibc's free pages at once.  Elsewhere
(musl, macOS) it is absent and this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    # The process's own symbols (libc included): no ldconfig subprocess to find it.
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_free_heap() -> bool:
    """Give free heap back to the OS; whether malloc_trim ran (a few ms at most)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        trim(0)
    except OSError:  # pragma: no cover - a libc without a working malloc_trim
        log.debug("malloc_trim failed", exc_info=True)
        return False
    return True
