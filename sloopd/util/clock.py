"""Wall-clock milliseconds, the unit of every ``*_ms`` field on the wire."""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
