"""``sloopd serve`` as an operator meets it: paths, modes, signals, restarts, refusals."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
from pathlib import Path

import orjson
import pytest

from sloopd.core import paths
from tests.support.daemon import (
    Client,
    DaemonProcess,
    count_events,
    git,
    new_daemon,
    sloopd,
    wait_until,
)

SOCKET_ENV = ("SLOOP_SOCKET_DIR", "XDG_RUNTIME_DIR")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def answers(path: Path) -> bool:
    conn = Client(path)
    try:
        response = conn.call("show")
        return response["ok"] is True and response["data"]["kind"] == "dashboard"
    finally:
        conn.close()


def store_check(state_dir: Path) -> None:
    done = sloopd("store", "check", "--state-dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    assert "store ok" in done.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_then_stop_cleanly(sandbox: Path, repo: Path, sig: signal.Signals) -> None:
    (sandbox / "s").mkdir(mode=0o755)
    os.chmod(sandbox / "s", 0o755)  # a too-open directory is tightened
    daemon = new_daemon(sandbox, repo).start()
    assert daemon.proc is not None
    assert daemon.proc.stdout is not None
    # The first stdout line is the operator socket path, alone.
    assert daemon.socket == daemon.socket_dir / "operator.sock"
    assert stat.S_ISSOCK(daemon.socket.lstat().st_mode)
    assert mode(daemon.socket) == 0o600
    assert mode(daemon.socket_dir) == 0o700
    assert {"store.sqlite3", "lock", "daemon.json"} <= {p.name for p in daemon.state_dir.iterdir()}
    info = orjson.loads((daemon.state_dir / "daemon.json").read_bytes())
    assert info["pid"] == daemon.proc.pid
    assert info["socket"] == str(daemon.socket)
    idle = Client(daemon.socket)  # a connected client is let go at shutdown
    assert answers(daemon.socket)

    daemon.signal(sig)
    assert daemon.proc.wait(15) == 0, daemon.log()
    assert daemon.proc.stdout.read() == b""  # nothing after the socket line
    daemon.stop()
    assert idle.read_raw() == b""
    idle.close()
    assert not daemon.socket.exists()
    assert not (daemon.state_dir / "daemon.json").exists()
    # The store was closed: its WAL folded back, and it reopens whole.
    wal = daemon.state_dir / "store.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    store_check(daemon.state_dir)
    assert count_events(daemon.state_dir, "daemon_started") == 1
    assert count_events(daemon.state_dir, "daemon_stopped") == 1


def test_default_directories_with_xdg_runtime_dir(sandbox: Path, repo: Path) -> None:
    runtime = sandbox / "run"
    runtime.mkdir()
    subdir = repo / "deep" / "er"
    subdir.mkdir(parents=True)
    repo_id = hashlib.sha256(os.path.realpath(repo).encode()).hexdigest()[:12]
    daemon = DaemonProcess(
        repo=repo,
        state_dir=repo / ".git" / "sloop",
        socket_dir=runtime / "sloop" / repo_id,
        extra_env={"XDG_RUNTIME_DIR": str(runtime)},
        unset_env=("SLOOP_SOCKET_DIR",),
        pass_dirs=False,
        cwd=subdir,  # no --repo: the git top level of the working directory
        log_file=sandbox / "daemon.log",
    )
    try:
        daemon.start()
        assert daemon.socket == daemon.socket_dir / "operator.sock"
        assert mode(daemon.socket) == 0o600
        assert mode(daemon.socket_dir) == 0o700
        assert mode(daemon.socket_dir.parent) == 0o700
        names = {p.name for p in daemon.state_dir.iterdir()}
        assert {"store.sqlite3", "lock", "daemon.json"} <= names
        data = daemon.client().ok("show")
        assert data["daemon"]["repo"] == os.path.realpath(repo)
        assert data["daemon"]["state_dir"] == str(daemon.state_dir)
    finally:
        assert daemon.stop() == 0, daemon.log()
    assert not (daemon.state_dir / "daemon.json").exists()
    assert not daemon.socket_dir.joinpath("operator.sock").exists()


def test_sloop_socket_dir_wins_over_xdg(sandbox: Path, repo: Path) -> None:
    daemon = DaemonProcess(
        repo=repo,
        state_dir=sandbox / "state",
        socket_dir=sandbox / "env-s",
        extra_env={"SLOOP_SOCKET_DIR": str(sandbox / "env-s"), "XDG_RUNTIME_DIR": str(sandbox)},
        pass_dirs=False,
    )
    try:
        daemon.start()
        assert daemon.socket == sandbox / "env-s" / "operator.sock"
        assert mode(daemon.socket) == 0o600
        assert mode(sandbox / "env-s") == 0o700
        assert not (sandbox / "sloop").exists()
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_the_state_dir_is_in_the_git_common_dir_of_a_linked_worktree(
    sandbox: Path, repo: Path
) -> None:
    git(repo, "worktree", "add", "-q", "-b", "side", str(sandbox / "wt"))
    layout = paths.resolve(sandbox / "wt", None, None)
    assert layout.state_dir == Path(os.path.realpath(repo)) / ".git" / "sloop"


def test_sighup_reloads_and_keeps_the_last_good_config(daemon: DaemonProcess) -> None:
    config = daemon.repo / "sloop.toml"
    config.write_text('[repo]\nparallel = "many"\n')
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in daemon.log())
    assert "repo.parallel" in daemon.log()
    assert daemon.alive()
    assert daemon.client().ok("show")["kind"] == "dashboard"

    config.write_text("[repo]\nparallel = 3\n")
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded" in daemon.log())
    assert daemon.client().ok("status")["gate"]["state"] == "open"


def test_a_bad_config_at_start_is_refused_naming_the_key(sandbox: Path, repo: Path) -> None:
    (repo / "sloop.toml").write_text("[repo]\nparalel = 3\n")
    daemon = new_daemon(sandbox, repo)
    code, stdout, log = daemon.run_to_exit()
    assert code != 0
    assert stdout == ""
    assert "repo.paralel" in log
    assert not (daemon.socket_dir / "operator.sock").exists()
    # Nothing was left locked: a good file starts.
    (repo / "sloop.toml").write_text("[repo]\nparallel = 3\n")
    daemon.start()
    assert daemon.stop() == 0, daemon.log()


def test_a_second_daemon_on_the_same_store_exits_and_the_first_keeps_serving(
    sandbox: Path, repo: Path, daemon: DaemonProcess
) -> None:
    assert daemon.proc is not None
    assert daemon.socket is not None
    second = new_daemon(sandbox, repo)
    code, stdout, log = second.run_to_exit(timeout=15)
    assert code != 0
    assert stdout == ""
    assert "locked by" in log
    assert f"pid {daemon.proc.pid}" in log
    assert daemon.alive()
    assert daemon.socket.exists()
    assert answers(daemon.socket)
    info = orjson.loads((daemon.state_dir / "daemon.json").read_bytes())
    assert info["pid"] == daemon.proc.pid


def test_a_daemon_for_another_store_does_not_steal_a_live_socket(
    sandbox: Path, repo: Path, daemon: DaemonProcess
) -> None:
    assert daemon.socket is not None
    other = DaemonProcess(repo=repo, state_dir=sandbox / "other", socket_dir=daemon.socket_dir)
    code, stdout, log = other.run_to_exit(timeout=15)
    assert code != 0
    assert stdout == ""
    assert "already answers" in log
    assert answers(daemon.socket)


def test_kill_9_leaves_a_store_that_reopens_and_a_socket_that_is_replaced(
    sandbox: Path, repo: Path
) -> None:
    first = new_daemon(sandbox, repo).start()
    assert first.socket is not None
    assert first.proc is not None
    assert answers(first.socket)
    first.kill9()
    assert first.socket.exists()  # stale: nobody cleaned up
    assert (first.state_dir / "daemon.json").exists()
    store_check(first.state_dir)  # the kernel released the lock; the store is whole

    second = new_daemon(sandbox, repo).start()
    try:
        assert second.socket == first.socket
        assert second.proc is not None
        assert second.proc.pid != first.proc.pid
        assert answers(second.socket)
        info = orjson.loads((second.state_dir / "daemon.json").read_bytes())
        assert info["pid"] == second.proc.pid
        assert second.client().ok("show")["daemon"]["store"] == "ok"
    finally:
        assert second.stop() == 0, second.log()
    store_check(second.state_dir)
    # The first start's event (still in the WAL when it died) survived the crash.
    assert count_events(second.state_dir, "daemon_started") == 2
    assert count_events(second.state_dir, "daemon_stopped") == 1
