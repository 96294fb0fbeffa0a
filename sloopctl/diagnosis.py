"""The checks of ``sloopctl doctor`` (the command itself is ``sloopctl.doctor``).

Each check returns one ``Check``: ``ok``, ``warn`` or ``fail``, what it found,
and for a problem the fix.  ``diagnose`` runs every check whatever the others
found, so one report names everything that is wrong.

Like all of sloopctl this imports nothing from the daemon but ``sloopd.api``.
The store is vouched for by the daemon when it answers, and checked by
``sloopd store check`` in a subprocess (read-only, under the store's lock) when
it does not.  Worktrees come from git, the process groups from the registry
files the daemon keeps in its state directory (read here as sloopd.children
writes them), and the metrics view from the daemon's Prometheus endpoint or its
dashboard.  Loaded only when doctor runs, so it may import what it likes;
``tomllib`` and ``urllib`` are still imported only by the checks that use them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from sloopctl import locate
from sloopctl.client import FIX as START_FIX
from sloopctl.client import (
    Client,
    ClientError,
    DaemonNotAnswering,
    DaemonNotRunning,
    ProtocolMismatch,
)
from sloopctl.doctor import METRICS_URL_ENV
from sloopctl.layout import Paint, span
from sloopd import api

Status = Literal["ok", "warn", "fail"]

PROBE_TIMEOUT_S: Final = 1.0  # the socket must answer `show` within this
FOLLOW_UP_TIMEOUT_S: Final = 5.0  # later questions (`show R<n>`) of a daemon that answered
METRICS_TIMEOUT_S: Final = 2.0
STORE_CHECK_TIMEOUT_S: Final = 300.0  # an integrity check reads the whole store
CLOCK_SKEW_WARN_MS: Final = 5_000
SANE_CLOCK_MS: Final = 1_577_836_800_000  # 2020-01-01T00:00Z: anything earlier is bogus
METRICS_MAX_BYTES: Final = 8 * 1024 * 1024

# Names inside the state directory (sloopd.paths, sloopd.children, sloopd.runner);
# sloopctl may not import those modules, so they are repeated here.
WORKTREES_DIR: Final = "worktrees"
GROUPS_DIR: Final = "groups"
MARKER_VAR: Final = "SLOOP_CHILD_MARKER"

NOT_REACHABLE: Final = "skipped: daemon not reachable"
START: Final = "'sloopctl daemon'"
GC_FIX: Final = "sloopctl gc"
NAME_WIDTH: Final = 9
MAX_PROBLEMS_SHOWN: Final = 5
MAX_FIXES_SHOWN: Final = 3
_RANK: Final[Mapping[str, int]] = {"ok": 0, "warn": 1, "fail": 2}
_WORD: Final[Mapping[str, tuple[str, str]]] = {
    "ok": ("ok", "green"),
    "warn": ("warn", "yellow"),
    "fail": ("FAIL", "red"),
}


# --- results ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: its line of the report, or its object with --json."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}

    def line(self, paint: Paint) -> str:
        word, style = _WORD[self.status]
        text = f"{paint(word.ljust(4), style)}  {self.name.ljust(NAME_WIDTH)}  {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text


@dataclass(slots=True)
class Findings:
    """The problems one check found; reported worst first, then its summary."""

    problems: list[tuple[Status, str, str | None]] = field(default_factory=list)

    def add(self, status: Status, text: str, fix: str | None = None) -> None:
        self.problems.append((status, text, fix))

    def result(self, name: str, summary: str) -> Check:
        if not self.problems:
            return Check(name, "ok", summary)
        ordered = sorted(self.problems, key=lambda p: -_RANK[p[0]])
        texts = [text for _, text, _ in ordered]
        fixes = list(dict.fromkeys(fix for _, _, fix in ordered if fix))
        # One line per check, however many worktrees or groups are in trouble.
        texts = _at_most(texts, MAX_PROBLEMS_SHOWN) + ([summary] if summary else [])
        fix = "; ".join(_at_most(fixes, MAX_FIXES_SHOWN))
        return Check(name, ordered[0][0], "; ".join(texts), fix or None)


def _at_most(items: list[str], limit: int) -> list[str]:
    if len(items) <= limit:
        return items
    return [*items[:limit], f"and {len(items) - limit} more"]


@dataclass(frozen=True, slots=True)
class Options:
    socket: str | None = None
    state_dir: Path | None = None
    full: bool = False
    metrics_url: str | None = None


# --- what the checks share -------------------------------------------------------------


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
        result.problem = exc.message.removesuffix(f"; {START_FIX}")
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


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """``daemon.json``: what a running daemon recorded in its state directory."""

    path: Path
    pid: int | None
    socket: str | None


def read_daemon_info(state_dir: Path) -> DaemonInfo | None:
    path = state_dir / api.DAEMON_INFO_NAME
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    pid, socket = data.get("pid"), data.get("socket")
    return DaemonInfo(
        path,
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        socket if isinstance(socket, str) and socket else None,
    )


@dataclass(frozen=True, slots=True)
class Worktree:
    """One entry of ``git worktree list --porcelain``."""

    path: Path
    branch: str | None
    prunable: bool


class GitProblem(Exception):
    """A git command doctor relies on failed; the message says which and why."""


def parse_worktrees(porcelain: str) -> list[Worktree]:
    entries = []
    for block in porcelain.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines or not lines[0].startswith("worktree "):
            continue
        branch = next(
            (ln.removeprefix("branch ") for ln in lines if ln.startswith("branch ")), None
        )
        prunable = any(ln == "prunable" or ln.startswith("prunable ") for ln in lines)
        entries.append(Worktree(Path(lines[0].removeprefix("worktree ")), branch, prunable))
    return entries


def git(
    repo: Path | None, *args: str, timeout: float | None = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run git (in ``repo`` when given); OSError when git cannot be run at all."""
    where = ["-C", str(repo)] if repo is not None else []
    return subprocess.run(
        ["git", *where, *args], capture_output=True, text=True, check=False, timeout=timeout
    )


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _resolved(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any]:
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
        return _mapping(self.dashboard.get("daemon"))

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
        data = _mapping(reply.data) if reply.ok else {}
        return _mapping(data.get("value")) if data.get("kind") == "run" else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


