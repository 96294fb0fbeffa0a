"""``doctor``'s ``hardening`` check against real daemons in mount namespaces of their own.

Seen in 0.8.0 (issue 37): systemd as PID 1 of a container without CAP_SYS_ADMIN
started the unit without its ProtectSystem=/PrivateTmp= mounts and said so only at
debug level.  A daemon systemd started (``INVOCATION_ID`` set, as systemd sets it for a
service) whose ``/usr`` and ``/etc`` are writable is a warning; the same daemon in a
namespace where they are read-only, as the unit makes them, passes; a daemon no
service manager started has nothing to check.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.core import hardening
from tests.integration.test_doctor import doctor_json, socket_of
from tests.support.daemon import DaemonProcess, make_repo

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a read-only /usr and /etc for one daemon alone needs root and unshare(1)",
)
# What the unit's ProtectSystem=full does, in the daemon's own mount namespace.
PROTECT_SYSTEM = (
    "mount --bind /usr /usr && mount -o remount,bind,ro /usr && "
    'mount --bind /etc /etc && mount -o remount,bind,ro /etc && exec "$@"'
)


def started(root: Path, prefix: list[str], **env: str) -> DaemonProcess:
    (root / "r").mkdir(parents=True)
    repo = make_repo(root / "r", {"sloop.toml": '[agent]\ncommand = ["true"]\n'})
    daemon = DaemonProcess(
        repo=repo, state_dir=root / "st", socket_dir=root / "s", extra_env=env, prefix=prefix
    )
    return daemon.start()


@pytest.fixture
def daemons() -> Iterator[list[DaemonProcess]]:
    made: list[DaemonProcess] = []
    yield made
    for daemon in made:
        daemon.stop()


@needs_namespaces
def test_a_systemd_daemon_with_writable_usr_and_etc_is_warned_about(
    sandbox: Path, daemons: list[DaemonProcess]
) -> None:
    plain = started(sandbox / "a", ["unshare", "--mount", "sh", "-c", 'exec "$@"', "sh"],
                    INVOCATION_ID="0" * 32)  # fmt: skip
    daemons.append(plain)
    check = doctor_json(plain.repo, "--socket", socket_of(plain)).check("hardening")
    assert check["status"] == "warn", check
    assert "/usr and /etc" in check["detail"]
    assert "SYS_ADMIN" in check["fix"]

    hardened = started(sandbox / "b", ["unshare", "--mount", "sh", "-c", PROTECT_SYSTEM, "sh"],
                       INVOCATION_ID="1" * 32)  # fmt: skip
    daemons.append(hardened)
    check = doctor_json(hardened.repo, "--socket", socket_of(hardened)).check("hardening")
    assert check["status"] == "ok", check
    assert "in force" in check["detail"]


def test_a_daemon_no_service_manager_started_has_nothing_to_check(
    sandbox: Path, daemons: list[DaemonProcess]
) -> None:
    daemon = started(sandbox, [])
    daemons.append(daemon)
    check = doctor_json(daemon.repo, "--socket", socket_of(daemon)).check("hardening")
    assert check["status"] == "ok", check
    assert "not started by systemd" in check["detail"]


MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/root rw\n"
    "23 22 8:1 /usr /usr ro,relatime - ext4 /dev/root rw\n"
    "24 22 0:5 / /tmp rw,nosuid - tmpfs tmpfs rw\n"
    "25 22 8:1 /etc /etc rw,relatime - ext4 /dev/root rw\n"
    "26 25 8:1 /etc /etc ro,relatime - ext4 /dev/root rw\n"  # remounted read-only on top
    "27 22 8:1 /srv /my\\040repo rw - ext4 /dev/root rw\n"
)


def test_the_mount_table_is_read_as_the_kernel_writes_it() -> None:
    table = hardening.mounts(MOUNTINFO)
    assert table["/usr"] == ("ro", "relatime")
    assert table["/etc"][0] == "ro"  # the last mount of a point is the one in force
    assert hardening.covering(table, "/my repo/x") == "/my repo"
    assert hardening.covering(table, "/usrx") == "/"
    found = hardening.service({"INVOCATION_ID": "x"}, MOUNTINFO)
    assert found == {"manager": "systemd", "writable": [], "private_tmp": True}
    bare = hardening.service({}, "22 1 8:1 / / rw - ext4 /dev/root rw\n")
    assert bare == {"manager": None, "writable": ["/usr", "/etc"], "private_tmp": False}
