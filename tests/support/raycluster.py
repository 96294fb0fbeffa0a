"""A real Ray cluster for the tests, on 127.0.0.1 only, with token authentication.

Each node is ``ray start --block`` as a process group of the test's own (a head
with no CPUs, so no stage lands there, and workers each with a custom resource
named after it), with its own ``SLOOP_NODE_DIR``.  Stopping a node signals that
process group only, by the pid the test started: never ``ray stop``, which ends
every Ray process on the machine.  It must run inside a network namespace with
only loopback up (``scripts/in-netns``); ``in_loopback_namespace`` tells.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 60.0


def in_loopback_namespace() -> bool:
    """Whether the only network interface here is ``lo`` (scripts/in-netns)."""
    names = [
        line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]
    ]
    return names == ["lo"]


def ray_environment(token: str) -> dict[str, str]:
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    }


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[bytes]
    node_dir: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the node's whole process group (the raylet and its workers)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        # `ray start` can exit before the rest of its group (the GCS, the raylet): a node
        # started next must not meet them, so wait for the group to be gone.
        deadline = time.monotonic() + 30
        while self.pids():
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                deadline = time.monotonic() + 30
            time.sleep(0.2)

    def pids(self) -> set[int]:
        """Every live process of the node's group (Ray's workers keep the group)."""
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.proc.pid:
                        found.add(int(entry.name))
                except (ProcessLookupError, PermissionError):
                    continue
        return found


# Ports Ray keeps for its own components whether or not they run (the dashboard's
# 8265 above all): a node whose worker-port range holds one refuses to start.
RAY_DEFAULT_PORTS: Final = frozenset({6379, 8076, 8265, 10001, 52365, 52366})


def _worker_ports(low: int, high: int) -> tuple[int, int]:
    """The longest run of ports in ``low..high`` that holds none of Ray's defaults."""
    best = (low, low - 1)
    start = low
    for port in range(low, high + 2):
        if port > high or port in RAY_DEFAULT_PORTS:
            if port - 1 - start > best[1] - best[0]:
                best = (start, port - 1)
            start = port + 1
    return best


