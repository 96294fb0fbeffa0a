"""The facts every check reads: the probe of the operator socket, the repository,
the state directory, and the daemon's answers, gathered once by ``Doctor``."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sloopctl import locate
from sloopctl.client import Client, DaemonNotAnswering, DaemonNotRunning, ProtocolMismatch
from sloopctl.diagnosis.host import (
    GitProblem,
    Worktree,
    git,
    parse_worktrees,
    process_alive,
    read_daemon_info,
    read_proc,
)
from sloopctl.diagnosis.report import first_line
from sloopd.wire import api

PROBE_TIMEOUT_S: Final = 1.0  # the socket must answer `show` within this
FOLLOW_UP_TIMEOUT_S: Final = 5.0  # later questions (`show R<n>`) of a daemon that answered


@dataclass(frozen=True, slots=True)
class Options:
    socket: str | None = None
    state_dir: Path | None = None
    full: bool = False
    metrics_url: str | None = None


@dataclass(slots=True)
class Probe:
    """What asking the operator socket for the dashboard found."""

    endpoint: locate.Endpoint | None = None
    dashboard: dict[str, Any] | None = None
    problem: str | None = None
    fix: str | None = None
    elapsed_ms: int = 0
    midpoint_ms: int = 0  # this host's wall clock halfway through the call


def probe(endpoint: locate.Endpoint) -> Probe:
    """``show`` on the operator socket, answered within PROBE_TIMEOUT_S or not at all."""
    result = Probe(endpoint)
    sent_ns, started = time.time_ns(), time.monotonic()
    try:
        with Client(
            endpoint.socket, read_timeout=PROBE_TIMEOUT_S, connect_timeout=PROBE_TIMEOUT_S
        ) as client:
            reply = client.call("show", {})
    except DaemonNotRunning:
        result.problem = f"no socket at {endpoint.socket} (found via {endpoint.source})"
        return result
    except DaemonNotAnswering as exc:
        # doctor picks its own fix (restart a hung daemon, start a missing one).
        result.problem = exc.message.removesuffix(f"; {exc.fix}")
        if endpoint.socket.exists() and not os.access(endpoint.socket, os.R_OK | os.W_OK):
            result.problem += "; this user may not use it (the socket is owner-only)"
            result.fix = "run doctor as the daemon's user ('sudo -u <user> sloopctl doctor')"
        return result
    except ProtocolMismatch as exc:
        result.problem = exc.message
        result.fix = "upgrade sloopctl or sloopd so both speak the same protocol"
        return result
    result.elapsed_ms = round((time.monotonic() - started) * 1000)
    result.midpoint_ms = (sent_ns + time.time_ns()) // 2_000_000
    data = reply.data
    if not reply.ok:
        error = reply.error
        result.problem = f"{endpoint.socket} answered show with {error['code']}: {error['message']}"
    elif not isinstance(data, dict) or data.get("kind", "dashboard") != "dashboard":
        result.problem = f"{endpoint.socket} answered show with something else than the dashboard"
        result.fix = "is this the operator socket of a sloopd? upgrade sloopctl or sloopd"
    else:
        result.dashboard = data
    return result


def rows(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array in an answer; nothing when it is no array."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def mapping(value: Any) -> dict[str, Any]:
    """A JSON object in an answer; empty when it is no object."""
    return value if isinstance(value, dict) else {}


class Doctor:
    """The facts every check reads: the probe, the repository, the state directory."""

    def __init__(self, options: Options) -> None:
        self.options = options
        found = locate.find_repo()
        self.probe = self._probe()
        self.repo: Path | None = found.toplevel if found else None
        self.state_dir: Path | None = found.state_dir if found else None
        # Set when the daemon answers but its files are not on this file system.
        self.elsewhere: str | None = None
        repo, state = self.daemon.get("repo"), self.daemon.get("state_dir")
        if isinstance(repo, str) and isinstance(state, str):
            self.repo, self.state_dir = Path(repo), Path(state)
            if not self.repo.is_dir():
                self.elsewhere = (
                    f"skipped: the daemon's repository {repo} is not on this file system "
                    "(run doctor where the daemon runs, e.g. in its container)"
                )
                self.repo = self.state_dir = None
        if options.state_dir is not None:
            self.state_dir = options.state_dir.absolute()
        self.info = read_daemon_info(self.state_dir) if self.state_dir else None
        self._listing: list[Worktree] | None = None
        self._client: Client | None = None

    def _probe(self) -> Probe:
        opts = self.options
        if not opts.socket and not os.environ.get(locate.OPERATOR_SOCKET_ENV) and opts.state_dir:
            info = read_daemon_info(opts.state_dir)
            if info is not None and info.socket:
                return probe(locate.Endpoint(Path(info.socket), None, str(info.path)))
        try:
            endpoint = locate.operator_endpoint(opts.socket)
        except locate.LocateError as exc:
            return Probe(problem=str(exc), fix="run 'sloopctl doctor' in the repository")
        return probe(endpoint)

    @property
    def up(self) -> bool:
        return self.probe.dashboard is not None

    @property
    def dashboard(self) -> dict[str, Any]:
        return self.probe.dashboard or {}

    @property
    def daemon(self) -> dict[str, Any]:
        return mapping(self.dashboard.get("daemon"))

    def live_daemon_pid(self) -> int | None:
        """The pid in daemon.json when it is a live sloopd (a daemon that does not answer)."""
        pid = self.info.pid if self.info else None
        if pid is None or not process_alive(pid):
            return None
        cmdline = read_proc(pid, "cmdline")
        return pid if cmdline is None or b"sloopd" in cmdline else None

    def listing(self, refresh: bool = False) -> list[Worktree]:
        """``git worktree list --porcelain`` of the repository, read once unless refreshed."""
        if self._listing is not None and not refresh:
            return self._listing
        if self.repo is None:
            raise GitProblem("no repository to list worktrees of")
        try:
            done = git(self.repo, "worktree", "list", "--porcelain")
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitProblem(f"git worktree list failed: {exc}") from None
        if done.returncode != 0:
            raise GitProblem(f"git worktree list failed: {first_line(done.stderr)}")
        self._listing = parse_worktrees(done.stdout)
        return self._listing

    def run(self, run_id: str) -> dict[str, Any] | None:
        """``show R<n>``'s run detail; None when the daemon knows no such run."""
        if not api.RUN_ID_RE.match(run_id) or self.probe.endpoint is None:
            return None
        if self._client is None:
            self._client = Client(self.probe.endpoint.socket, read_timeout=FOLLOW_UP_TIMEOUT_S)
        reply = self._client.call("show", {"ref": run_id})
        data = mapping(reply.data) if reply.ok else {}
        return mapping(data.get("value")) if data.get("kind") == "run" else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
