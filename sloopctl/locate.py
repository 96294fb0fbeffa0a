"""Where to send a request: the operator socket, or the run's worker socket.

Order for the operator socket: ``--socket``, ``$SLOOP_OPERATOR_SOCKET``, the
``daemon.json`` a running daemon left in the repository's state directory, and
finally the path a daemon would use by default (``sloopd.wire.api``'s rule, so both
sides agree without talking).  Inside a run the daemon hands the agent
``SLOOP_SOCKET`` and its token (``SLOOP_TOKEN``, and the file ``SLOOP_TOKEN_FILE``
names; with ``agent.token_env = false`` only the file) and no operator socket, so
the worker verbs go there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from sloopd.wire import api

OPERATOR_SOCKET_ENV: Final = "SLOOP_OPERATOR_SOCKET"
WORKER_SOCKET_ENV: Final = "SLOOP_SOCKET"
WORKER_TOKEN_ENV: Final = "SLOOP_TOKEN"
WORKER_TOKEN_FILE_ENV: Final = "SLOOP_TOKEN_FILE"
# A token is 43 characters; a file much larger than that is not one.
_TOKEN_FILE_MAX: Final = 4096
# Where the daemon's Prometheus endpoint is, for ``doctor``'s metrics check.  Here
# with the other endpoints' variables, so the command (``sloopctl.doctor``) and its
# check (``sloopctl.diagnosis.metrics``) share it without importing each other.
METRICS_URL_ENV: Final = "SLOOP_METRICS_URL"
STATE_DIR_NAME: Final = "sloop"


class LocateError(Exception):
    """No socket can be named: the invocation lacks what it needs (a usage error)."""


@dataclass(frozen=True, slots=True)
class Repo:
    toplevel: Path
    common_dir: Path

    @property
    def state_dir(self) -> Path:
        return self.common_dir / STATE_DIR_NAME


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A socket to talk to, the token to send on it, and how it was found."""

    socket: Path
    token: str | None
    source: str


def find_repo(cwd: Path | None = None) -> Repo | None:
    """The git repository containing ``cwd``; None outside one (or without git)."""
    where = Path.cwd() if cwd is None else cwd
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--git-common-dir"],
            cwd=where,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 2:
        return None
    # --git-common-dir is relative to cwd when git finds it so (e.g. "../.git");
    # --path-format=absolute would fix that but needs git >= 2.31.
    common = Path(os.path.normpath(where / lines[1]))
    return Repo(toplevel=Path(lines[0]), common_dir=common)


def _socket_from_daemon_info(repo: Repo) -> Path | None:
    info = repo.state_dir / api.DAEMON_INFO_NAME
    try:
        data = orjson.loads(info.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    socket = data.get("socket") if isinstance(data, dict) else None
    return Path(socket) if isinstance(socket, str) and socket else None


def operator_endpoint(
    option: str | None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    socket_dir: str | None = None,
) -> Endpoint:
    """The operator socket for this invocation; LocateError when none can be named.

    ``socket_dir`` stands in for the default socket directory, as
    ``sloopd serve --socket-dir`` would.
    """
    found = _operator_endpoint(option, os.environ if environ is None else environ, cwd, socket_dir)
    # Whoever owns the directory could be serving a fake daemon there.
    reason = api.untrusted_socket_path(found.socket)
    if reason is not None:
        raise LocateError(f"refusing to talk to {found.socket}: {reason}")
    return found


def _operator_endpoint(
    option: str | None, env: Mapping[str, str], cwd: Path | None, socket_dir: str | None
) -> Endpoint:
    if option:
        return Endpoint(Path(option), None, "--socket")
    if env.get(OPERATOR_SOCKET_ENV):
        return Endpoint(Path(env[OPERATOR_SOCKET_ENV]), None, OPERATOR_SOCKET_ENV)
    repo = find_repo(cwd)
    if repo is None:
        raise LocateError(
            "not inside a git repository, so the daemon's socket is unknown; "
            f"run sloopctl in the repository, or pass --socket or set {OPERATOR_SOCKET_ENV}"
        )
    recorded = _socket_from_daemon_info(repo)
    if recorded is not None:
        return Endpoint(recorded, None, str(repo.state_dir / api.DAEMON_INFO_NAME))
    directory = Path(socket_dir) if socket_dir else api.default_socket_dir(repo.toplevel, env)
    default = directory / api.OPERATOR_SOCKET_NAME
    return Endpoint(default, None, "default")


def worker_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The run's token: ``SLOOP_TOKEN``, else the file ``SLOOP_TOKEN_FILE`` names."""
    env = os.environ if environ is None else environ
    token = env.get(WORKER_TOKEN_ENV)
    if token:
        return token
    path = env.get(WORKER_TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            read = f.read(_TOKEN_FILE_MAX + 1)
    except OSError:
        return None
    text = read.decode("ascii", errors="replace").strip()
    return text if text and len(read) <= _TOKEN_FILE_MAX else None


def in_run(environ: Mapping[str, str] | None = None) -> bool:
    """True inside a run: the daemon set the worker socket and a token for this process."""
    env = os.environ if environ is None else environ
    return bool(env.get(WORKER_SOCKET_ENV)) and worker_token(env) is not None


def worker_endpoint(option: str | None, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The run's worker socket and token; ``--socket`` may only override the path."""
    env = os.environ if environ is None else environ
    token = worker_token(env)
    if not env.get(WORKER_SOCKET_ENV) or token is None:
        raise LocateError(
            f"this command is for agents inside a run: {WORKER_SOCKET_ENV} and "
            f"{WORKER_TOKEN_ENV} (or {WORKER_TOKEN_FILE_ENV}) must be set (the daemon "
            "sets them for its children)"
        )
    socket = option or env[WORKER_SOCKET_ENV]
    return Endpoint(Path(socket), token, "--socket" if option else "worker")


def show_endpoint(option: str | None, environ: Mapping[str, str] | None = None) -> Endpoint:
    """``show`` goes to the worker socket inside a run unless --socket names one."""
    env = os.environ if environ is None else environ
    if not option and in_run(env):
        return worker_endpoint(None, env)
    return operator_endpoint(option, env)
