"""Real daemons on short temporary paths, and a minimal NDJSON client for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import orjson

from sloopd.store import db

REPO_ROOT = Path(__file__).resolve().parents[2]


def short_tmpdir(prefix: str = "sl") -> Path:
    """A directory under /tmp whose path is short enough for Unix sockets."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    return done.stdout.strip()


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository on branch main with one commit (plus ``files``)."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("sample\n")
    for name, text in (files or {}).items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


class Client:
    """One connection; ``call`` sends a request and returns its response."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._reader = self.sock.makefile("rb")
        self._next_id = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> dict[str, Any]:
        line = self._reader.readline()
        if not line:
            raise EOFError("connection closed by the daemon")
        result: dict[str, Any] = orjson.loads(line)
        return result

    def read_raw(self) -> bytes:
        """The next raw line (b"" once the daemon closed the connection)."""
        line: bytes = self._reader.readline()
        return line

    def request(self, message: Any) -> dict[str, Any]:
        """Send any JSON value as one line and return the one response."""
        self.send_raw(orjson.dumps(message) + b"\n")
        return self.read()

    def call(
        self, verb: str, args: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        request = {
            "v": 1,
            "id": f"t{self._next_id}",
            "verb": verb,
            "args": args or {},
            "token": token,
        }
        self.send_raw(orjson.dumps(request) + b"\n")
        response = self.read()
        assert response["id"] == request["id"], response
        return response

    def ok(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        response = self.call(verb, args)
        assert response["ok"] is True, response
        return response["data"]

    def error(
        self, verb: str, args: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        response = self.call(verb, args, token)
        assert response["ok"] is False, response
        assert set(response) == {"id", "ok", "error"}, response
        error: dict[str, Any] = response["error"]
        assert set(error) == {"code", "message", "details"}, error
        return error

    def close(self) -> None:
        self._reader.close()
        self.sock.close()


@dataclass
class DaemonProcess:
    """A ``sloopd serve`` subprocess on a repository, with short paths.

    With ``pass_dirs`` false the daemon is started without ``--state-dir`` and
    ``--socket-dir`` (and without ``--repo`` when ``cwd`` is given), so it picks
    its defaults; ``state_dir``/``socket_dir`` then say where the test expects
    them.  ``unset_env`` names variables removed from the daemon's environment.
    """

    repo: Path
    state_dir: Path
    socket_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    socket: Path | None = None
    clients: list[Client] = field(default_factory=list)
    pass_dirs: bool = True
    cwd: Path | None = None
    unset_env: tuple[str, ...] = ()
    log_file: Path | None = None
    # Prepended to the command: tests.support.unprivileged's, to run as another user.
    prefix: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        argv = [*self.prefix, sys.executable, "-m", "sloopd", "serve"]
        if self.cwd is None:
            argv += ["--repo", str(self.repo)]
        if self.pass_dirs:
            argv += ["--state-dir", str(self.state_dir), "--socket-dir", str(self.socket_dir)]
        # tests/conftest.py: an `on_ray` test in the Ray run serves with every stage on Ray.
        address = os.environ.get("SLOOP_TEST_RAY_ADDRESS")
        if os.environ.get("SLOOP_TEST_EXECUTOR") == "ray" and address:
            argv += ["--executor", "ray", "--ray-address", address]
        return argv

    def environment(self) -> dict[str, str]:
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"}
        if "NOTIFY_SOCKET" not in self.extra_env:
            env.pop("NOTIFY_SOCKET", None)
        for name in self.unset_env:
            env.pop(name, None)
        return env

    def start(self, timeout: float = 15.0) -> DaemonProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.environment(),
                cwd=self.cwd or self.repo,
            )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line or self.proc.poll() is not None:
                break
        if not line:
            raise RuntimeError(f"daemon did not start:\n{self.log()}")
        self.socket = Path(line.decode().strip())
        assert self.alive(), self.log()
        return self

    def run_to_exit(self, timeout: float = 15.0) -> tuple[int, str, str]:
        """Start a daemon expected to exit by itself: (exit code, stdout, its log)."""
        before = len(self.log().encode())
        with open(self.log_path, "ab") as log:
            done = subprocess.run(
                self.command(),
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.environment(),
                cwd=self.cwd or self.repo,
                timeout=timeout,
                check=False,
            )
        logged = self.log_path.read_bytes()[before:].decode(errors="replace")
        return done.returncode, done.stdout.decode(errors="replace"), logged

    @property
    def log_path(self) -> Path:
        return self.log_file or self.state_dir.parent / "daemon.log"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self) -> Client:
        assert self.socket is not None
        client = Client(self.socket)
        self.clients.append(client)
        return client

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        for client in self.clients:
            client.close()
        self.clients.clear()
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def new_daemon(root: Path, repo: Path, **env: str) -> DaemonProcess:
    return DaemonProcess(
        repo=repo, state_dir=root / "state", socket_dir=root / "s", extra_env=dict(env)
    )


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def iter_lines(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.splitlines():
        if line.strip():
            yield orjson.loads(line)


# --- the offline side: sloopd's maintenance commands and store fixtures ----------


def sloopd(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``sloopd ARGS`` to completion (stdout and stderr captured as text)."""
    environ = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sloopd", *args],
        cwd=cwd or REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def store_readonly(state_dir: Path) -> Iterator[apsw.Connection]:
    """A read-only connection on a stopped daemon's store, through the store package."""
    conn = apsw.Connection(str(state_dir / db.STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def store_writable(path: Path) -> Iterator[apsw.Connection]:
    """A test fixture's own read-write connection (never while a daemon runs)."""
    conn = apsw.Connection(str(path))
    try:
        yield conn
    finally:
        conn.close()


def query(state_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with store_readonly(state_dir) as conn:
        return [tuple(row) for row in conn.execute(sql, params)]


def count_events(state_dir: Path, kind: str) -> int:
    rows = query(state_dir, "SELECT count(*) FROM events WHERE kind = ?", (kind,))
    return int(rows[0][0])


def set_user_version(state_dir: Path, version: int) -> None:
    with store_writable(state_dir / db.STORE_FILE) as conn:
        conn.execute(f"PRAGMA user_version = {int(version)}")


@dataclass
class ArgsDaemon(DaemonProcess):
    """A ``DaemonProcess`` whose ``sloopd serve`` gets extra arguments (``--metrics``)."""

    extra_args: tuple[str, ...] = ()

    def command(self) -> list[str]:
        return [*super().command(), *self.extra_args]


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def metrics_sample(port: int, sample: str) -> float | None:
    """One sample's value from the daemon's ``--metrics`` endpoint, by its exposition text.

    ``sample`` is the name with its labels as served, e.g. ``sloop_gate_state{state="open"}``.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    for line in data.partition(b"\r\n\r\n")[2].decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return None


# --- sloopctl as a real process (the CLI tests of logs, events and show --follow) ----


def sloopctl_argv(socket_path: Path, *args: str) -> list[str]:
    """``python -m sloopctl --socket S ARGS`` under the interpreter running the tests."""
    return [sys.executable, "-m", "sloopctl", "--socket", str(socket_path), *args]


def sloopctl_env(**extra: str) -> dict[str, str]:
    """The tester's environment without a run's or an operator's socket, and no colour."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOOP_")}
    env.update(NO_COLOR="1", PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def sloopctl_start(socket_path: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``sloopctl`` in the background, stdout and stderr captured as text."""
    return subprocess.Popen(
        sloopctl_argv(socket_path, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sloopctl_env(),
        cwd=REPO_ROOT,
    )
