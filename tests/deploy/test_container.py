"""deploy/container/Containerfile built offline and run with the least privileges
that work: a ticket merges inside a bubblewrap sandbox, driven from the host's
``sloopctl`` through the bind-mounted socket directory; metrics, reload and stop.

One daemon container serves the module, in order: the tests below share it and the
last one stops it (``test_stop_...``), as an operator's session would.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy import engine, hosts
from tests.deploy.conftest import package_version
from tests.deploy.engine import Podman
from tests.support.tickets import ticket_text

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1200)]

# The narrowest `podman run` options the daemon and its sandboxes work with
# (docs/deploy.md): no network, no capability, no privilege gain, a read-only root.
# unmask=/proc/*: bubblewrap mounts a fresh /proc for each sandbox, which the kernel
# allows only where nothing is mounted over the /proc it sees, and podman masks
# /proc/acpi, /proc/kcore, ... (unmask=/proc/sys, seccomp=unconfined do not do).
LEAST_PRIVILEGE = (
    *("--network", "none"),
    *("--cap-drop", "ALL"),
    *("--security-opt", "no-new-privileges"),
    "--read-only",
    *("--security-opt", "unmask=/proc/*"),
)
SECOND_FLOW = """
[[flows.second.stages]]
name = "implement"
action = "agent"
prompt = "Implement the ticket. Commit your work."
"""


@dataclass(frozen=True, slots=True)
class Served:
    podman: Podman
    name: str
    repo: Path
    sockets: Path

    @property
    def socket(self) -> Path:
        return self.sockets / "operator.sock"

    def inside(self, *argv: str) -> str:
        """A command in the daemon's container, as its user (the image's USER)."""
        return self.podman.run("exec", self.name, *argv).stdout


def start(podman: Podman, image: str, what: str, *options: str) -> Served:
    root = hosts.short_dir("sloop-deploy-")
    files = {"sloop.toml": hosts.EXAMPLE_AGENT, "tickets/hello.md": ticket_text("Say hello")}
    repo = hosts.make_repository(root, files, hosts.SLOOP_UID)
    sockets = hosts.socket_dir(root, hosts.SLOOP_UID)
    name = engine.session_name(what)
    podman.run(
        *("run", "--detach", "--name", name, *options),
        *("--volume", f"{repo}:/repo", "--volume", f"{sockets}:/run/sloop"),
        # Appended to the image's `sloopd serve --repo /repo`.
        *(image, "--metrics", "127.0.0.1:9464"),
    )
    served = Served(podman, name, repo, sockets)
    hosts.wait_for("the operator socket", lambda: served.socket.exists() or None)
    return served


@pytest.fixture(scope="module")
def served(podman: Podman, daemon_image: str) -> Iterator[Served]:
    served = start(podman, daemon_image, "daemon", *LEAST_PRIVILEGE)
    yield served
    podman.run("rm", "--force", "--time", "0", served.name, check=False)
    shutil.rmtree(served.repo.parent, ignore_errors=True)


def test_image_is_what_the_containerfile_says(podman: Podman, daemon_image: str) -> None:
    config = podman.run(
        "image",
        "inspect",
        "--format",
        "{{json .Config.User}} {{json .Config.Entrypoint}}",
        daemon_image,
    ).stdout.split(" ", 1)
    assert config[0] == '"sloop:sloop"'
    assert '"tini","--","sloopd","serve","--repo","/repo"' in config[1]
    # --format docker kept the HEALTHCHECK (the OCI format drops it).
    health = podman.run("image", "inspect", "--format", "{{json .HealthCheck}}", daemon_image)
    assert "sloopctl --socket /run/sloop/operator.sock show" in health.stdout


def test_the_host_sloopctl_reaches_the_daemon(served: Served) -> None:
    done = hosts.host_sloopctl(served.socket, "show")
    assert done.returncode == 0, done.stderr
    assert f"sloopd {package_version()}" in done.stdout
    checks = hosts.doctor_checks(served.socket)
    # The sandbox check is the daemon's own probe of every namespace and mount a
    # stage uses: ok means agents really run in bubblewrap in this container.
    assert checks["sandbox"] == "ok", checks
    assert checks["socket"] == "ok", checks


def ticket_state(served: Served, ticket: str) -> str | None:
    done = hosts.host_sloopctl(served.socket, "--json", "show", ticket)
    reply = hosts.envelope(done)
    if not reply.get("ok"):
        return None
    state = reply["data"]["value"]["state"]
    return state if isinstance(state, str) else None


def test_a_ticket_merges_inside_the_sandbox(served: Served) -> None:
    # Posted by the container's own sloopctl, where the repository is /repo, as
    # compose's client service does (the host's path means nothing to the daemon).
    served.inside("sloopctl", "--socket", "/run/sloop/operator.sock", "post", "tickets/hello.md")
    state = hosts.wait_for(
        "the ticket to settle",
        lambda: s if (s := ticket_state(served, "hello")) in {"merged", "failed"} else None,
    )
    assert state == "merged"
    assert hosts.host_git(served.repo, "show", "--name-only", "--format=%an", "main") == (
        "sloop-example\n\nnotes/T1.md"
    )


def test_the_host_sloopctl_posts_a_ticket_of_the_mounted_repository(served: Served) -> None:
    """0.8.0: ``outside the repository /repo`` (the host's absolute path was sent)."""
    (served.repo / "tickets/host.md").write_text(ticket_text("From the host"))
    hosts.hand_over(served.repo / "tickets", hosts.SLOOP_UID)
    done = hosts.host_sloopctl(served.socket, "post", "--hold", "tickets/host.md", cwd=served.repo)
    assert done.returncode == 0, done.stderr
    assert " host held · created" in done.stdout, done.stdout


def test_metrics_answer_inside_the_container(served: Served) -> None:
    # --network none: the metrics listen on the container's own loopback, scraped from
    # inside it (with a network, Prometheus scrapes a published port instead).
    text = served.inside(
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen("
        "'http://127.0.0.1:9464/metrics', timeout=10).read().decode())",
    )
    assert f'sloop_build_info{{version="{package_version()}"}} 1.0' in text
    merged = re.search(r'^sloop_runs_finished_total\{state="merged"\} (\S+)$', text, re.M)
    assert merged, text
    assert float(merged.group(1)) >= 1.0


def test_the_health_check_runs_without_systemd(served: Served) -> None:
    # Podman 4.3 schedules HEALTHCHECK with systemd timers, which this host lacks;
    # `podman healthcheck run` runs the image's check once, on demand.
    done = served.podman.run("healthcheck", "run", served.name, check=False)
    assert done.returncode == 0, done.stderr


def post_second(served: Served) -> dict[str, object]:
    done = served.podman.run(
        *("exec", served.name, "sloopctl", "--json", "--socket", "/run/sloop/operator.sock"),
        *("post", "--hold", "tickets/second.md"),
        check=False,
    )
    return hosts.envelope(done)


def test_sighup_reloads_sloop_toml(served: Served) -> None:
    (served.repo / "tickets/second.md").write_text(ticket_text("Second", flow="second"))
    before = post_second(served)
    assert before["ok"] is False
    assert "second" in str(before["error"]), before
    with (served.repo / "sloop.toml").open("a") as toml:
        toml.write(SECOND_FLOW)
    hosts.hand_over(served.repo, hosts.SLOOP_UID)
    served.podman.run("kill", "--signal", "HUP", served.name)
    after = hosts.wait_for(
        "the reloaded flow", lambda: r if (r := post_second(served))["ok"] else None
    )
    assert after["ok"] is True
    assert served.podman.run("inspect", "--format", "{{.State.Running}}", served.name).stdout == (
        "true\n"
    )


def test_without_the_proc_unmask_no_sandbox_starts(podman: Podman, daemon_image: str) -> None:
    # The control of LEAST_PRIVILEGE: one option fewer, and the daemon says agents
    # cannot be sandboxed (it starts, and would fail every run).
    options = LEAST_PRIVILEGE[: LEAST_PRIVILEGE.index("unmask=/proc/*") - 1]
    served = start(podman, daemon_image, "masked", *options)
    try:
        checks = hosts.doctor_checks(served.socket)
        assert checks["sandbox"] == "fail", checks
    finally:
        podman.run("rm", "--force", "--time", "0", served.name, check=False)
        shutil.rmtree(served.repo.parent, ignore_errors=True)


def test_stop_exits_0_and_removes_the_socket(served: Served) -> None:
    served.podman.run("stop", "--time", "20", served.name)
    exit_code = served.podman.run("inspect", "--format", "{{.State.ExitCode}}", served.name)
    assert exit_code.stdout.strip() == "0"
    assert not served.socket.exists()