# --- processes ---------------------------------------------------------------------------


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_proc(pid, "stat")
    return stat is None or stat.rpartition(b")")[2].split()[:1] != [b"Z"]


def read_proc(pid: int, name: str) -> bytes | None:
    """``/proc/<pid>/<name>``; None when it cannot be read (gone, not ours, no /proc)."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def marked_processes(markers: set[str]) -> dict[str, set[int]]:
    """Live processes whose environment carries one of ``markers`` (as sloopd marks them)."""
    found: dict[str, set[int]] = {}
    prefix = f"{MARKER_VAR}=".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        environ = read_proc(int(name), "environ")
        for entry in (environ or b"").split(b"\0"):
            if entry.startswith(prefix):
                marker = entry[len(prefix) :].decode(errors="replace")
                if marker in markers:
                    found.setdefault(marker, set()).add(int(name))
    return found


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One file of ``<state dir>/groups``, as sloopd.children writes them."""

    path: Path
    marker: str
    pid: int | None
    owner: str | None
    argv: tuple[str, ...]


def read_group_records(directory: Path) -> list[GroupRecord]:
    records = []
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("marker"), str):
            continue
        pid, owner, argv = data.get("pid"), data.get("owner"), data.get("argv")
        records.append(
            GroupRecord(
                path,
                data["marker"],
                pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                owner if isinstance(owner, str) else None,
                tuple(str(a) for a in argv) if isinstance(argv, list) else (),
            )
        )
    return records


