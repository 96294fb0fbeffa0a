"""Whether a program resolves inside the sandbox as it does outside it.

A program run by name from ``PATH`` may sit in a folder the sandbox hides (an install
under the service user's home: ``npm -g --prefix ~/.local``, nvm, ``~/.cache``), and so
may the interpreter its ``#!`` line names.  ``unseen`` tells, from the same rules the
launcher applies (``sandbox.hidden_by_default`` and the operator's mounts at their own
paths), whether the sandbox would find it, and the words that say what to do;
``not_found`` reads the programs a shell or ``env`` said it could not find.  Plain
values in and out: which configured agent CLIs to check, and when, is
``sloopd.core.cli_sight``'s.  Only reads: ``which``, ``realpath``, a script's first line.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sloopd.proc import sandbox

# What a shell or env prints for a program it cannot find: dash ("sh: 1: exec: claude:
# not found"), bash ("bash: line 1: claude: command not found"), coreutils' env
# ("/usr/bin/env: 'node': No such file or directory").
_NOT_FOUND: Final = re.compile(
    r"(?:^|:\s)([\w.+-]{1,100}): (?:command )?not found\s*$"
    r"|\benv: ['\"\u2018]?([\w.+-]{1,100})['\"\u2019]?: No such file or directory"
)
_SHEBANG_BYTES: Final = 256


@dataclass(frozen=True, slots=True)
class Unseen:
    """A program the sandbox would not find, and the words that say what to do."""

    program: str
    path: str | None  # where the daemon's PATH finds it; None: nowhere
    problem: str

    def row(self, preset: str) -> dict[str, Any]:
        """``daemon.sandbox.clis``'s entry (docs/protocol.md)."""
        return {"preset": preset, "cli": self.program, "path": self.path, "problem": self.problem}


def unseen(
    program: str, path_env: str, mounts: Sequence[str], *, sandboxed: bool = True
) -> Unseen | None:
    """None when ``program`` resolves inside the sandbox as it does outside."""
    found = shutil.which(program, path=path_env)
    if found is None:
        return Unseen(
            program,
            None,
            f"{program} is not on the daemon's PATH, so the agent's shell cannot find it "
            "(exit 127): install it, or start sloopd with its folder on PATH (and, "
            "outside /usr and /opt, in agent.ro_mounts)",
        )
    if not sandboxed:
        return None
    shown = [Path(os.path.expanduser(m)) for m in mounts if m.startswith("/")]
    needed = [found, os.path.realpath(found), *_interpreter(found, path_env)]
    hidden = [p for p in dict.fromkeys(needed) if _hidden(p, shown)]
    if not hidden:
        return None
    real = os.path.realpath(found)
    where = found + (f" ({real})" if real != found else "")
    others = [p for p in hidden if p not in (found, real)]
    also = f", and its interpreter {', '.join(others)}" if others else ""
    folders = _mounts_for(hidden)
    entries = ", ".join(f'"{folder}"' for folder in folders)
    return Unseen(
        program,
        found,
        f"{program} is not visible in the sandbox: the daemon's PATH finds it at "
        f"{where}{also}, in a folder the sandbox hides (only /usr, /opt, /etc and the "
        "like are shown, and the daemon user's home is not); add "
        f"{entries} to agent.ro_mounts in sloop.toml (read-only, at the same path), "
        "or install the CLI under /usr/local or /opt",
    )


def not_found(line: str) -> list[str]:
    # Only the end of each chunk: one read may hold several lines.
    names: list[str] = []
    for part in line.splitlines()[-4:]:
        match = _NOT_FOUND.search(part[-400:])
        if match is not None:
            names.append(match.group(1) or match.group(2))
    return names


def _hidden(path: str, shown: Sequence[Path]) -> bool:
    if not sandbox.hidden_by_default(path):
        return False
    real = Path(os.path.realpath(path))
    return not any(real == m or m in real.parents for m in shown)


def _interpreter(program: str, path_env: str) -> list[str]:
    """The interpreter a script's ``#!`` line names, resolved as the kernel and env do."""
    try:
        with open(program, "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return []
    target: str | None = words[0]
    if os.path.basename(words[0]) == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        target = shutil.which(rest[0], path=path_env) if rest else None
    if target is None:
        return []
    return [target, os.path.realpath(target)]


def _mounts_for(hidden: Sequence[str]) -> list[str]:
    """The folder(s) to mount: the install prefix they share, unless that is a home.

    ``~/.local/bin/claude`` and ``~/.local/lib/node_modules/…`` share ``~/.local``;
    mounting the whole home (or ``/``) would show everything it holds, so then each
    folder is named instead.
    """
    folders = list(dict.fromkeys(os.path.dirname(os.path.realpath(p)) for p in hidden))
    folders = [*dict.fromkeys([*(os.path.dirname(p) for p in hidden), *folders])]
    common = os.path.commonpath(folders)
    homes = {os.path.realpath(os.path.expanduser("~")), "/"}
    if common not in homes and common.count("/") >= 2:
        return [common]
    return folders