@dataclass
class RayCluster:
    root: Path
    port: int = 6399
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    nodes: dict[str, Node] = field(default_factory=dict)
    temp_dir: Path = field(init=False)
    _slots: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.temp_dir = self.root / "ray"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, **ray_environment(self.token)}

    def _start(
        self, name: str, args: list[str], resources: str | None, env: dict[str, str] | None = None
    ) -> Node:
        node_dir = self.root / f"node-{name}"
        node_dir.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{name}.log"
        argv = [str(RAY), "start", "--block", "--node-ip-address", "127.0.0.1", *args]
        argv += self._ports(name)
        if resources:
            argv += ["--resources", resources]
        with log.open("ab") as sink:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                env={**self.env(), "SLOOP_NODE_DIR": str(node_dir), **(env or {})},
                start_new_session=True,
            )
        node = Node(name, proc, node_dir, log)
        self.nodes[name] = node
        return node

    def _ports(self, name: str) -> list[str]:
        """Ports of the node's own, from a block after the head's: nodes started at
        once raced for the same free port otherwise ("bind: Address already in use")."""
        slot = self._slot(name)
        base = self.port + 200 * slot
        low, high = _worker_ports(base + 10, base + 199)
        return [
            "--node-manager-port", str(base), "--object-manager-port", str(base + 1),
            "--runtime-env-agent-port", str(base + 2), "--metrics-export-port", str(base + 3),
            "--dashboard-agent-grpc-port", str(base + 4),
            "--dashboard-agent-listen-port", str(base + 5),
            "--min-worker-port", str(low), "--max-worker-port", str(high),
        ]  # fmt: skip

    def _slot(self, name: str) -> int:
        """The node's block of ports: its own while it is in ``nodes``, else the lowest
        one no node holds.  Four blocks fit below the next cluster's port (each xdist
        worker's cluster is 1000 ports on): a fifth name would meet its head."""
        taken = {self._slots[n] for n in self.nodes if n != name and n in self._slots}
        slot = self._slots.get(name)
        if slot is None or slot in taken:
            slot = next(i for i in range(1, 100) if i not in taken)
            self._slots[name] = slot
        return slot

    def start_head(self) -> None:
        # A head started again: `ray start` refuses to when the temp folder's last
        # address is the port and any GCS on the machine (another netns's too: the
        # process list is shared) serves that address.  The file is ours to forget.
        (self.temp_dir / "ray_current_cluster").unlink(missing_ok=True)
        self._start(
            "head",
            [
                "--head", "--port", str(self.port), "--num-cpus", "0",
                "--include-dashboard", "false", "--disable-usage-stats",
                "--temp-dir", str(self.temp_dir),
            ],
            None,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _port_open(self.port):
            if time.monotonic() > deadline or not self.nodes["head"].alive():
                raise RuntimeError(f"the Ray head did not start:\n{self.log('head')}")
            time.sleep(0.2)

    def start_worker(self, name: str, cpus: int = 4, env: dict[str, str] | None = None) -> Node:
        """A worker with the custom resource ``name`` (10 of it): a stage asking for it
        lands there and nowhere else.  ``env`` is added to the node's environment (a
        ``PYTHONPATH`` gives the node other code than the daemon's)."""
        return self._start(
            name,
            ["--address", self.address, "--num-cpus", str(cpus)],
            f'{{"{name}": 10, "worker": 10}}',
            env,
        )

    def wait_for_nodes(self, alive: int) -> None:
        script = (
            "import ray,sys,time\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR')\n"
            f"end=time.time()+{START_TIMEOUT_S}\n"
            f"while sum(1 for n in ray.nodes() if n['Alive'])<{alive}:\n"
            "    time.sleep(0.3)\n"
            "    if time.time()>end: sys.exit(1)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], env=self.env(), capture_output=True, timeout=120
        )
        if done.returncode != 0:
            logs = "\n".join(self.log(name) for name in self.nodes)
            raise RuntimeError(f"{alive} Ray nodes did not come up:\n{done.stderr!r}\n{logs}")

    def wait_for_workers(self, names: Iterable[str]) -> None:
        """Until the live nodes are the head and exactly ``names`` (each by its resource).

        After a node was killed, its old entry stays alive in the head's view until its
        health checks fail; counting live nodes alone would be satisfied by that corpse.
        """
        wanted = sorted(names)
        script = (
            "import ray,sys,time\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR')\n"
            f"end=time.time()+{START_TIMEOUT_S * 2}\n"
            f"want={wanted!r}\n"
            "while True:\n"
            "    alive=[n for n in ray.nodes() if n['Alive']]\n"
            "    have=sorted(k for n in alive for k in n['Resources'] if k in want)\n"
            "    if len(alive)==len(want)+1 and have==want: break\n"
            "    if time.time()>end: sys.exit(1)\n"
            "    time.sleep(0.5)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], env=self.env(), capture_output=True, timeout=240
        )
        if done.returncode != 0:
            logs = "\n".join(self.log(name) for name in self.nodes)
            raise RuntimeError(f"the Ray nodes {wanted} did not come up:\n{done.stderr!r}\n{logs}")

    def make_whole(self, workers: Iterable[str] = ("w1", "w2")) -> None:
        """The cluster as the session fixture made it: the head and ``workers`` alive,
        started one at a time (see ``tests/conftest.py``), and nothing else."""
        head = self.nodes.get("head")
        if head is None or not head.alive():
            # A new head is a new cluster: workers of the old one cannot join it.
            self.stop()
            self.start_head()
        for name in list(self.nodes):
            if name != "head" and name not in workers:
                self.nodes.pop(name).kill(signal.SIGTERM)
        for name in workers:
            node = self.nodes.get(name)
            if node is None or not node.alive():
                self.start_worker(name)
                # This one registered (and a killed one's corpse gone) before the next.
                self.wait_for_workers(n for n in workers if n in self.nodes)
        self.wait_for_workers(workers)

    def log(self, name: str) -> str:
        return self.nodes[name].log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        order = [self.nodes[n] for n in self.nodes if n != "head"]
        order += [self.nodes["head"]] if "head" in self.nodes else []
        # Every node told first, then each waited for: the waits overlap (a loaded
        # machine takes many seconds per node), and no node outlives the cluster.
        for node in order:
            if node.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGTERM)
        for node in order:
            node.kill(signal.SIGTERM)
        self.nodes.clear()
