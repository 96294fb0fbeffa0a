"""deploy/systemd/sloopd@.service run by systemd 252 as PID 1 of a container.

The container host (tests/deploy/unit-host.Containerfile) installs Sloop as
docs/deploy.md says and copies the unit file as it is; the environment files are
deploy/systemd/example.env with ``SLOOP_REPO`` set. One drop-in shortens the
watchdog (``WatchdogSec=4``, ``RestartSec=1``) so its test waits seconds, not 35.

``--cap-add SYS_ADMIN`` is what lets systemd apply the unit's hardening (its mount
namespace: read-only /usr and /etc, private /tmp and /dev); without it systemd
starts the service unhardened and says so only at debug level, so the hardening
test reads the daemon's own mount table rather than trusting the start.

One systemd host serves the module, in order; the last test stops the daemon.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy import engine, hosts
from tests.deploy.engine import Podman
from tests.support.tickets import ticket_text

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
SOCKET = "/run/sloop/myrepo/operator.sock"
# Sloop lives in /opt/sloop's venv here (docs/deploy.md's install), so the example
# agent runs with that venv's interpreter (/opt is in the sandbox's allowlist).
AGENT = '[agent]\ncommand = ["/opt/sloop/bin/python3", "-m", "sloopd.examples.agent"]\n'
DROP_IN = "[Service]\nWatchdogSec=4\nRestartSec=1\n"
SECOND_FLOW = (
    '\n[[flows.second.stages]]\nname = "implement"\naction = "agent"\n'
    'prompt = "Implement the ticket. Commit your work."\n'
)


@dataclass(frozen=True, slots=True)
class UnitHost:
    podman: Podman
    name: str
    srv: Path  # bind-mounted at /srv/sloop

    def sh(self, script: str, check: bool = True) -> str:
        done = self.podman.run("exec", self.name, "sh", "-c", script, check=check)
        return done.stdout

    def code(self, script: str) -> int:
        return self.podman.run("exec", self.name, "sh", "-c", script, check=False).returncode

    def prop(self, unit: str, name: str) -> str:
        return self.sh(f"systemctl show --property {name} --value {unit}").strip()

    def sloopctl(self, *args: str) -> int:
        argv = " ".join(["runuser -u sloop -- sloopctl --socket", SOCKET, *args])
        return self.code(argv)


def env_file(repo: str) -> str:
    text = (ROOT / "deploy/systemd/example.env").read_text()
    return re.sub(r"^SLOOP_REPO=.*$", f"SLOOP_REPO={repo}", text, flags=re.M)


@pytest.fixture(scope="module")
def host(podman: Podman, unit_image: str) -> Iterator[UnitHost]:
    srv = hosts.short_dir("sloop-unit-")
    name = engine.session_name("systemd")
    podman.run(
        *("run", "--detach", "--name", name, "--network", "none", "--systemd", "always"),
        # SYS_ADMIN: systemd's own mount namespaces for the unit's hardening;
        # unmask=/proc/*: bubblewrap's fresh /proc, as for the daemon's image.
        *("--cap-add", "SYS_ADMIN", "--security-opt", "unmask=/proc/*"),
        *("--volume", f"{srv}:/srv/sloop", unit_image),
    )
    unit_host = UnitHost(podman, name, srv)
    try:
        # `running` or `degraded` (a unit a container cannot start): both are booted.
        unit_host.sh("systemctl is-system-running --wait", check=False)
        uid = int(unit_host.sh("id -u sloop"))
        for repo, toml in (("myrepo", AGENT), ("bad", "[agent\n")):
            files = {"sloop.toml": toml, "tickets/hello.md": ticket_text("Say hello")}
            hosts.make_repository(srv, files, uid, name=repo)
            envs = env_file(f"/srv/sloop/{repo}")
            unit_host.podman.run(
                "exec",
                "-i",
                name,
                "sh",
                "-c",
                f"cat > /etc/sloopd/{repo}.env",
                input=envs.encode(),
            )
        unit_host.podman.run(
            "exec",
            "-i",
            name,
            "sh",
            "-c",
            "mkdir -p /etc/systemd/system/sloopd@.service.d && "
            "cat > /etc/systemd/system/sloopd@.service.d/test.conf && systemctl daemon-reload",
            input=DROP_IN.encode(),
        )
        yield unit_host
    finally:
        podman.run("rm", "--force", "--time", "0", name, check=False)
        shutil.rmtree(srv, ignore_errors=True)


def test_start_returns_once_the_daemon_answers(host: UnitHost) -> None:
    assert host.code("systemctl start sloopd@myrepo") == 0
    # Type=notify: `start` returned, so READY=1 came, so the socket answers now.
    assert host.sloopctl("show") == 0
    assert host.prop("sloopd@myrepo", "ActiveState") == "active"
    assert host.sh(f"stat -c '%U %a' {Path(SOCKET).parent}").strip() == "sloop 700"


def test_a_ticket_merges_under_the_unit(host: UnitHost) -> None:
    assert host.sloopctl("post", "/srv/sloop/myrepo/tickets/hello.md") == 0

    def merged() -> bool | None:
        log = host.sh("git -C /srv/sloop/myrepo -c safe.directory='*' log --format=%an main")
        return True if "sloop-example" in log else None

    try:
        hosts.wait_for("the ticket to merge", merged)
    except AssertionError:
        journal = host.sh("journalctl --no-pager -u sloopd@myrepo | tail -40", check=False)
        journal += host.sh(
            f"runuser -u sloop -- sloopctl --socket {SOCKET} show hello", check=False
        )
        raise AssertionError(f"not merged; the daemon's journal:\n{journal}") from None


@dataclass(frozen=True, slots=True)
class Mount:
    device: str  # major:minor of the file system: a new tmpfs gets a new one
    root: str  # the folder of that file system mounted here
    options: frozenset[str]


def mounts(host: UnitHost, pid: str) -> dict[str, Mount]:
    """Mount point -> its mount, from /proc/PID/mountinfo (the last mount wins)."""
    table: dict[str, Mount] = {}
    for line in host.sh(f"cat /proc/{pid}/mountinfo").splitlines():
        fields = line.split()
        table[fields[4]] = Mount(fields[2], fields[3], frozenset(fields[5].split(",")))
    return table


def test_the_hardening_is_in_force(host: UnitHost) -> None:
    pid = host.prop("sloopd@myrepo", "MainPID")
    daemon, outside = mounts(host, pid), mounts(host, "1")
    # ProtectSystem=full: /usr and /etc read-only for the daemon, as they are not for
    # PID 1 (where they are no mount points of their own at all).
    for path in ("/usr", "/etc"):
        assert "ro" in daemon[path].options, (path, daemon.get(path))
        assert path not in outside or "rw" in outside[path].options
    # PrivateTmp: a /tmp of its own (a folder of the host's /tmp bound over it);
    # PrivateDevices: a new tmpfs on /dev.
    assert "systemd-private-" in daemon["/tmp"].root
    assert daemon["/dev"].device != outside["/dev"].device
    status = host.sh(f"cat /proc/{pid}/status")
    # NoNewPrivileges=yes and an empty CapabilityBoundingSet=.
    assert re.search(r"^NoNewPrivs:\s+1$", status, flags=re.M)
    assert re.search(r"^CapBnd:\s+0+$", status, flags=re.M)


def test_reload_rereads_sloop_toml(host: UnitHost) -> None:
    second = host.srv / "myrepo/tickets/second.md"
    second.write_text(ticket_text("Second", flow="second"))
    post = "post --hold /srv/sloop/myrepo/tickets/second.md"
    assert host.sloopctl(post) != 0  # no flow 'second' yet
    with (host.srv / "myrepo/sloop.toml").open("a") as toml:
        toml.write(SECOND_FLOW)
    hosts.hand_over(host.srv / "myrepo", int(host.sh("id -u sloop")))
    pid = host.prop("sloopd@myrepo", "MainPID")
    assert host.code("systemctl reload sloopd@myrepo") == 0
    hosts.wait_for("the reloaded flow", lambda: True if host.sloopctl(post) == 0 else None)
    assert host.prop("sloopd@myrepo", "MainPID") == pid


def test_the_watchdog_restarts_a_stuck_daemon(host: UnitHost) -> None:
    unit = "sloopd@myrepo"
    pid, restarts = host.prop(unit, "MainPID"), int(host.prop(unit, "NRestarts"))
    host.sh(f"kill -STOP {pid}")

    def restarted() -> str | None:
        now = host.prop(unit, "MainPID")
        active = host.prop(unit, "ActiveState") == "active"
        return now if active and now not in {pid, "0"} else None

    new_pid = hosts.wait_for("the watchdog's restart", restarted)
    assert int(host.prop(unit, "NRestarts")) == restarts + 1
    assert host.code(f"test -d /proc/{pid}") != 0
    hosts.wait_for("the new daemon", lambda: True if host.sloopctl("show") == 0 else None)
    assert new_pid != pid


def test_a_bad_config_fails_the_start(host: UnitHost) -> None:
    assert host.code("systemctl start sloopd@bad") != 0
    assert host.prop("sloopd@bad", "ActiveState") in {"failed", "activating"}
    assert host.code("test -e /run/sloop/bad/operator.sock") != 0


def test_stop_exits_cleanly_and_removes_the_socket_directory(host: UnitHost) -> None:
    assert host.code("systemctl stop sloopd@myrepo") == 0
    assert host.prop("sloopd@myrepo", "ExecMainStatus") == "0"
    assert host.prop("sloopd@myrepo", "Result") == "success"
    assert host.code("test -e /run/sloop/myrepo") != 0
