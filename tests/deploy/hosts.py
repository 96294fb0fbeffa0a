"""What the deployment tests do on the host's side: repositories handed to the
container's user, and the host's own ``sloopctl`` (this checkout's venv) run as
that user, since the socket directory is 0700 and ``sloopctl`` refuses a socket
directory another uid owns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support import unprivileged
from tests.support.gitrepo import git

# The image's fixed uid/gid (deploy/container/Containerfile).
SLOOP_UID = 10001
EXAMPLE_AGENT = '[agent]\ncommand = ["python3", "-m", "sloopd.examples.agent"]\n'
T = TypeVar("T")


def short_dir(prefix: str) -> Path:
    # /tmp, not pytest's tmp_path: the socket path must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    root.chmod(0o755)  # the container's uid walks through it to its repository and socket
    return root


def make_repository(root: Path, files: dict[str, str], uid: int, name: str = "repo") -> Path:
    """A git repository with ``files`` committed on main, owned by ``uid``."""
    repo = root / name
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "init")
    hand_over(repo, uid)
    return repo


def hand_over(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)
    for folder, dirs, names in os.walk(path):
        for name in [*dirs, *names]:
            os.lchown(os.path.join(folder, name), uid, uid)


def socket_dir(root: Path, uid: int) -> Path:
    """The socket directory to bind-mount: 0700 and the daemon's, as sloopctl demands."""
    sockets = root / "sockets"
    sockets.mkdir(mode=0o700)
    os.chown(sockets, uid, uid)
    return sockets


def host_git(repo: Path, *args: str) -> str:
    # The repository belongs to the container's uid: git refuses it to root otherwise.
    return git(repo, "-c", "safe.directory=*", *args)


def host_sloopctl(
    socket: Path, *args: str, uid: int = SLOOP_UID, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """This checkout's ``sloopctl`` run as ``uid``, its interpreter made reachable (it may
    live under root's 0700 home) in a private mount namespace."""
    home = socket.parent / "home"
    if not home.exists():
        home.mkdir()
        os.chown(home, uid, uid)
    prefix = unprivileged.prefix(unprivileged.interpreter_paths(), uid=uid, gid=uid)
    sloopctl = Path(sys.executable).parent / "sloopctl"
    argv = [*prefix, "env", f"HOME={home}", str(sloopctl), "--socket", str(socket), *args]
    return subprocess.run(
        argv, cwd=cwd or home, capture_output=True, text=True, timeout=60, check=False
    )


def envelope(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The reply envelope of a ``sloopctl --json`` command."""
    try:
        loaded: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no envelope: {done.stdout!r} {done.stderr!r}") from None
    return loaded


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    """Poll ``probe`` until it answers; the deadline only ends a hung wait (no bound is
    asserted on how long anything took)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.3)


def doctor_checks(socket: Path) -> dict[str, str]:
    done = host_sloopctl(socket, "--json", "doctor")
    return {check["name"]: check["status"] for check in envelope(done)["checks"]}
