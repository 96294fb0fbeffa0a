"""``sloopctl post`` from the host to a daemon that sees the repository at another path.

Seen in 0.8.0 with the container image: the daemon served the repository bind-mounted
at ``/repo``, the operator ran ``sloopctl post tickets/h.md`` in the host folder, and
the daemon refused ``<host path>/tickets/h.md: outside the repository /repo``.  Here
the daemon runs in a mount namespace of its own in which the repository is bound at
another path (what a container does), and the host's ``sloopctl`` posts from the host
folder.  A post from another repository must be refused, never register that
repository's file under the same path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, make_repo, sloopctl_argv, sloopctl_env
from tests.support.tickets import SLOOP_TOML, ticket_text

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="binding the repository at another path for the daemon alone needs root and "
    "unshare(1) (a mount namespace, as a container has)",
)

# The daemon's view: its own mount namespace, the host folder bound at another path.
BIND_THEN_EXEC = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


@pytest.fixture
def served(sandbox: Path) -> Iterator[tuple[Path, Path, DaemonProcess]]:
    (sandbox / "host").mkdir()
    host = make_repo(sandbox / "host", {"sloop.toml": SLOOP_TOML})
    inside = sandbox / "inside"  # empty on the host: only the daemon sees the repository
    inside.mkdir()
    daemon = DaemonProcess(
        repo=inside,
        state_dir=sandbox / "state",
        socket_dir=sandbox / "s",
        prefix=["unshare", "--mount", "sh", "-c", BIND_THEN_EXEC, "sh", str(host), str(inside)],
    )
    daemon.start()
    try:
        yield host, inside, daemon
    finally:
        daemon.stop()


def sloopctl(socket: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sloopctl_argv(socket, *args),
        capture_output=True,
        text=True,
        env=sloopctl_env(),
        cwd=cwd,
        timeout=60,
        check=False,
    )


def registered(daemon: DaemonProcess) -> list[str]:
    reply = daemon.client().call("show")
    return sorted(row["path"] for row in reply["data"]["tickets"])


def test_a_host_post_reaches_a_daemon_that_sees_the_repository_elsewhere(
    served: tuple[Path, Path, DaemonProcess],
) -> None:
    host, inside, daemon = served
    assert daemon.socket is not None
    assert not any(inside.iterdir()), "the bind must be the daemon's alone"
    (host / "tickets").mkdir()
    (host / "tickets" / "h.md").write_text(ticket_text("From the host"))
    (host / "docs").mkdir()
    (host / "docs" / "deep.md").write_text(ticket_text("Posted from a subfolder"))
    done = sloopctl(daemon.socket, host, "post", "tickets/h.md", "--hold")
    assert done.returncode == 0, done.stderr
    # From another folder of the repository, by a relative path up and over.
    done = sloopctl(daemon.socket, host / "docs", "post", "../docs/deep.md", "--hold")
    assert done.returncode == 0, done.stderr
    assert registered(daemon) == ["docs/deep.md", "tickets/h.md"]


def test_a_post_from_another_repository_is_refused_and_registers_nothing(
    served: tuple[Path, Path, DaemonProcess], sandbox: Path
) -> None:
    host, _, daemon = served
    assert daemon.socket is not None
    (host / "tickets").mkdir()
    (host / "tickets" / "same.md").write_text(ticket_text("The daemon's own"))
    (sandbox / "other").mkdir()
    other = make_repo(sandbox / "other", {"sloop.toml": SLOOP_TOML})
    (other / "tickets").mkdir()
    (other / "tickets" / "same.md").write_text(ticket_text("Another repository's"))
    (other / "tickets" / "only-here.md").write_text(ticket_text("Nowhere in the daemon's"))

    differs = sloopctl(daemon.socket, other, "post", "tickets/same.md")
    assert differs.returncode != 0
    assert "has another file at this path" in differs.stderr
    assert "another repository" in differs.stderr
    missing = sloopctl(daemon.socket, other, "post", "tickets/only-here.md")
    assert missing.returncode != 0
    assert "no such file in the daemon's repository" in missing.stderr
    assert registered(daemon) == []
    # The daemon's own file, posted from its own repository, still goes in.
    done = sloopctl(daemon.socket, host, "post", "tickets/same.md", "--hold")
    assert done.returncode == 0, done.stderr
    assert registered(daemon) == ["tickets/same.md"]


def test_the_digest_through_the_socket_refuses_a_changed_file_and_a_malformed_digest(
    served: tuple[Path, Path, DaemonProcess],
) -> None:
    """The protocol's ``post.sha256`` (0.9.0), as any client sends it."""
    host, _, daemon = served
    (host / "tickets").mkdir()
    (host / "tickets" / "d.md").write_text(ticket_text("Digest"))
    client = daemon.client()
    reply = client.call("post", {"path": "tickets/d.md", "sha256": "0" * 64, "hold": True})
    assert reply["ok"] is False, reply
    assert reply["error"]["code"] == "invalid_arguments"
    assert reply["error"]["details"] == {"path": "tickets/d.md"}
    assert "has another file at this path" in reply["error"]["message"]
    reply = client.call("post", {"path": "tickets/d.md", "sha256": "NOT-HEX", "hold": True})
    assert reply["ok"] is False, reply
    assert reply["error"]["details"]["field"] == "sha256"
    assert reply["id"].startswith("t")  # the request's own id, echoed
    assert registered(daemon) == []
    good = hashlib.sha256((host / "tickets" / "d.md").read_bytes()).hexdigest()
    reply = client.call("post", {"path": "tickets/d.md", "sha256": good, "hold": True})
    assert reply["ok"] is True, reply
    assert registered(daemon) == ["tickets/d.md"]
