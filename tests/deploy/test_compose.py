"""deploy/container/compose.yaml as it runs: Debian's podman-compose 1.0.3 driving the
test's podman, and docker-compose 1.29.2 (which needs a Docker daemon to run
anything, and has none here) checking the file.

podman-compose 1.0.3 puts every service on the project's network (it passes
``--net`` even beside ``network_mode``, which podman then refuses), so the test adds
one override, the network made ``internal``: the containers get no route out, and
the client reaches the daemon through the bind-mounted socket directory only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy import engine, hosts
from tests.deploy.conftest import package_version
from tests.deploy.engine import Podman
from tests.support.tickets import ticket_text

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1200)]

COMPOSE = Path(__file__).resolve().parents[2] / "deploy/container/compose.yaml"
INTERNAL = "networks:\n  default:\n    internal: true\n"


@dataclass(frozen=True, slots=True)
class Project:
    podman: Podman
    name: str
    override: Path
    repo: Path
    sockets: Path

    def environment(self) -> dict[str, str]:
        return self.podman.environment(
            {"SLOOP_REPO": str(self.repo), "SLOOP_SOCKETS": str(self.sockets)}
        )

    def compose(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["podman-compose", "-p", self.name, "-f", str(COMPOSE), "-f", str(self.override)]
        return subprocess.run(
            [*argv, *args],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    @property
    def daemon(self) -> str:
        return f"{self.name}_sloopd_1"


@pytest.fixture(scope="module")
def project(podman: Podman, daemon_image: str) -> Iterator[Project]:
    if shutil.which("podman-compose") is None:
        engine.unavailable("podman-compose is not installed (`make deploy` installs it)")
    root = hosts.short_dir("sloop-compose-")
    files = {"sloop.toml": hosts.EXAMPLE_AGENT, "tickets/hello.md": ticket_text("Say hello")}
    repo = hosts.make_repository(root, files, hosts.SLOOP_UID)
    override = root / "internal.yaml"
    override.write_text(INTERNAL)
    name = f"{engine.PREFIX}-compose-{os.getpid()}"
    project = Project(podman, name, override, repo, hosts.socket_dir(root, hosts.SLOOP_UID))
    try:
        yield project
    finally:
        project.compose("down")
        podman.run("rm", "--force", "--time", "0", project.daemon, check=False)
        podman.run("network", "rm", "--force", f"{name}_default", check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_up_starts_the_daemon_on_the_bind_mounted_socket_directory(project: Project) -> None:
    done = project.compose("up", "-d", "sloopd")
    assert done.returncode == 0, done.stdout + done.stderr
    socket = project.sockets / "operator.sock"
    hosts.wait_for("the operator socket", lambda: socket.exists() or None)
    # The host's sloopctl, through the bind mount (a named volume's would refuse).
    shown = hosts.host_sloopctl(socket, "show")
    assert shown.returncode == 0, shown.stderr


def test_the_client_service_posts_and_the_ticket_merges(project: Project) -> None:
    shown = project.compose("run", "--rm", "sloopctl")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"sloopd {package_version()}" in shown.stdout
    posted = project.compose("run", "--rm", "sloopctl", "post", "tickets/hello.md")
    assert posted.returncode == 0, posted.stdout + posted.stderr
    socket = project.sockets / "operator.sock"

    def merged() -> bool | None:
        reply = hosts.envelope(hosts.host_sloopctl(socket, "--json", "show", "hello"))
        return True if reply["data"]["value"]["state"] == "merged" else None

    hosts.wait_for("the ticket to merge", merged)


def test_the_health_check_runs_on_demand(project: Project) -> None:
    done = project.podman.run("healthcheck", "run", project.daemon, check=False)
    assert done.returncode == 0, done.stderr


def test_down_stops_the_daemon_cleanly(project: Project) -> None:
    done = project.compose("down")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (project.sockets / "operator.sock").exists()
    exists = project.podman.run("container", "exists", project.daemon, check=False)
    assert exists.returncode != 0


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    if shutil.which("docker-compose") is None:
        engine.unavailable("docker-compose is not installed (`make deploy` installs it)")
    env = dict(os.environ, SLOOP_REPO=str(tmp_path), SLOOP_SOCKETS=str(tmp_path))
    done = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