def live_pids(record: GroupRecord, marked: Mapping[str, set[int]]) -> set[int]:
    """The record's live processes: those carrying its marker, and its leader.

    The leader's pid counts only while its environment still holds the marker,
    or cannot be read (another user's process): a pid reused by an unrelated
    process is no leftover.
    """
    pids = set(marked.get(record.marker, ()))
    pid = record.pid
    if pid is not None and pid > 1 and pid not in pids and process_alive(pid):
        environ = read_proc(pid, "environ")
        if environ is None or f"{MARKER_VAR}={record.marker}".encode() in environ.split(b"\0"):
            pids.add(pid)
    return pids


def describe_group(record: GroupRecord, pids: Iterable[int]) -> str:
    program = Path(record.argv[0]).name if record.argv else "?"
    listed = ", ".join(str(p) for p in sorted(pids))
    return f"{record.owner or 'unknown owner'}: pid {listed} ({program})"


# --- the checks ----------------------------------------------------------------------------


def check_socket(d: Doctor) -> Check:
    name = "socket"
    found = d.probe
    if found.dashboard is not None and found.endpoint is not None:
        pid = d.daemon.get("pid")
        return Check(
            name,
            "ok",
            f"{found.endpoint.socket} answers show in {found.elapsed_ms} ms "
            f"(sloopd pid {pid}; socket from {found.endpoint.source})",
        )
    detail = found.problem or "no answer"
    fix = found.fix or START_FIX
    pid = d.live_daemon_pid()
    if pid is not None:
        detail += f"; {d.info.path if d.info else 'daemon.json'} names pid {pid}, which is alive"
        if found.fix is None:  # a hung daemon, not a permission or protocol problem
            fix = f"restart it: 'systemctl restart sloopd@<name>', or 'kill {pid}' then {START}"
    elif d.info is not None and d.info.pid is not None:
        detail += (
            f"; {d.info.path} names pid {d.info.pid}, which is not running "
            "(the daemon did not stop cleanly)"
        )
    return Check(name, "fail", detail, fix)


def check_version(d: Doctor) -> Check:
    name = "version"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    version, protocol = d.daemon.get("version"), d.daemon.get("protocol")
    mine = f"this sloopctl {api.SOFTWARE_VERSION}, protocol v{api.PROTOCOL_VERSION}"
    found = f"sloopd {version}, protocol v{protocol}"
    if version == api.SOFTWARE_VERSION and protocol == api.PROTOCOL_VERSION:
        return Check(name, "ok", f"{found} (same as {mine})")
    return Check(
        name,
        "warn",
        f"{found}, but {mine}",
        "install the same release of sloopd and sloopctl, then restart the daemon",
    )


def check_store(d: Doctor) -> Check:
    name = "store"
    if d.up:
        return _store_from_daemon(d)
    if d.state_dir is None:
        return Check(name, "warn", "skipped: no repository, so no state directory to check")
    if not d.state_dir.is_dir():
        return Check(
            name,
            "warn",
            f"no state directory at {d.state_dir}: no daemon has run for this repository",
            START_FIX,
        )
    return store_check_subprocess(d.state_dir)


def _store_from_daemon(d: Doctor) -> Check:
    store, schema = d.daemon.get("store"), d.daemon.get("schema_version")
    if store == "ok":
        return Check(
            "store",
            "ok",
            f"open in the daemon (schema version {schema}); a full integrity check "
            "needs the daemon stopped: sloopd store check",
        )
    reason = d.daemon.get("reason")
    words = str(reason) if reason else f"the daemon reports the store as {store!r}"
    # The daemon's reasons end in their fix ("...; upgrade sloopd or restore a backup ...").
    problem, _, fix = words.rpartition("; ")
    return Check(
        "store",
        "fail",
        f"refused by the daemon: {problem or words}",
        fix if problem else "see the daemon's log",
    )


