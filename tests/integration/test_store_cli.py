"""``sloopd store migrate|backup|restore|check`` and a store newer than the binary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sloopd.store import SCHEMA_VERSION, db
from sloopd.wire import api
from tests.support.daemon import (
    DaemonProcess,
    count_events,
    new_daemon,
    set_user_version,
    sloopd,
)

MAINTENANCE = ("migrate", "backup", "check")


def store_cmd(command: str, state_dir: Path, *extra: str) -> tuple[int, str]:
    done = sloopd("store", command, "--state-dir", str(state_dir), *extra)
    return done.returncode, done.stdout + done.stderr


def backups(state_dir: Path) -> set[Path]:
    directory = state_dir / "backups"
    return set(directory.iterdir()) if directory.exists() else set()


def test_maintenance_refuses_while_a_daemon_holds_the_lock(
    sandbox: Path, repo: Path, daemon: DaemonProcess
) -> None:
    assert daemon.proc is not None
    state = daemon.state_dir
    dummy = sandbox / "some-backup.sqlite3"
    dummy.write_bytes(b"")
    before = backups(state)
    for command, extra in [*((c, ()) for c in MAINTENANCE), ("restore", (str(dummy),))]:
        code, output = store_cmd(command, state, *extra)
        assert code != 0, (command, output)
        assert "locked by" in output, (command, output)
        assert f"pid {daemon.proc.pid}" in output, (command, output)
    assert backups(state) == before
    assert daemon.alive()
    assert daemon.client().ok("show")["daemon"]["store"] == "ok"


def test_backup_restore_check_and_migrate_without_a_daemon(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo)
    state = daemon.state_dir
    daemon.start()
    assert daemon.stop() == 0, daemon.log()

    code, output = store_cmd("backup", state)
    assert code == 0, output
    saved = Path(output.strip())
    assert saved.parent == state / "backups"
    assert saved.is_file()

    daemon.start()  # a second session adds events the backup does not have
    assert daemon.stop() == 0, daemon.log()
    assert count_events(state, "daemon_started") == 2

    code, output = store_cmd("check", state)
    assert code == 0, output
    assert "store ok" in output, output
    code, output = store_cmd("migrate", state)
    assert code == 0, output
    assert "nothing to do" in output, output

    code, output = store_cmd("restore", state, str(saved))
    assert code == 0, output
    assert "current store saved as" in output  # restore keeps what it replaces
    assert len(backups(state)) == 2
    assert count_events(state, "daemon_started") == 1
    code, output = store_cmd("check", state)
    assert code == 0, output

    daemon.start()  # and a daemon serves the restored store
    assert daemon.client().ok("show")["daemon"]["store"] == "ok"
    assert daemon.stop() == 0, daemon.log()
    assert count_events(state, "daemon_started") == 2


def test_restore_refuses_a_file_that_is_not_a_store(sandbox: Path, repo: Path) -> None:
    daemon = new_daemon(sandbox, repo).start()
    assert daemon.stop() == 0
    junk = sandbox / "junk.sqlite3"
    junk.write_bytes(b"this is not a database" * 100)
    code, output = store_cmd("restore", daemon.state_dir, str(junk))
    assert code != 0
    assert "Traceback" not in output, output
    code, output = store_cmd("check", daemon.state_dir)
    assert code == 0, output


def test_check_without_a_store_fails(sandbox: Path) -> None:
    code, output = store_cmd("check", sandbox / "nothing")
    assert code == 1
    assert "no store" in output


@pytest.fixture
def too_new(sandbox: Path, repo: Path) -> DaemonProcess:
    """A stopped daemon whose store claims schema version 99."""
    daemon = new_daemon(sandbox, repo).start()
    assert daemon.stop() == 0
    set_user_version(daemon.state_dir, 99)
    return daemon


def test_a_newer_store_is_refused_and_only_show_is_served(too_new: DaemonProcess) -> None:
    state = too_new.state_dir
    events = count_events(state, "daemon_started")
    too_new.start()
    try:
        client = too_new.client()
        data = client.ok("show")
        assert data["kind"] == "dashboard"
        assert data["daemon"]["store"] == "refused"
        reason = data["daemon"]["reason"]
        assert "99" in reason
        assert str(SCHEMA_VERSION) in reason
        assert data["runs"] == data["tickets"] == data["queued_triggers"] == []
        assert data["recent"] == []
        assert data["recent_total"] == 0
        # Its epoch never moves (0.7.0): a held show waits out its wait_ms.
        started = time.monotonic()
        held = client.ok("show", {"since": data["epoch"], "wait_ms": 300})
        assert held["epoch"] == data["epoch"]
        assert time.monotonic() - started >= 0.25
        refused: list[tuple[str, dict[str, Any]]] = [
            ("hold", {"ref": "T1"}),
            ("ready", {"ref": "T1"}),
            ("post", {"path": "tickets/a.md"}),
            ("run", {"ref": "a"}),
            ("abort", {"run": "R1"}),
            ("logs", {"run": "R1"}),
            ("events", {}),
            ("status", {}),
            ("list", {}),
            ("wait", {"run": "R1", "timeout_ms": 0}),
            ("gc", {}),
        ]
        for verb, args in refused:
            assert api.VERBS[verb].operator
            error = client.error(verb, args)
            assert error["code"] == "daemon_unavailable", (verb, error)
            assert error["details"] == {"reason": reason}, (verb, error)
        # Envelope checks still come first.
        assert client.error("hold", {})["code"] == "invalid_arguments"
        assert client.error("note", {"text": "x"})["code"] == "unauthorized"
        assert too_new.alive()
    finally:
        assert too_new.stop() == 0, too_new.log()
    # Untouched: still version 99, no event appended by the refusing daemon.
    assert db.peek_version(state) == 99
    assert count_events(state, "daemon_started") == events
    code, output = store_cmd("check", state)
    assert code == 1
    assert "99" in output
    code, output = store_cmd("migrate", state)
    assert code != 0
    assert "newer" in output
    assert db.peek_version(state) == 99
