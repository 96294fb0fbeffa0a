"""Linear or not: how a piece of work grows with its input, measured so load cannot lie.

A test that asserts "this took under 250 ms" fails on a busy host (668 ms for one
line while other work ran, issue 23), and passes on a fast one whatever the work
does.  What such a test means is "this does not blow up with its input", and that
can be measured without trusting any absolute reading of the clock:

- the CPU time of this thread (``time.thread_time``), not wall time: time spent
  waiting for a core another process holds is not counted at all;
- the fastest of several tries, the two sizes alternating: load only ever adds to
  a try, and a slow spell falls on both sizes alike;
- the ratio between an input and one ``factor`` times longer: about ``factor`` for
  linear work, ``factor ** 2`` for quadratic work, on a slow machine as on a fast
  one.  ``LINEAR_BOUND`` splits the two with a margin of two either way.

The same goes for "the daemon answered within a second while the test loaded it":
``main_thread_cpu_seconds`` of the daemon across one request counts the work that held
the answer, and not the time the daemon waited for a core.

Absolute figures belong in ``benchmarks/``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

Input = TypeVar("Input")

FACTOR: Final = 4
# Linear work grows by FACTOR, quadratic by FACTOR**2: the geometric middle, a factor
# of two from each, is where "linear" ends.
LINEAR_BOUND: Final = FACTOR * 2
TRIES: Final = 5
# Below a millisecond of CPU on the larger input the ratio is within the clock's grain,
# and nothing that small is a blow-up: the quadratic regexes issue 13 caught took
# seconds of CPU on one line.  Load does not add CPU time, so it cannot hide one.
NEGLIGIBLE_S: Final = 0.001


def cpu_seconds(work: Callable[[], object]) -> float:
    """The CPU time this thread spent in ``work()``."""
    started = time.thread_time()
    work()
    return time.thread_time() - started


def main_thread_cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid``'s main thread has used so far.

    The daemon's event loop runs there, so across one request it is the work that
    held the answer: a callback that blocks the loop for a second of work shows as
    that second, while the time a busy host kept the daemon off a core does not
    show at all (nor do the daemon's helper threads, which hold no answer).
    """
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fastest(work: Callable[[], object], tries: int = TRIES) -> float:
    return min(cpu_seconds(work) for _ in range(tries))


@dataclass(frozen=True)
class Growth:
    small_s: float  # the fastest try on the input of ``size``
    large_s: float  # ... and on the one ``factor`` times longer

    @property
    def ratio(self) -> float:
        return self.large_s / max(self.small_s, 1e-9)

    @property
    def linear(self) -> bool:
        """Grows like a linear scan, or too little to tell from the clock's grain."""
        return self.large_s < NEGLIGIBLE_S or self.ratio < LINEAR_BOUND

    def __str__(self) -> str:
        return (
            f"{self.small_s * 1e3:.2f} ms of CPU, then {self.large_s * 1e3:.2f} ms on "
            f"an input {FACTOR} times longer ({self.ratio:.1f}x; linear is about {FACTOR}x)"
        )


def growth(
    make: Callable[[int], Input],
    work: Callable[[Input], object],
    size: int,
    *,
    tries: int = TRIES,
) -> Growth:
    """How ``work`` grows from ``make(size)`` to ``make(size * FACTOR)``: the fastest
    tries of each, taken in turn.  Inputs are made before anything is timed."""
    small, large = make(size), make(size * FACTOR)
    best_small = best_large = math.inf
    for _ in range(tries):
        best_small = min(best_small, cpu_seconds(lambda: work(small)))
        best_large = min(best_large, cpu_seconds(lambda: work(large)))
    return Growth(best_small, best_large)
