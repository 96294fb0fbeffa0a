"""``diff``: what a run's branch changed against its base, bounded, read-only.

The two commits come from the run's own records, never from a ref anyone can move:
the base is pinned at ``refs/sloop/runs/<run>/base`` when the run starts, and the
head is the newest commit a stage execution recorded (its stage row's ``commit``).
A run whose merge moved main is diffed from main as it was just before the merge
(the merge intent's ``from``), so the answer is exactly what main received, a
``sync`` stage's merge of a newer main included.

Git runs with a deadline and a bound on what it may print (``sloopd.git.runner``),
so a huge or slow diff costs the daemon a bounded time and memory, never its loop.
External diff drivers and textconv filters are off: the branch is an agent's work,
and its ``.gitattributes`` must not choose a program for the daemon to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from sloopd.core.state import Daemon
from sloopd.flows import walk
from sloopd.flows.stagelog import flow_of, replay_run
from sloopd.git import runner
from sloopd.queue import refs

# The diff text a reply carries unless the client asks for another bound (at most 4 MiB).
DEFAULT_BYTES: Final = 256 * 1024
# How long one git call of a diff may take before the answer gives up on it.
GIT_TIMEOUT_S: Final = 20.0
# At most this many files are listed; ``files_truncated`` says when there were more.
MAX_FILES: Final = 1000
_NUMSTAT_LIMIT: Final = 1024 * 1024
# Options that make the text the same whatever the operator's git configuration says,
# and that let no repository setting pick a program to run.
_DIFF_OPTIONS: Final = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--find-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
)


async def run_diff(daemon: Daemon, ref: str, max_bytes: int | None) -> dict[str, Any]:
    """The ``diff`` verb's data for a run reference; ``not_found`` when it names no run."""
    store = daemon.require_store()
    repo = daemon.layout.repo
    run_id = refs.run_id(store, repo, ref)
    record = store.run_by_id(run_id)
    assert record is not None  # run_id resolved it
    limit = max_bytes or DEFAULT_BYTES
    state = replay_run(store, run_id, flow_of(record))
    pinned = await _rev(repo, f"refs/sloop/runs/{run_id}/base")
    base, base_source = _base_of(state, pinned)
    head = next((e.commit for e in reversed(state.executions) if e.commit), None) or base
    answer: dict[str, Any] = {
        "run": run_id,
        "alias": record.alias,
        "branch": record.branch,
        "base": base,
        "base_source": base_source,
        "head": head,
        "files": [],
        "files_truncated": False,
        "text": "",
        "bytes": 0,
        "max_bytes": limit,
        "truncated": False,
        "problem": None,
    }
    if base is None or head is None:
        answer["problem"] = f"{run_id} has no recorded base commit yet"
        return answer
    try:
        answer.update(await _summary(repo, base, head))
        answer.update(await _text(repo, base, head, limit))
    except (runner.TimedOut, _GitFailed) as exc:
        # Not a protocol error: the run exists, its diff could not be produced now.
        answer.update(files=[], files_truncated=False, text="", bytes=0, truncated=False)
        answer["problem"] = f"git could not diff {base[:12]}..{head[:12]}: {exc}"
    return answer


def _base_of(state: walk.Walk, pinned: str | None) -> tuple[str | None, str]:
    for execution in reversed(state.executions):
        intent = execution.merge_intent
        if execution.passed and intent is not None and isinstance(intent.get("from"), str):
            return intent["from"], "main_before_merge"
    return pinned, "run_base"


class _GitFailed(Exception):
    """Git exited non-zero: a commit gone (a pruned object), a broken repository."""


# A read must not take the index lock a run may need.
_READ_ONLY: Final = {"GIT_OPTIONAL_LOCKS": "0"}


async def _git(repo: Path, *args: str, limit: int) -> runner.Finished:
    env = runner.environment(_READ_ONLY)
    argv = runner.git(repo, *args)
    done = await runner.run(argv, timeout=GIT_TIMEOUT_S, env=env, stdout_limit=limit)
    if done.returncode != 0 and not done.truncated:
        raise _GitFailed(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return done


async def _rev(repo: Path, ref: str) -> str | None:
    try:
        done = await _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", limit=4096)
    except (_GitFailed, runner.TimedOut):
        return None
    return done.stdout.strip() or None


async def _summary(repo: Path, base: str, head: str) -> dict[str, Any]:
    """One ``{"path", "old_path", "added", "deleted", "binary"}`` per changed file."""
    done = await _git(
        repo, "diff", "--numstat", "-z", *_DIFF_OPTIONS, base, head, "--", limit=_NUMSTAT_LIMIT
    )
    files = parse_numstat(done.stdout)
    # A cut listing ends in a partial entry: drop it, and say the list is incomplete.
    if done.truncated and files:
        files.pop()
    return {
        "files": files[:MAX_FILES],
        "files_truncated": done.truncated or len(files) > MAX_FILES,
    }


def parse_numstat(output: str) -> list[dict[str, Any]]:
    """Read ``git diff --numstat -z``: ``A<TAB>D<TAB>PATH<NUL>`` per file, and for a
    rename ``A<TAB>D<TAB><NUL>OLD<NUL>NEW<NUL>``; ``-`` counts mark a binary file."""
    fields = output.split("\0")
    files: list[dict[str, Any]] = []
    index = 0
    while index < len(fields) and fields[index]:
        added, _, rest = fields[index].partition("\t")
        deleted, _, path = rest.partition("\t")
        old_path = None
        if not path:  # a rename or copy: the two paths follow as fields of their own
            if index + 2 >= len(fields):
                break
            old_path, path = fields[index + 1], fields[index + 2]
            index += 2
        index += 1
        binary = added == "-" and deleted == "-"
        files.append(
            {
                "path": path,
                "old_path": old_path,
                "added": None if binary else _count(added),
                "deleted": None if binary else _count(deleted),
                "binary": binary,
            }
        )
    return files


def _count(text: str) -> int | None:
    return int(text) if text.isdigit() else None


async def _text(repo: Path, base: str, head: str, limit: int) -> dict[str, Any]:
    """The unified diff, at most ``limit`` bytes of it, cut at a line's end."""
    done = await _git(repo, "diff", *_DIFF_OPTIONS, base, head, "--", limit=limit)
    text = done.stdout
    if done.truncated:
        cut = text.rfind("\n")
        text = text[: cut + 1] if cut >= 0 else ""
    return {"text": text, "bytes": len(text.encode()), "truncated": done.truncated}
