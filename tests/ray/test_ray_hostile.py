"""What a child on a Ray node can and cannot reach, and a node running other code.

A stage on a node runs in the same sandbox a local one does: the agent gets its
worker socket (relayed to the daemon, token checked there) and nothing of Ray's:
no RAY_* variable or token in its environment, no view of Ray's folder or the
node folders (other rooms' checkouts, the cache), and the cluster, though
reachable on the network, refuses it without the token.  A node whose Sloop is
another version than the daemon's is refused before any stage starts on it.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sloopd
from sloopd.core.instance import instance_id
from sloopd.remote.room import _key as room_key
from tests.support.agents import Bench, read_json, sloop_toml, ticket_text
from tests.support.daemon import REPO_ROOT, short_tmpdir, wait_until
from tests.support.raycluster import RayCluster

RAY = '[executor]\nbackend = "ray"\naddress = "{address}"\n'
SETTLE_S = 180.0
# Whole-cluster restarts take minutes on a small shared machine (the default is 120 s).
pytestmark = pytest.mark.timeout(900)
OLD_VERSION = "0.0.1-test"

HOSTILE_SOURCE = r'''
"""A hostile agent: looks for Ray's secrets and places, then tries its worker socket."""
import json, os, socket, subprocess, sys

plan = json.loads(sys.argv[1])
seen = {"env": dict(os.environ), "places": {}, "ray": {}, "brief": {}}