def store_check_subprocess(state_dir: Path) -> Check:
    """``sloopd store check`` in a subprocess: read-only, under the store's lock."""
    name = "store"
    argv = [sys.executable, "-m", "sloopd", "store", "check", "--state-dir", str(state_dir)]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=STORE_CHECK_TIMEOUT_S,
            cwd=state_dir,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, "fail", f"cannot run sloopd store check: {exc}", "run it by hand")
    if done.returncode == 0:
        return Check(name, "ok", f"sloopd store check: {first_line(done.stdout)}")
    problems = [
        ln.removeprefix("problem: ").strip()
        for ln in done.stderr.splitlines()
        if ln.startswith("problem: ")
    ]
    if problems and all(p.startswith("no store at ") for p in problems):
        return Check(name, "warn", f"{problems[0]}: the daemon creates it on its first start")
    if "locked by" in done.stderr:
        message = first_line(done.stderr).removeprefix("Error: ")
        return Check(name, "warn", f"not checked: {message}", "run doctor again once it is done")
    if not problems:
        message = first_line(done.stderr) or f"exit status {done.returncode}"
        return Check(name, "fail", f"sloopd store check failed: {message}", "run it by hand")
    shown = "; ".join(problems[:3]) + (
        f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    )
    fix = (
        problems[0].rpartition("; ")[2]
        if "newer than this sloopd" in problems[0]
        else f"restore a backup: sloopd store restore {state_dir}/backups/<file> "
        "(it saves the damaged store first)"
    )
    return Check(name, "fail", f"sloopd store check: {shown}", fix)


def main_branch(repo: Path, found: Findings) -> str | None:
    """``[repo] main`` of the repository's sloop.toml (default "main"); None if unreadable."""
    import tomllib

    path = repo / "sloop.toml"
    fix = "fix sloop.toml: the daemon refuses to start with it (and ignores it on SIGHUP)"
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "main"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        found.add("fail", f"{path} cannot be read as TOML: {exc}", fix)
        return None
    section = document.get("repo", {})
    main = section.get("main", "main") if isinstance(section, dict) else None
    if not isinstance(main, str) or not main.strip():
        found.add("fail", f"{path}: [repo] main must be a non-empty string", fix)
        return None
    return main


