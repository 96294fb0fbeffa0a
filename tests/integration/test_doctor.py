"""``sloopctl doctor`` against real daemons, stopped daemons and broken state.

doctor runs as a subprocess in the repository, the way an operator runs it;
the assertions read its ``--json`` report (one object per check, in a fixed
order) and its exit status: 0 when no check failed, 1 otherwise.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sloopd.wire.api import SOFTWARE_VERSION
from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import (
    ArgsDaemon,
    Client,
    DaemonProcess,
    free_loopback_port,
    git,
    new_daemon,
    set_user_version,
)

CHECKS = [
    "socket",
    "version",
    "sandbox",
    "workspaces",
    "hardening",
    "clis",
    "executor",
    "prompt",
    "store",
    "git",
    "worktrees",
    "groups",
    "clock",
    "metrics",
]
# The developer's own daemon and settings must not leak into the runs.
UNSET = ("SLOOP_OPERATOR_SOCKET", "SLOOP_SOCKET", "SLOOP_TOKEN", "SLOOP_METRICS_URL")


@dataclass(frozen=True)
class Report:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = orjson.loads(self.stdout)
        return data

    def check(self, name: str) -> dict[str, Any]:
        found = [c for c in self.json["checks"] if c["name"] == name]
        assert len(found) == 1, self.stdout
        check: dict[str, Any] = found[0]
        return check

    def status(self, name: str) -> str:
        status: str = self.check(name)["status"]
        return status


def doctor(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Report:
    environ = {k: v for k, v in os.environ.items() if k not in UNSET}
    done = subprocess.run(
        [sys.executable, "-m", "sloopctl", "doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**environ, "NO_COLOR": "1", **(env or {})},
    )
    return Report(done.returncode, done.stdout, done.stderr)


def doctor_json(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Report:
    report = doctor(cwd, "--json", *args, env=env)
    assert report.stderr == "", report.stderr
    assert [c["name"] for c in report.json["checks"]] == CHECKS, report.stdout
    assert report.json["ok"] is (report.code == 0), report.stdout
    return report


def socket_of(daemon: DaemonProcess) -> str:
    assert daemon.socket is not None
    return str(daemon.socket)


# --- a healthy daemon ---------------------------------------------------------------------


def test_a_healthy_daemon_passes_every_check(repo: Path, daemon: DaemonProcess) -> None:
    report = doctor(repo, "--socket", socket_of(daemon))
    assert report.code == 0, report.stdout + report.stderr
    lines = report.stdout.splitlines()
    assert [line.split()[1] for line in lines] == CHECKS, report.stdout
    for line in lines:
        assert line.split()[0] in ("ok", "warn"), line
        assert "FAIL" not in line
    socket_line = lines[0]
    assert socket_line.startswith("ok    socket     ")
    assert f"{daemon.socket} answers show in" in socket_line

    report = doctor_json(repo, "--socket", socket_of(daemon))
    assert report.code == 0
    assert set(report.json) == {"checks", "ok"}
    for check in report.json["checks"]:
        assert set(check) == {"name", "status", "detail", "fix"}, check
        if check["name"] == "clis" and check["status"] == "warn":
            # The default preset's CLI, claude, is not installed on this host.
            assert "claude is not on the daemon's PATH" in check["detail"], check
            continue
        assert check["status"] == "ok", check  # nothing to warn about on a fresh repository
        assert check["fix"] is None, check
        assert isinstance(check["detail"], str), check
        assert check["detail"], check
    assert f"sloopd {SOFTWARE_VERSION}, protocol v1" in report.check("version")["detail"]
    assert "schema version" in report.check("store")["detail"]
    assert "main branch 'main' at" in report.check("git")["detail"]
    assert report.check("worktrees")["detail"] == "no run checkouts"
    assert report.check("groups")["detail"] == "no child process groups recorded"
    dashboard = "from the dashboard: runs in flight 0, triggers queued 0 (due 0), gate open"
    assert dashboard in report.check("metrics")["detail"]


def test_the_global_options_and_full_fsck(repo: Path, daemon: DaemonProcess) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in UNSET}
    done = subprocess.run(
        [sys.executable, "-m", "sloopctl", "--json", "--socket", socket_of(daemon), "doctor"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = orjson.loads(done.stdout)
    assert report["ok"] is True
    full = doctor_json(repo, "--socket", socket_of(daemon), "--full")
    assert "git fsck --connectivity-only clean" in full.check("git")["detail"]


def test_doctor_finds_a_daemon_on_default_paths(sandbox: Path, repo: Path) -> None:
    """No --socket: the daemon.json in <git common dir>/sloop names the socket."""
    daemon = DaemonProcess(
        repo=repo,
        state_dir=repo / ".git" / "sloop",
        socket_dir=sandbox / "s",
        extra_env={"SLOOP_SOCKET_DIR": str(sandbox / "s")},
        pass_dirs=False,
        log_file=sandbox / "daemon.log",
    ).start()
    try:
        report = doctor_json(repo)
        assert report.code == 0, report.stdout
        assert f"{sandbox / 's' / 'operator.sock'}" in report.check("socket")["detail"]
        assert "daemon.json" in report.check("socket")["detail"]
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_main_branch_that_does_not_exist_fails(repo: Path, daemon: DaemonProcess) -> None:
    (repo / "sloop.toml").write_text('[repo]\nmain = "trunk"\n', encoding="utf-8")
    report = doctor_json(repo, "--socket", socket_of(daemon))
    assert report.code == 1
    git_check = report.check("git")
    assert git_check["status"] == "fail"
    assert "the main branch 'trunk'" in git_check["detail"]
    assert "git branch trunk" in git_check["fix"]


# --- the daemon down --------------------------------------------------------------------------


def test_with_the_daemon_down_the_socket_fails_and_the_store_is_checked(
    sandbox: Path, repo: Path
) -> None:
    daemon = new_daemon(sandbox, repo).start()
    socket = socket_of(daemon)
    assert daemon.stop() == 0, daemon.log()

    report = doctor(repo, "--socket", socket, "--state-dir", str(daemon.state_dir))
    assert report.code == 1, report.stdout
    lines = report.stdout.splitlines()
    assert lines[0].startswith("FAIL  socket     no socket at ")
    assert "fix: start it with 'sloopctl daemon' (or 'systemctl start sloopd@<name>')" in lines[0]

    report = doctor_json(repo, "--socket", socket, "--state-dir", str(daemon.state_dir))
    assert report.code == 1
    assert report.json["ok"] is False
    assert report.status("socket") == "fail"
    store = report.check("store")
    assert store["status"] == "ok", store
    assert store["detail"].startswith("sloopd store check: store ok (schema version")
    assert report.status("git") == "ok"
    assert report.check("worktrees") == {
        "name": "worktrees",
        "status": "ok",
        "detail": "no run checkouts",
        "fix": None,
    }
    assert report.status("groups") == "ok"
    for name in ("version", "clock", "metrics"):
        assert report.status(name) == "warn", report.check(name)
        assert "daemon not reachable" in report.check(name)["detail"]


def test_a_store_the_daemon_refuses_fails_with_its_fix(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo).start()
    assert daemon.stop() == 0, daemon.log()
    set_user_version(daemon.state_dir, 99)
    # A daemon refusing its store serves only show, but it still ends what an
    # earlier daemon left, so no leftover survives its start.
    marker = secrets.token_hex(16)
    sleeper = spawn_marked_sleep(marker)
    write_group_record(daemon.state_dir, marker, sleeper.pid, "R3/test#2")
    daemon = new_daemon(sandbox, repo).start()
    try:
        report = doctor_json(repo, "--socket", socket_of(daemon))
        assert report.code == 1
        store = report.check("store")
        assert store["status"] == "fail"
        assert "schema version 99, newer than this sloopd supports" in store["detail"]
        assert "sloopd store restore" in store["fix"]
        assert report.status("groups") == "ok", report.check("groups")
        assert sleeper.wait(timeout=10) == -9
        assert report.status("socket") == "ok"
    finally:
        sleeper.kill()
        sleeper.wait()
        assert daemon.stop() == 0, daemon.log()
    # Stopped, the same store is refused by sloopd store check.
    report = doctor_json(repo, "--state-dir", str(daemon.state_dir))
    store = report.check("store")
    assert store["status"] == "fail", store
    assert "newer than this sloopd supports" in store["detail"]
    assert "sloopd store restore" in store["fix"]


def spawn_marked_sleep(marker: str) -> subprocess.Popen[bytes]:
    """A process like one sloopd.proc.children starts: its own group, marked in its environment."""
    return subprocess.Popen(
        ["sleep", "60"],
        env={**os.environ, "SLOOP_CHILD_MARKER": marker},
        start_new_session=True,
    )


def write_group_record(state_dir: Path, marker: str, pid: int | None, owner: str) -> Path:
    """A registry file as sloopd.children.ProcessGroups writes it."""
    groups = state_dir / "groups"
    groups.mkdir(parents=True, exist_ok=True)
    record = {
        "pgid": pid,
        "pid": pid,
        "marker": marker,
        "argv": ["sleep", "60"],
        "started_at_ms": time.time_ns() // 1_000_000,
        "owner": owner,
    }
    path = groups / f"{marker}.json"
    path.write_bytes(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
    return path


def test_a_leftover_process_group_of_a_crashed_daemon_fails(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo).start()
    socket = socket_of(daemon)
    daemon.kill9()  # leaves daemon.json and the socket file behind
    state = daemon.state_dir
    marker = secrets.token_hex(16)
    sleeper = spawn_marked_sleep(marker)
    try:
        write_group_record(state, marker, sleeper.pid, "R7/implement#1")
        # A record whose pid now belongs to another process (this one) is no leftover.
        write_group_record(state, secrets.token_hex(16), os.getpid(), "R8/implement#1")

        report = doctor_json(repo, "--socket", socket, "--state-dir", str(state))
        assert report.code == 1
        socket_check = report.check("socket")
        assert socket_check["status"] == "fail"
        assert "connection refused" in socket_check["detail"], socket_check
        assert "which is not running (the daemon did not stop cleanly)" in socket_check["detail"]
        groups = report.check("groups")
        assert groups["status"] == "fail", groups
        assert f"R7/implement#1: pid {sleeper.pid} (sleep)" in groups["detail"]
        assert "R8" not in groups["detail"]
        assert groups["fix"] == (
            f"start the daemon (it kills leftovers): sloopctl daemon; or kill {sleeper.pid}"
        )
        assert report.status("store") == "ok"  # the kernel released the dead daemon's lock

        # The fix works: a starting daemon kills what the records name.
        daemon = new_daemon(sandbox, repo).start()
        try:
            assert sleeper.wait(timeout=10) == -signal.SIGKILL
            report = doctor_json(repo, "--socket", socket_of(daemon))
            assert report.code == 0, report.stdout
            assert report.check("groups")["detail"] == "no child process groups recorded"
        finally:
            assert daemon.stop() == 0, daemon.log()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_a_hung_daemon_is_named_with_its_pid(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo).start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    daemon.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        report = doctor_json(repo, "--state-dir", str(daemon.state_dir))
        assert time.monotonic() - started < 10
        assert report.code == 1
        socket_check = report.check("socket")
        assert socket_check["status"] == "fail"
        assert "no reply in time" in socket_check["detail"], socket_check
        assert f"names pid {pid}, which is alive" in socket_check["detail"]
        assert f"'kill {pid}' then 'sloopctl daemon'" in socket_check["fix"]
        store = report.check("store")  # sloopd store check refuses: the daemon holds the lock
        assert store["status"] == "warn", store
        assert f"locked by sloopd serve (pid {pid})" in store["detail"]
    finally:
        daemon.signal(signal.SIGCONT)
        assert daemon.stop() == 0, daemon.log()


# --- worktrees against runs -----------------------------------------------------------------


def test_stale_worktrees_warn_and_kept_ones_are_fine(bench: Bench) -> None:
    ok_agent = bench.argv("--write", "{ticket}.txt=done by {run}")
    failing = [{"name": "implement", "action": "agent", "command": bench.argv("--exit", "1")}]
    bench.setup(
        sloop_toml(ok_agent, flows={"broken": failing}),
        {"good": ticket_text("Good"), "bad": ticket_text("Bad", flow="broken")},
    )
    bench.start()
    bench.post("good")
    merged = bench.wait_run("good#1")
    assert merged["state"] == "merged"
    assert merged["worktree"] is None
    bench.post("bad")
    failed = bench.wait_run("bad#1")
    assert failed["state"] == "failed"
    assert failed["worktree"] is not None
    socket = socket_of(bench.daemon) if bench.daemon else ""

    report = doctor_json(bench.repo, "--socket", socket)
    assert report.code == 0, report.stdout
    worktrees = report.check("worktrees")
    assert worktrees["status"] == "ok", worktrees
    assert worktrees["detail"] == (
        "1 run checkout: 1 kept for inspection (sloopctl gc removes those)"
    )

    # The merged run's checkout, recreated at its old path, and a stray directory.
    stale = bench.worktree_of(merged["id"])
    git(bench.repo, "init", "-q", str(stale))
    stray = bench.worktree_of("R99")
    stray.mkdir()
    report = doctor(bench.repo, "--socket", socket)
    assert report.code == 0, report.stdout  # warnings only
    line = next(ln for ln in report.stdout.splitlines() if ln.split()[1] == "worktrees")
    assert line.startswith("warn  worktrees  ")
    report = doctor_json(bench.repo, "--socket", socket)
    worktrees = report.check("worktrees")
    assert worktrees["status"] == "warn", worktrees
    assert (
        f"{merged['id']} is merged and its checkout was removed, yet one is at {stale}"
        in worktrees["detail"]
    )
    assert f"{stray} is not a run checkout" in worktrees["detail"]
    assert f"rm -r {stale}" in worktrees["fix"]
    assert f"rm -r {stray}" in worktrees["fix"]

    # The fixes it names clear the warnings.
    shutil.rmtree(stale)
    stray.rmdir()
    assert doctor_json(bench.repo, "--socket", socket).status("worktrees") == "ok"


def test_a_run_in_flight_without_its_worktree_fails(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv("--hang")), {"hang": ticket_text("Hang")})
    bench.start()
    bench.post("hang")
    run = bench.wait_stage_running("hang#1", "implement")
    socket = socket_of(bench.daemon) if bench.daemon else ""

    report = doctor_json(bench.repo, "--socket", socket)
    assert report.code == 0, report.stdout
    assert report.check("worktrees")["detail"] == "1 run checkout: 1 in flight"
    groups = report.check("groups")
    assert groups["status"] == "ok"
    assert groups["detail"].startswith(f"1 recorded, 1 live: {run['id']}/implement#1: pid ")
    assert "runs in flight 1" in report.check("metrics")["detail"]

    shutil.rmtree(run["worktree"])
    report = doctor_json(bench.repo, "--socket", socket)
    assert report.code == 1
    worktrees = report.check("worktrees")
    assert worktrees["status"] == "fail", worktrees
    missing = f"{run['id']} is running but has no checkout at {run['worktree']}"
    assert missing in worktrees["detail"]
    assert worktrees["fix"].startswith(f"sloopctl abort {run['id']}, then 'sloopctl run T")


# --- the metrics view ---------------------------------------------------------------------------


def test_the_metrics_view_reads_the_prometheus_endpoint(sandbox: Path, repo: Path) -> None:
    port = free_loopback_port()
    daemon = ArgsDaemon(
        repo=repo,
        state_dir=sandbox / "state",
        socket_dir=sandbox / "s",
        extra_args=("--metrics", f"127.0.0.1:{port}"),
    ).start()
    try:
        client: Client = daemon.client()
        assert client.call("run", {"ref": "nothing-here"})["error"]["code"] == "not_found"
        url = f"http://127.0.0.1:{port}/metrics"
        report = doctor_json(repo, "--socket", socket_of(daemon), "--metrics-url", url)
        assert report.code == 0, report.stdout
        metrics = report.check("metrics")
        assert metrics["status"] == "ok"
        assert metrics["detail"] == (
            f"{url}: runs in flight 0, triggers queued 0 (due 0), gate open, "
            "runs finished none, request errors 1 (not_found=1)"
        )
        # The same from the environment.
        env = {"SLOOP_METRICS_URL": url}
        report = doctor_json(repo, "--socket", socket_of(daemon), env=env)
        assert report.check("metrics")["detail"].startswith(f"{url}: runs in flight 0")

        # Nothing listening there: the view fails and says where to look.
        dead = f"http://127.0.0.1:{free_loopback_port()}/metrics"
        report = doctor_json(repo, "--socket", socket_of(daemon), "--metrics-url", dead)
        assert report.code == 1
        metrics = report.check("metrics")
        assert metrics["status"] == "fail"
        assert metrics["detail"].startswith(f"cannot read {dead}: ")
        assert "--metrics HOST:PORT" in metrics["fix"]
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_the_metrics_view_after_a_walk_counts_finished_runs(bench: Bench) -> None:
    port = free_loopback_port()
    bench.setup(sloop_toml(bench.argv("--write", "{ticket}.txt=x")), {"good": ticket_text("G")})
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("good")
    assert bench.wait_run("good#1")["state"] == "merged"
    socket = socket_of(bench.daemon) if bench.daemon else ""
    url = f"http://127.0.0.1:{port}/metrics"
    report = doctor_json(bench.repo, "--socket", socket, "--metrics-url", url)
    assert report.code == 0, report.stdout
    assert "runs finished merged=1" in report.check("metrics")["detail"]