def save():
    with open(plan["out"] + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(plan["out"] + ".tmp", plan["out"])


seen["cwd"] = os.getcwd()
for place in plan["places"]:
    if not os.path.isdir(place):
        seen["places"][place] = {"error": "not there"}
        continue
    found = []
    for top, dirs, files in os.walk(place):
        if top == seen["cwd"]:
            dirs[:] = []  # its own checkout: no need to list it
            continue
        found += [os.path.join(top, name) for name in dirs + files]
        if len(found) > 2000:
            break
    seen["places"][place] = {"entries": sorted(found)}
save()

host, port = plan["address"].rsplit(":", 1)
with socket.socket() as probe:
    probe.settimeout(5)
    seen["port_reachable"] = probe.connect_ex((host, int(port))) == 0

CONNECT = (
    "import ray, sys\n"
    "ray.init(address=sys.argv[1], logging_level='ERROR')\n"
    "print('CONNECTED', len(ray.nodes()), flush=True)\n"
)
clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
for name, extra in (("no_token", {}),
                    ("wrong_token", {"RAY_AUTH_TOKEN": "bogus", "RAY_AUTH_MODE": "token"})):
    try:
        done = subprocess.run([sys.executable, "-c", CONNECT, plan["address"]],
                              env={**clean, **extra}, capture_output=True, text=True, timeout=90)
        seen["ray"][name] = {"rc": done.returncode, "connected": "CONNECTED" in done.stdout,
                             "stderr": done.stderr[-1500:]}
    except subprocess.TimeoutExpired:
        seen["ray"][name] = {"rc": None, "connected": False, "stderr": "timed out"}
    save()


def brief(env):
    done = subprocess.run([sys.executable, "-m", "sloopctl", "--json", "brief"],
                          env=env, capture_output=True, text=True, timeout=60)
    return {"rc": done.returncode, "stdout": done.stdout[-3000:], "stderr": done.stderr[-1500:]}


seen["brief"]["own"] = brief(dict(os.environ))
wrong = {k: v for k, v in os.environ.items() if k != "SLOOP_TOKEN_FILE"}
wrong["SLOOP_TOKEN"] = "0" * 64
seen["brief"]["wrong"] = brief(wrong)
save()
'''


def ray_config(bench: Bench, cluster: RayCluster, stages: list[dict[str, Any]]) -> str:
    return sloop_toml(
        bench.argv(), flows={"default": stages}, extra=RAY.format(address=cluster.address)
    )


def test_a_hostile_agent_on_a_node_sees_no_ray_secret_or_place_and_only_its_socket(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    cluster = ray_cluster
    script = bench.agent_path.parent / "hostile.py"
    script.write_text(HOSTILE_SOURCE, encoding="utf-8")
    out = bench.flag("hostile.json")
    places = [str(cluster.temp_dir), *(str(node.node_dir) for node in cluster.nodes.values())]
    plan = {"out": out, "places": places, "address": cluster.address}
    stage = {"name": "probe", "action": "agent", "network": True,
             "command": [sys.executable, str(script), json.dumps(plan)],
             "resources": {"custom": {"w1": 1}}}  # fmt: skip
    bench.setup(ray_config(bench, cluster, [stage]), {"probe": ticket_text("Probe")})
    bench.start()
    # Decoys on w1: another stage's room of this daemon, another daemon's cache.
    node_dir = cluster.nodes["w1"].node_dir
    key = room_key(instance_id(bench.state_dir))
    decoys = [node_dir / key / "rooms" / "decoy" / "work", node_dir / "0123456789abcdef"]
    for decoy in decoys:
        decoy.mkdir(parents=True, exist_ok=True)
        (decoy / "secret.txt").write_text("another stage's\n")
    try:
        bench.post("probe")
        run = bench.wait_run("R1", timeout=SETTLE_S)
    finally:
        shutil.rmtree(node_dir / key / "rooms" / "decoy", ignore_errors=True)
        shutil.rmtree(decoys[1], ignore_errors=True)
    assert run["stages"][0]["node"] is not None, run
    assert run["stages"][0]["exit_code"] == 0, (run, bench.log_lines("R1"))
    seen = read_json(Path(out))

    # (a) Nothing of Ray's in the child's environment: no name, no token value.
    env: dict[str, str] = seen["env"]
    assert [name for name in env if name.startswith("RAY_")] == [], sorted(env)
    assert not any(cluster.token in value for value in env.values()), sorted(env)
    assert env.get("SLOOP_RUN") == "R1"

    # (b) Ray's folder and every node folder (other rooms, the cache's refs, the
    # process groups) are hidden.  What the child may see of them is the path down to
    # its own room, made for its mounts, and the cache's object store, read only: its
    # checkout borrows those objects, as a local child's borrows the repository's.
    objects = node_dir / key / "cache.git" / "objects"
    assert objects.is_dir(), "this repository's cache on w1 (there was something to hide)"
    rooms: set[str] = set()
    for place in places:
        found = [Path(e) for e in seen["places"][place].get("entries", [])]
        for entry in found:
            if "rooms" in entry.parts[:-1]:
                rooms.add(entry.parts[entry.parts.index("rooms") + 1])
        seen_too = [
            str(e) for e in found
            if e not in (objects, *objects.parents) and objects not in e.parents
            and "rooms" not in e.parts
        ]  # fmt: skip
        assert seen_too == [], (place, seen_too[:40])
    assert len(rooms) <= 1, f"the child saw other rooms than its own: {sorted(rooms)}"
    assert "decoy" not in rooms, rooms

    # (c) The cluster is reachable from the sandbox, and refuses it without the token.
    assert seen["port_reachable"] is True, seen
    for attempt in ("no_token", "wrong_token"):
        tried = seen["ray"][attempt]
        assert tried["connected"] is False, (attempt, tried)
        assert tried["rc"] != 0, (attempt, tried)

    # (d) Its own worker socket answers through the relay; a wrong token is refused.
    own = seen["brief"]["own"]
    assert own["rc"] == 0, own
    assert "R1" in own["stdout"], own
    wrong = seen["brief"]["wrong"]
    assert wrong["rc"] != 0, wrong
    assert "unauthorized" in wrong["stdout"] + wrong["stderr"], wrong


# --- a node with another Sloop version ---------------------------------------------


@pytest.fixture
def old_code() -> Iterator[Path]:
    """A folder holding a copy of the ``sloopd`` package that says it is another version."""
    root = short_tmpdir()
    try:
        shutil.copytree(
            REPO_ROOT / "sloopd", root / "sloopd", ignore=shutil.ignore_patterns("__pycache__")
        )
        api = root / "sloopd" / "wire" / "api.py"
        text = api.read_text(encoding="utf-8")
        marker = f'SOFTWARE_VERSION: Final = "{sloopd.__version__}"'
        assert marker in text
        api.write_text(text.replace(marker, f'SOFTWARE_VERSION: Final = "{OLD_VERSION}"'))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def old_node(ray_cluster: RayCluster, old_code: Path) -> Iterator[str]:
    """A worker ``old`` (custom resource ``old``) whose Python finds the old copy first."""
    ray_cluster.start_worker("old", cpus=2, env={"PYTHONPATH": str(old_code)})
    try:
        ray_cluster.wait_for_workers(["w1", "w2", "old"])
        yield "old"
    finally:
        node = ray_cluster.nodes.pop("old", None)
        if node is not None:
            node.kill(signal.SIGTERM)
        ray_cluster.wait_for_workers(["w1", "w2"])


def test_a_node_running_another_sloop_version_is_refused(
    bench: Bench, ray_cluster: RayCluster, old_node: str
) -> None:
    stage = {"name": "implement", "action": "agent",
             "command": bench.argv("--write", "x.txt=x", "--pidfile", bench.flag("ran.pid")),
             "resources": {"custom": {old_node: 1}}}  # fmt: skip
    bench.setup(ray_config(bench, ray_cluster, [stage]), {"old": ticket_text("Old node")})
    bench.start()
    bench.post("old")
    run = bench.wait_run("R1", timeout=SETTLE_S)
    assert run["state"] == "failed", run
    reason = run["stages"][0]["reason"] or ""
    assert f"runs Sloop {OLD_VERSION}" in reason, run
    assert f"this daemon is Sloop {sloopd.__version__}" in reason, run
    assert run["classification"] != "node_lost", run  # not transient: no retry loop
    assert not bench.path("ran.pid").exists(), "no child started on the refusing node"
    wait_until(lambda: bench.ticket("old")["state"] != "running", timeout=30)