def check_git(d: Doctor) -> Check:
    name = "git"
    try:
        version = git(None, "--version")
    except OSError as exc:
        return Check(name, "fail", f"git cannot be run: {exc}", "install git and put it on PATH")
    if d.elsewhere:
        return Check(name, "warn", d.elsewhere)
    if d.repo is None:
        return Check(
            name,
            "fail",
            "not inside a git repository, and no daemon answered to name one",
            "run 'sloopctl doctor' in the repository",
        )
    found = Findings()
    facts = [first_line(version.stdout) or "git present"]
    main = main_branch(d.repo, found)
    if main is not None:
        tip = git(d.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{main}^{{commit}}")
        if tip.returncode == 0:
            facts.append(f"main branch '{main}' at {tip.stdout.strip()[:12]}")
        else:
            found.add(
                "fail",
                f"the main branch '{main}' ([repo] main in sloop.toml) does not exist in {d.repo}",
                f"create it ('git branch {main} <commit>') or set [repo] main in sloop.toml",
            )
    try:
        facts.append(plural(len(d.listing()), "worktree") + " listed")
    except GitProblem as exc:
        found.add("fail", str(exc), f"run 'git -C {d.repo} worktree list' to see why")
    facts.append(_fsck(d.repo, found) if d.options.full else "'--full' runs git fsck")
    return found.result(name, ", ".join(facts))


def _fsck(repo: Path, found: Findings) -> str:
    done = git(repo, "fsck", "--connectivity-only", "--no-progress", timeout=None)
    if done.returncode != 0:
        found.add(
            "fail",
            f"git fsck --connectivity-only exited {done.returncode}: "
            f"{first_line(done.stderr) or first_line(done.stdout)}",
            "repair the repository from a healthy clone or a backup (git fsck lists the damage)",
        )
        return "git fsck failed"
    return "git fsck --connectivity-only clean"


def check_worktrees(d: Doctor) -> Check:
    name = "worktrees"
    if d.state_dir is None:
        return Check(name, "warn", d.elsewhere or "skipped: no repository, so no state directory")
    try:
        entries = d.listing()
    except GitProblem as exc:
        return Check(name, "warn", f"skipped: {exc}")
    root = _resolved(d.state_dir / WORKTREES_DIR)
    ours = {_resolved(e.path): e for e in entries if _resolved(e.path).parent == root}
    found = Findings()
    for path, entry in ours.items():
        if entry.prunable:
            found.add("warn", f"git lists {path} but its directory is gone", "git worktree prune")
    live = {path: e for path, e in ours.items() if not e.prunable}
    try:
        directories = {p for p in root.iterdir() if p.is_dir()}
    except OSError:
        directories = set()
    if not d.up:
        for path in sorted(directories - set(live)):
            found.add("warn", f"{path} is not a git worktree", f"inspect it, then rm -r {path}")
        if live:  # with the daemon down no run is in flight: only these are unchecked
            found.add(
                "warn",
                f"{NOT_REACHABLE}, so {plural(len(live), 'run worktree')} not compared with runs",
            )
        return found.result(name, "" if live else "no run worktrees")
    try:
        summary = _compare_with_runs(d, live, directories, found)
    except ClientError as exc:
        return Check(name, "warn", f"the daemon stopped answering: {exc.message}")
    return found.result(name, summary)


def _compare_with_runs(
    d: Doctor, live: dict[Path, Worktree], directories: set[Path], found: Findings
) -> str:
    in_flight = {str(r.get("id")): r for r in _rows(d.dashboard.get("runs"))}
    counts: Counter[str] = Counter()
    for path in sorted(live):
        run = in_flight.get(path.name) or d.run(path.name)
        counts[_worktree_of_run(path, run, found)] += 1
    for path in sorted(directories - set(live)):
        run = d.run(path.name)
        recorded = run is not None and run.get("terminal") and _same(run.get("worktree"), path)
        fix = GC_FIX if recorded else f"inspect it, then rm -r {path}"
        found.add("warn", f"{path} is not a git worktree", fix)
    _runs_without_worktree(d, in_flight.values(), set(live), found, counts)
    if not live:
        preparing = counts["being prepared"]
        return "no run worktrees" + (
            f" ({plural(preparing, 'run')} being prepared)" if preparing else ""
        )
    parts = [f"{n} {what}" for what, n in sorted(counts.items()) if what != "problem"]
    kept = " (sloopctl gc removes those)" if counts["kept for inspection"] else ""
    return f"{plural(len(live), 'run worktree')}: {', '.join(parts) or 'none healthy'}{kept}"


def _same(recorded: Any, path: Path) -> bool:
    return isinstance(recorded, str) and _resolved(recorded) == path


def _worktree_of_run(path: Path, run: dict[str, Any] | None, found: Findings) -> str:
    """Sort one worktree under <state dir>/worktrees by what the daemon says of its run."""
    remove = f"git worktree remove --force {path}"
    if run is None:
        found.add("warn", f"{path}: the daemon knows no run {path.name}", remove)
        return "problem"
    if not run.get("terminal"):
        return "in flight"
    state, run_id = run.get("state"), run.get("id")
    if not _same(run.get("worktree"), path):
        found.add(
            "warn",
            f"{run_id} is {state} and its worktree was removed, yet git has one at {path}",
            remove,
        )
        return "problem"
    if state == "merged":
        found.add("warn", f"{run_id} is merged but its worktree is still at {path}", GC_FIX)
        return "problem"
    return "kept for inspection"


def _runs_without_worktree(
    d: Doctor,
    runs: Iterable[dict[str, Any]],
    listed: set[Path],
    found: Findings,
    counts: Counter[str],
) -> None:
    """Runs in flight whose worktree git does not list, asked again before blaming them."""
    suspects = []
    for run in runs:
        where = run.get("worktree")
        if where is None and run.get("state") == "claimed":
            counts["being prepared"] += 1
        elif not isinstance(where, str) or _resolved(where) not in listed:
            suspects.append(str(run.get("id")))
    if not suspects:
        return
    # A run may have settled, or got its worktree, since the dashboard was read.
    relisted = {_resolved(e.path) for e in d.listing(refresh=True) if not e.prunable}
    for run_id in suspects:
        fresh = d.run(run_id)
        if fresh is None or fresh.get("terminal"):
            continue
        where = fresh.get("worktree")
        if where is None and fresh.get("state") == "claimed":
            continue
        if isinstance(where, str) and _resolved(where) in relisted:
            continue
        found.add(
            "fail",
            f"{run_id} is {fresh.get('state')} but has no worktree"
            + (f" at {where}" if isinstance(where, str) else ""),
            f"sloopctl abort {run_id}, then 'sloopctl run {fresh.get('ticket')}' for a new attempt",
        )


def check_groups(d: Doctor) -> Check:
    name = "groups"
    if d.state_dir is None:
        return Check(name, "warn", d.elsewhere or "skipped: no repository, so no state directory")
    records = read_group_records(d.state_dir / GROUPS_DIR)
    if not records:
        return Check(name, "ok", "no child process groups recorded")
    marked = marked_processes({r.marker for r in records})
    live = {r.path: live_pids(r, marked) for r in records}
    running = "; ".join(describe_group(r, live[r.path]) for r in records if live[r.path])
    pids = sorted({pid for found in live.values() for pid in found})
    if d.up and d.daemon.get("store") == "ok":
        count = sum(1 for found in live.values() if found)
        return Check(
            name, "ok", f"{len(records)} recorded, {count} live" + (f": {running}" if pids else "")
        )
    if not pids:
        return Check(
            name,
            "ok",
            f"{len(records)} records of a stopped daemon, no live process "
            "(its next start clears them)",
        )
    return _leftovers(d, running, pids)


def _leftovers(d: Doctor, running: str, pids: list[int]) -> Check:
    """Recorded processes alive while no daemon that manages them runs."""
    kill = "kill " + " ".join(str(p) for p in pids)
    if d.up:  # a daemon refusing its store serves only show: it never reaped these
        return Check(
            "groups",
            "fail",
            f"processes of an earlier daemon still run, and this one (serving only show) "
            f"does not stop them: {running}",
            f"fix the store (see the store check) and restart the daemon; or {kill}",
        )
    daemon_pid = d.live_daemon_pid()
    if daemon_pid is not None:
        return Check(
            "groups",
            "warn",
            f"the daemon (pid {daemon_pid}) does not answer; its children still run: {running}",
            f"restart it: 'systemctl restart sloopd@<name>', or 'kill {daemon_pid}' then {START}",
        )
    return Check(
        "groups",
        "fail",
        f"leftover processes of a stopped daemon still run: {running}",
        f"start the daemon (it kills leftovers): sloopctl daemon; or {kill}",
    )


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_clock(d: Doctor) -> Check:
    name = "clock"
    now = time.time_ns() // 1_000_000
    found = Findings()
    if now < SANE_CLOCK_MS:
        found.add(
            "warn",
            f"this host's clock reads {_utc(now)}, before 2020",
            "set the clock (enable NTP: 'timedatectl set-ntp true')",
        )
    started, uptime = d.daemon.get("started_at_ms"), d.daemon.get("uptime_ms")
    if not d.up:
        found.add("warn", NOT_REACHABLE)
        return found.result(name, f"local clock {_utc(now)}")
    if not isinstance(started, int) or not isinstance(uptime, int):
        found.add("warn", "the dashboard carries no daemon.started_at_ms and uptime_ms")
        return found.result(name, f"local clock {_utc(now)}")
    skew = started + uptime - d.probe.midpoint_ms
    words = f"daemon's clock {span(abs(skew)) if abs(skew) >= 1000 else f'{abs(skew)} ms'}"
    words += " ahead of this host's" if skew > 0 else " behind this host's" if skew < 0 else ""
    if abs(skew) > CLOCK_SKEW_WARN_MS:
        found.add("warn", words, "synchronise both clocks (NTP); the daemon's times look off")
        return found.result(name, "")
    return found.result(name, f"{words} (local clock {_utc(now)})")


# --- metrics ---------------------------------------------------------------------------------

_SAMPLE: Final = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL: Final = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def parse_exposition(text: str) -> list[Sample]:
    """Samples of the Prometheus text format (enough of it for the doctor's view)."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        pairs = {k: _unescape(v) for k, v in _LABEL.findall(labels or "")}
        samples.append((name, pairs, number))
    return samples


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for sample_name, labels, value in samples:
        if sample_name == name:
            key = labels.get(label, "")
            totals[key] = totals.get(key, 0.0) + value
    return totals


def metrics_summary(samples: list[Sample]) -> str:
    def total(name: str) -> str:
        values = [v for n, _, v in samples if n == name]
        return _number(sum(values)) if values else "n/a"

    gate = [state for state, v in _by_label(samples, "sloop_gate_state", "state").items() if v]
    finished = _by_label(samples, "sloop_runs_finished_total", "state")
    errors = {
        code: n
        for code, n in _by_label(samples, "sloop_requests_total", "code").items()
        if code != "ok" and n
    }
    words = [
        f"runs in flight {total('sloop_runs_in_flight')}",
        f"triggers queued {total('sloop_triggers_queued')} (due {total('sloop_triggers_due')})",
        f"gate {'/'.join(gate) or 'n/a'}",
        "runs finished "
        + (" ".join(f"{s}={_number(n)}" for s, n in sorted(finished.items())) or "none"),
        f"request errors {_number(sum(errors.values()))}"
        + (
            " (" + ", ".join(f"{c}={_number(n)}" for c, n in sorted(errors.items())) + ")"
            if errors
            else ""
        ),
    ]
    return ", ".join(words)


def fetch_metrics(url: str) -> str:
    """GET ``url`` directly (no proxy), within METRICS_TIMEOUT_S."""
    import urllib.parse
    import urllib.request

    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=METRICS_TIMEOUT_S) as response:
        body: bytes = response.read(METRICS_MAX_BYTES)
    return body.decode("utf-8", errors="replace")


def check_metrics(d: Doctor) -> Check:
    name = "metrics"
    url = d.options.metrics_url
    if url:
        try:
            samples = parse_exposition(fetch_metrics(url))
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            return Check(
                name,
                "fail",
                f"cannot read {url}: {getattr(exc, 'reason', None) or exc}",
                "check the URL against sloopd's '--metrics HOST:PORT' (http://HOST:PORT/metrics)",
            )
        if not any(n.startswith("sloop_") for n, _, _ in samples):
            return Check(
                name, "warn", f"{url} serves no sloop_ series", "point it at sloopd's --metrics"
            )
        return Check(name, "ok", f"{url}: {metrics_summary(samples)}")
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    now = time.time_ns() // 1_000_000
    triggers = _rows(d.dashboard.get("queued_triggers"))
    due = sum(1 for t in triggers if isinstance(t.get("due_at_ms"), int) and t["due_at_ms"] <= now)
    gate = _mapping(d.dashboard.get("gate")).get("state")
    return Check(
        name,
        "ok",
        f"from the dashboard: runs in flight {len(_rows(d.dashboard.get('runs')))}, "
        f"triggers queued {len(triggers)} (due {due}), gate {gate} "
        f"(--metrics-url or ${METRICS_URL_ENV} shows the Prometheus series)",
    )


# --- all of them ---------------------------------------------------------------------------------

CHECKS: Final[tuple[tuple[str, Callable[[Doctor], Check]], ...]] = (
    ("socket", check_socket),
    ("version", check_version),
    ("store", check_store),
    ("git", check_git),
    ("worktrees", check_worktrees),
    ("groups", check_groups),
    ("clock", check_clock),
    ("metrics", check_metrics),
)


def diagnose(options: Options) -> list[Check]:
    """Run every check, whatever the others found; one broken check hides no other."""
    doctor = Doctor(options)
    results = []
    try:
        for name, check in CHECKS:
            try:
                results.append(check(doctor))
            except Exception as exc:
                results.append(
                    Check(
                        name,
                        "fail",
                        f"the check itself failed: {exc.__class__.__name__}: {exc}",
                        "report this as a sloopctl bug",
                    )
                )
    finally:
        doctor.close()
    return results
