"""``sloopd store migrate|backup|restore|check`` on a full disk: one line, never a traceback
(issue 34, item 13).

The state directory is a small tmpfs holding a daemon's store; a ballast fills it.  A
maintenance command that must write (a backup, a restore, a migration) is
refused with exit status 75 (EX_TEMPFAIL, as ``sloopd serve`` on a full disk) and one
line naming the state directory and the fix, leaving no half-written file; ``check``
and a ``migrate`` with nothing to do write nothing, and answer.  Once space returns
each command works again, and the store is as it was.

Skipped, with the reason, where mounting a tmpfs is refused (not root).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.store import SCHEMA_VERSION
from tests.migration.test_migrations import make_v1_store
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import query, sloopd
from tests.support.disk import fill, small_tmpfs, use_up_inodes

TMPFS_BYTES = 8 * 1024 * 1024
DISK_FULL_EXIT = 75  # sysexits.h EX_TEMPFAIL (docs/operator-guide.md, "Store maintenance")


@pytest.fixture
def small_state_dir(bench: Bench) -> Iterator[Path]:
    with small_tmpfs(bench, TMPFS_BYTES) as state:
        yield state


def store_cmd(command: str, state_dir: Path, *extra: str) -> tuple[int, str, str]:
    done = sloopd("store", command, "--state-dir", str(state_dir), *extra)
    return done.returncode, done.stdout, done.stderr


def a_stopped_daemons_store(bench: Bench) -> None:
    bench.setup(sloop_toml(bench.argv()), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    assert bench.wait_run("R1")["terminal"]
    assert bench.stop() == 0, bench.log()


def assert_refused_in_one_line(command: str, state: Path, code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err, (command, out, err)
    assert code == DISK_FULL_EXIT, (command, code, out, err)
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1, (command, err)
    assert str(state) in said[0], (command, said)
    assert "full" in said[0], (command, said)
    assert "free space" in said[0], (command, said)


@pytest.mark.parametrize("full", ["bytes", "inodes"])
def test_store_commands_on_a_full_disk_refuse_in_one_line(bench: Bench, full: str) -> None:
    """``bytes``: the filesystem has no block left; ``inodes``: bytes are free but no
    new file can be made (a backup)."""
    inodes = 400 if full == "inodes" else None
    with small_tmpfs(bench, TMPFS_BYTES, inodes=inodes) as state:
        a_stopped_daemons_store(bench)
        before = query(state, "SELECT id, state FROM runs ORDER BY id")
        backup = state.parent / "outside.sqlite3"
        code, out, err = store_cmd("backup", state)
        assert code == 0, (out, err)
        shutil.move(out.strip(), backup)
        saved = sorted((state / "backups").iterdir())
        if full == "bytes":
            fill(state / "ballast")
        else:
            assert use_up_inodes(state / "inodes") > 0

        # What must write is refused, and leaves nothing half-written behind.
        for command, extra in (("backup", ()), ("restore", (str(backup),))):
            code, out, err = store_cmd(command, state, *extra)
            assert_refused_in_one_line(command, state, code, out, err)
            assert sorted((state / "backups").iterdir()) == saved, command
            assert not list(state.glob("*.restore-tmp")), command
        # What needs no write answers: the lock holds without its holder's name.
        for command, answer in (("check", "store ok"), ("migrate", "nothing to do")):
            code, out, err = store_cmd(command, state)
            assert code == 0, (command, out, err)
            assert answer in out, (command, out, err)

        # Space returns: the store is as it was, and every command works again.
        if full == "bytes":
            (state / "ballast").unlink()
        else:
            shutil.rmtree(state / "inodes")
        assert query(state, "SELECT id, state FROM runs ORDER BY id") == before
        for command, extra in (("check", ()), ("backup", ()), ("restore", (str(backup),))):
            code, out, err = store_cmd(command, state, *extra)
            assert code == 0, (command, out, err)
        assert query(state, "SELECT id, state FROM runs ORDER BY id") == before


def test_a_migration_on_a_full_disk_refuses_in_one_line_and_changes_nothing(
    bench: Bench, small_state_dir: Path
) -> None:
    """An older store: the migration's backup, then its steps, need room."""
    state = small_state_dir / "old"
    make_v1_store(state)
    fill(small_state_dir / "ballast")
    code, out, err = store_cmd("migrate", state)
    assert_refused_in_one_line("migrate", state, code, out, err)
    (small_state_dir / "ballast").unlink()
    assert query(state, "PRAGMA user_version") == [(1,)]
    code, out, err = store_cmd("migrate", state)
    assert code == 0, (out, err)
    assert f"from schema version 1 to {SCHEMA_VERSION}" in out, out
