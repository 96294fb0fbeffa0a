"""What earlier runs left outside the store, so that new runs are numbered past it.

The store numbers runs (``R<n>``) and each ticket's attempts (alias
``<ticket>#<n>``, branch ``<prefix><ticket>/<n>``) from its own rows.  A store
restored from a backup taken before some runs has forgotten them, but git and the
state directory have not: their branches, their ``refs/sloop/runs/<run>/`` refs,
their checkouts and run folders stay (an unmerged run's branch stays on purpose).
A number the store hands out again would collide with them: the branch exists,
the checkout is not empty, or — worse, when the folder happens to be empty — a new
run inherits an old run's ``HOME`` and execution refs.

So at start, before the scheduler claims anything, the daemon surveys what is
there: run ids seen outside the store raise the store's run ordinal past them (a
durable write: ids are never reused), and the highest attempt on each branch
stem becomes a floor the scheduler numbers that ticket's next attempt past.
Nothing old is renamed or deleted: it stays where an operator can inspect it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sloopd.core.paths import Layout
from sloopd.git import runner
from sloopd.store import Store

log = logging.getLogger(__name__)

SURVEY_TIMEOUT_S: Final = 120.0
# Run ids as the store makes them ('R' || ordinal); nothing else in those folders
# is a run's (trash/, merge.git, a person's own files).
_RUN_ID: Final = re.compile(r"R([1-9][0-9]{0,17})")
# A branch whose last component is a number may be an attempt's: <stem>/<attempt>.
_ATTEMPT_BRANCH: Final = re.compile(r"(.+)/([1-9][0-9]{0,17})")
_RUN_REFS: Final = "refs/sloop/runs/"
_BRANCHES: Final = "refs/heads/"
# Where a run's id names a folder of the state directory (operator guide: "The state
# directory"); worktrees/ is a 0.4 daemon's.
_RUN_FOLDERS: Final = ("checkouts", "runs", "worktrees")


@dataclass(frozen=True, slots=True)
class Leftovers:
    """The highest run ordinal and attempts found outside the store."""

    # The highest n of an R<n> with refs or folders of its own; 0 when none.
    highest_run: int = 0
    # Branch stem (``sloop/fix-login``) -> the highest attempt a branch of it has.
    attempts: Mapping[str, int] = field(default_factory=dict)
    # One example of each, for the operator's log line.
    example_run: str | None = None

    def attempt_floor(self, stem: str) -> int:
        """The attempt a ticket's next one must exceed, as far as branches tell."""
        return self.attempts.get(stem, 0)


def survey(layout: Layout) -> Leftovers:
    """What the repository's refs and the state directory hold of runs (blocking: start-up).

    One ``git for-each-ref`` and three directory listings; a git that fails leaves
    the branches out (the run's own check still refuses a branch that exists).
    """
    names = [*_folder_run_ids(layout.state_dir)]
    attempts: dict[str, int] = {}
    try:
        done = runner.run_blocking(
            runner.git(layout.repo, "for-each-ref", "--format=%(refname)", _BRANCHES, _RUN_REFS),
            timeout=SURVEY_TIMEOUT_S,
        )
    except (OSError, runner.TimedOut) as exc:
        log.warning("could not list the repository's branches at start: %s", exc)
        done = None
    if done is not None and done.returncode == 0:
        for ref in done.stdout.splitlines():
            if ref.startswith(_RUN_REFS):
                names.append(ref[len(_RUN_REFS) :].split("/", 1)[0])
            elif ref.startswith(_BRANCHES):
                _note_attempt(attempts, ref[len(_BRANCHES) :])
    highest, example = _highest_run(names)
    return Leftovers(highest, attempts, example)


def _folder_run_ids(state_dir: Path) -> Iterable[str]:
    for folder in _RUN_FOLDERS:
        try:
            yield from (entry.name for entry in (state_dir / folder).iterdir())
        except OSError:  # absent on a new state directory, or not a folder
            continue


def _note_attempt(attempts: dict[str, int], branch: str) -> None:
    match = _ATTEMPT_BRANCH.fullmatch(branch)
    if match is not None:
        stem, attempt = match[1], int(match[2])
        attempts[stem] = max(attempts.get(stem, 0), attempt)


def _highest_run(names: Iterable[str]) -> tuple[int, str | None]:
    highest, example = 0, None
    for name in names:
        match = _RUN_ID.fullmatch(name)
        if match is not None and int(match[1]) > highest:
            highest, example = int(match[1]), name
    return highest, example


def number_past(store: Store, leftovers: Leftovers) -> None:
    """Raise the store's run ordinal past every run id found outside it, and say so.

    A store that already numbers past them (the usual case: it made them) is left
    as it is; one restored from an older backup learns the ids it forgot.
    """
    known = int(store.scalar("runs_ordinal_next") or 1) - 1
    if leftovers.highest_run <= known:
        return
    with store.writer.transaction() as tx:
        tx.run("runs_ordinal_at_least", {"floor": leftovers.highest_run})
    log.warning(
        "the store numbers runs up to R%d, but %s left refs or folders behind (a store "
        "restored from an older backup?): new runs are numbered from R%d, and what those "
        "runs left stays for inspection",
        known,
        leftovers.example_run,
        leftovers.highest_run + 1,
    )
