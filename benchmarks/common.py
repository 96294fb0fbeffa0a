"""What every benchmark shares: result tables, sandboxes, processes, a tiny client.

Processes started here are remembered in a ``Sandbox`` and stopped by pid (SIGTERM, then
SIGKILL after a grace); temporary directories live under /tmp with short names, so Unix
socket paths stay under the 108-byte limit, and are removed when the sandbox closes.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import orjson

REPO_ROOT = Path(__file__).resolve().parents[1]
GIT_IDENTITY = ("-c", "user.name=bench", "-c", "user.email=bench@example.invalid")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- result tables -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One line of a table: a figure, the floor or peer it is set against, their ratio."""

    figure: str
    value: str
    peer: str = ""
    peer_value: str = ""
    ratio: str = ""
    goal: str = ""
    verdict: str = ""  # "met", "MISSED", or "" when the row has no goal
    # The line of issue 15's table this row answers (benchmarks.summary), or "".
    issue: str = ""


@dataclass
class Table:
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)  # loud problems (temp B-trees)

    HEADERS = ("figure", "value", "floor / peer (same run)", "peer value", "ratio", "goal", "")

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def cells(self) -> list[tuple[str, ...]]:
        return [
            (r.figure, r.value, r.peer, r.peer_value, r.ratio, r.goal, r.verdict) for r in self.rows
        ]

    def text(self) -> str:
        cells = [self.HEADERS, *self.cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.HEADERS))]
        numeric = {1, 3, 4}

        def line(row: Sequence[str]) -> str:
            parts = [
                cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                for i, cell in enumerate(row)
            ]
            return " | ".join(parts).rstrip()

        rule = "-+-".join("-" * w for w in widths)
        out = [f"== {self.title}", line(self.HEADERS), rule]
        out += [line(row) for row in cells[1:]]
        for alarm in self.alarms:
            out.append(f"!!! {alarm}")
        out += [f"   {note}" for note in self.notes]
        return "\n".join(out)

    def markdown(self) -> str:
        def esc(cell: str) -> str:
            return cell.replace("|", "\\|")

        out = [f"### {self.title}", ""]
        out.append("| " + " | ".join(self.HEADERS[:-1]) + " | |")
        out.append("|---|--:|---|--:|--:|---|---|")
        for row in self.cells():
            out.append("| " + " | ".join(esc(c) for c in row) + " |")
        out.append("")
        for alarm in self.alarms:
            out.append(f"**!!! {esc(alarm)}**  ")
        if self.notes:
            out.append("```")
            out += self.notes
            out.append("```")
        out.append("")
        return "\n".join(out)


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def rate(value: float) -> str:
    """Operations per second, readable: 1234567 -> '1.23M/s'."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M/s"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k/s"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k/s"
    return f"{value:.0f}/s"


def micros(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} µs"


def millis(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def ratio(a: float, b: float) -> str:
    if b <= 0:
        return "n/a"
    value = a / b
    if value >= 100:
        return f"{value:.0f}x"
    return f"{value:.2g}x" if value < 0.1 else f"{value:.2f}x"


def count(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


# --- the machine -----------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (0.0 once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = raw[raw.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_cpu_seconds() -> float:
    """CPU seconds every CPU of the machine spent busy since boot (from /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
    return (sum(fields) - fields[3] - fields[4]) / CLOCK_TICKS


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- sandboxes and processes -----------------------------------------------------------


class Sandbox:
    """Temporary directories and child processes, all undone by ``close``."""

    def __init__(self) -> None:
        self._dirs: list[Path] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def tmpdir(self, prefix: str = "sb") -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self._dirs.append(path)
        return path

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = subprocess.DEVNULL,
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 15.0) -> int:
        """SIGTERM this process (by its pid), SIGKILL it after ``grace``; its exit code."""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            code = proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if proc in self._procs:
            self._procs.remove(proc)
        return code

    def close(self) -> None:
        for proc in list(reversed(self._procs)):
            self.stop(proc, grace=5.0)
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs.clear()


@contextmanager
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox()
    try:
        yield box
    finally:
        box.close()


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository on ``main`` with one commit holding ``files`` (and a README)."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.invalid")
    for name, text in {"README.md": "bench\n", **(files or {})}.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bench setup")
    return repo


@dataclass
class Daemon:
    """A ``sloopd serve`` subprocess started by a benchmark."""

    proc: subprocess.Popen[bytes]
    socket: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_daemon(box: Sandbox, repo: Path, root: Path, timeout: float = 20.0) -> Daemon:
    """``python -m sloopd serve`` on ``repo`` with state and sockets under ``root``."""
    log = root / "daemon.log"
    argv = [sys.executable, "-m", "sloopd", "serve", "--repo", str(repo)]
    argv += ["--state-dir", str(root / "state"), "--socket-dir", str(root / "s")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SLOOPD_LOG_LEVEL": "WARNING"}
    env.pop("NOTIFY_SOCKET", None)
    with log.open("ab") as sink:
        proc = box.spawn(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=sink)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    if not line:
        box.stop(proc)
        raise RuntimeError(f"sloopd did not start:\n{log.read_text(errors='replace')}")
    return Daemon(proc, Path(line.decode().strip()), log)


def stop_daemon(box: Sandbox, daemon: Daemon) -> None:
    code = box.stop(daemon.proc)
    if code != 0:
        tail = daemon.log.read_text(errors="replace")[-2000:]
        print(f"   (sloopd exited {code}; log tail:\n{tail})", file=sys.stderr)


def wait_for_socket(path: Path, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before listening")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            return
        except OSError:
            time.sleep(0.02)
        finally:
            probe.close()
    raise RuntimeError(f"nothing listens on {path} after {timeout} s")


class Client:
    """One blocking NDJSON connection to a daemon, for set-up and checks (not timing)."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._reader = self.sock.makefile("rb")
        self._next = 0

    def raw(self, line: bytes) -> bytes:
        self.sock.sendall(line)
        reply: bytes = self._reader.readline()
        if not reply:
            raise EOFError("the server closed the connection")
        return reply

    def call(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        self._next += 1
        request = {"v": 1, "id": self._next, "verb": verb, "args": args or {}}
        reply = orjson.loads(self.raw(orjson.dumps(request) + b"\n"))
        if not reply.get("ok"):
            raise RuntimeError(f"{verb} {args}: {reply.get('error')}")
        return reply["data"]

    def close(self) -> None:
        self._reader.close()
        self.sock.close()


def request_line(verb: str, args: dict[str, Any], request_id: int = 1) -> bytes:
    return orjson.dumps({"v": 1, "id": request_id, "verb": verb, "args": args}) + b"\n"
