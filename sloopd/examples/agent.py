"""The bundled example agent: a stand-in for ``claude -p`` that needs no vendor.

Run by the daemon as an ``agent`` stage (``python3 -m sloopd.examples.agent``,
or by path), inside the run's worktree.  It reads the prompt file the daemon
wrote (``SLOOP_PROMPT_FILE``), takes the ticket's title from its first ``# ``
heading, writes ``notes/<ticket>.md`` and commits it (after a while, when the ticket
has a line "Take N seconds.").  Each ticket gets its own
file, so runs in parallel never conflict when ``sync`` brings ``main`` in.

It uses the standard library only, and asks nothing of the daemon: when the
worker socket is there (``SLOOP_SOCKET``/``SLOOP_TOKEN``) it leaves a note with
``sloopctl note``, and carries on when that does not work.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# Commits carry this identity through -c, never through the repository's config.
IDENTITY: Final = ("-c", "user.name=sloop-example", "-c", "user.email=example@sloop.invalid")
NOTE_TIMEOUT_S: Final = 5.0
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")
# A ticket may ask the agent to take its time ("Take 20 seconds." on a line of its
# own), so that a person following the README's tour has a run in flight to steer.
_TAKE: Final = re.compile(r"^take (\d{1,3}) seconds?\.?$", re.IGNORECASE | re.MULTILINE)
MAX_TAKE_S: Final = 600


class AgentError(Exception):
    """Something the agent cannot work around; the message says what."""


def title_of(prompt: str) -> str:
    """The prompt's first ``# `` heading: the daemon puts the ticket's title there."""
    for line in prompt.splitlines():
        if line.startswith("# ") and line[2:].strip():
            return line[2:].strip()
    return "untitled ticket"


def seconds_asked(prompt: str) -> int:
    """The seconds a "Take N seconds." line asks for (at most ``MAX_TAKE_S``), else 0."""
    found = _TAKE.search(prompt)
    return min(int(found.group(1)), MAX_TAKE_S) if found else 0


def take_time(seconds: int) -> None:
    """Work slowly, saying so each second: there is something to follow and to abort."""
    for elapsed in range(seconds):
        print(f"example agent: working, {elapsed} of {seconds} s", flush=True)
        time.sleep(1)


def note_path(ticket: str) -> Path:
    """``notes/<ticket>.md``, with the ticket made safe as a file name."""
    safe = _UNSAFE.sub("-", ticket).strip("-.") or "ticket"
    return Path("notes") / f"{safe}.md"


def write_note(worktree: Path, ticket: str, title: str, env: Mapping[str, str]) -> Path:
    """Create or extend the ticket's note; every execution adds one line, so there is
    always something to commit, even when a ``return_to`` edge runs the agent again."""
    relative = note_path(ticket)
    target = worktree / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    run = env.get("SLOOP_RUN", "R?")
    stage = env.get("SLOOP_STAGE", "implement")
    attempt = env.get("SLOOP_ATTEMPT", "1")
    text = target.read_text(encoding="utf-8") if target.exists() else f"# {title}\n\n"
    text += f"- {run}: stage '{stage}' execution {attempt} worked on {ticket}\n"
    target.write_text(text, encoding="utf-8")
    return relative


def git(worktree: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(worktree), *IDENTITY, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AgentError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def sloopctl_argv() -> list[str]:
    """How to reach sloopctl: this interpreter's module if it has it, else the PATH."""
    try:
        import sloopctl  # noqa: F401  (only probing that it is importable)
    except ImportError:
        found = shutil.which("sloopctl")
        return [found] if found else []
    return [sys.executable, "-m", "sloopctl"]


def leave_note(text: str, env: Mapping[str, str]) -> bool:
    """``sloopctl note TEXT`` on the worker socket; False (never an error) if it fails."""
    if not (env.get("SLOOP_SOCKET") and env.get("SLOOP_TOKEN")):
        return False
    argv = sloopctl_argv()
    if not argv:
        return False
    try:
        done = subprocess.run(
            [*argv, "note", text],
            capture_output=True,
            timeout=NOTE_TIMEOUT_S,
            check=False,
            env=dict(env),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def run(env: Mapping[str, str]) -> int:
    """The whole agent; returns its exit code."""
    prompt_file = env.get("SLOOP_PROMPT_FILE")
    if not prompt_file:
        raise AgentError("SLOOP_PROMPT_FILE is not set; run me as a Sloop agent stage")
    prompt = Path(prompt_file).read_text(encoding="utf-8")
    worktree = Path(env.get("SLOOP_WORKTREE") or os.getcwd())
    ticket = env.get("SLOOP_TICKET") or Path(prompt_file).stem
    title = title_of(prompt)
    print(f"example agent: ticket {ticket}: {title}", flush=True)
    print(f"example agent: working in {worktree}", flush=True)
    take_time(seconds_asked(prompt))
    relative = write_note(worktree, ticket, title, env)
    print(f"example agent: wrote {relative.as_posix()}", flush=True)
    git(worktree, "add", "--", relative.as_posix())
    git(worktree, "commit", "--quiet", "-m", f"{ticket}: {title}", "--", relative.as_posix())
    print(f"example agent: committed {git(worktree, 'rev-parse', '--short', 'HEAD')}", flush=True)
    if leave_note(f"example agent committed {relative.as_posix()}", env):
        print("example agent: left a note on the worker socket", flush=True)
    return 0


def main() -> int:
    try:
        return run(os.environ)
    except (AgentError, OSError) as exc:
        print(f"example agent: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
