"""What a daemon's stages on Ray may ship, and whose cache a node keeps it in.

A bundle travels whole (the node's actor, Ray's object store, the driver), so each
is bounded by ``[executor] max_bundle``, both ways: work past it, or a start commit
past it, fails its stage with a reason naming the bound, and nothing of it is
taken.  A node keeps one cache per daemon, keyed by the daemon's instance id in its
state directory: two daemons with the same host name and repository path (two
containers) never share one, so neither's agents see the other's objects.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sloopd.core.instance import instance_id
from sloopd.remote.room import _key as room_key
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import make_repo, short_tmpdir
from tests.support.raycluster import RayCluster

RAY = '[executor]\nbackend = "ray"\naddress = "{address}"\n'
SETTLE_S = 180.0
pytestmark = pytest.mark.timeout(900)
SYNC = {"name": "sync", "action": "sync"}
MERGE = {"name": "merge", "action": "ff_only"}
BOUND = "more than [executor] max_bundle (64.0 KiB)"


def _config(bench: Bench, cluster: RayCluster, stages: list[dict[str, Any]], extra: str) -> str:
    executor = RAY.format(address=cluster.address) + extra
    return sloop_toml(bench.argv(), flows={"default": stages}, extra=executor)


def _write(name: str, size: int) -> list[str]:
    """A command writing ``size`` random (incompressible) bytes to ``name``."""
    return [sys.executable, "-c", f"import os; open({name!r}, 'wb').write(os.urandom({size}))"]


def test_a_bundle_past_max_bundle_fails_its_stage_either_way_naming_the_bound(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    implement = {"name": "implement", "action": "agent", "commit": "auto",
                 "command": _write("big.bin", 300_000),
                 "resources": {"custom": {"w1": 1}}}  # fmt: skip
    config = _config(bench, ray_cluster, [implement, SYNC, MERGE], 'max_bundle = "64KiB"\n')
    bench.setup(config, {"back": ticket_text("Back"), "out": ticket_text("Out")})
    bench.start()

    # Back: the work (300 KB) is more than the bound; the node does not send it.
    bench.post("back")
    back = bench.wait_run("back#1", timeout=SETTLE_S)
    assert back["state"] == "failed", back
    row = back["stages"][0]
    assert row["stage"] == "implement", back
    reason = row["reason"] or ""
    assert "the node could not give the work back: the bundle of the work is " in reason, row
    assert BOUND in reason, row
    assert back["classification"] != "node_lost", back  # refused, not a transient loss

    # Out: main now holds 300 KB the node lacks; the daemon does not ship it.
    main_before = bench.commit_on_main({"heavy.txt": os.urandom(300_000).hex()}, "heavy")
    bench.post("out")
    out = bench.wait_run("out#1", timeout=SETTLE_S)
    assert out["state"] == "failed", out
    reason = out["stages"][0]["reason"] or ""
    assert "the bundle of the stage's start commit is " in reason, out
    assert BOUND in reason, out

    assert bench.rev("main") == main_before  # nothing of either came in
    assert list((bench.state_dir / "ship").glob("*.bundle")) == []


def test_two_daemons_with_the_same_repository_path_keep_separate_caches_on_a_node(
    bench: Bench, ray_cluster: RayCluster
) -> None:
    node_dir = ray_cluster.nodes["w1"].node_dir
    path = bench.repo
    implement = {"name": "implement", "action": "agent",
                 "command": bench.argv("--write", "secret.txt=the first daemon's secret"),
                 "resources": {"custom": {"w1": 1}}}  # fmt: skip
    bench.setup(_config(bench, ray_cluster, [implement, SYNC, MERGE], ""), {"a": ticket_text("A")})
    bench.start()
    bench.post("a")
    first = bench.wait_run("R1", timeout=SETTLE_S)
    assert first["state"] == "merged", first
    secret = first["stages"][0]["commit"]
    first_key = room_key(instance_id(bench.state_dir))
    assert bench.stop() == 0

    # The second daemon: another repository at the same path (another container's), a
    # state directory of its own.  Its agent looks for the first one's commit.
    root = short_tmpdir()
    try:
        path.rename(root / "first-repo")
        assert make_repo(path.parent) == path
        second = Bench.create(root, path)
        look = ["sh", "-c", f"git cat-file -e {secret} && echo seen > {second.flag('seen')}; "
                f"echo looked > {second.flag('looked')}"]  # fmt: skip
        probe = {"name": "implement", "action": "agent", "command": look,
                 "resources": {"custom": {"w1": 1}}}  # fmt: skip
        stages: list[dict[str, Any]] = [probe, SYNC, {**MERGE, "allow_empty": True}]
        second.setup(_config(second, ray_cluster, stages, ""), {"b": ticket_text("B")})
        second.start()
        try:
            second.post("b")
            run = second.wait_run("R1", timeout=SETTLE_S)
            second_key = room_key(instance_id(second.state_dir))
            looked = second.path("looked").exists()
            seen = second.path("seen").exists()
        finally:
            assert second.stop() == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)

    assert run["stages"][0]["node"] is not None, run
    assert looked, run  # the agent ran on w1
    # The second daemon's agent saw nothing of the first's, whose cache it does not share.
    assert not seen, "the second daemon's agent read the first daemon's commit"
    assert first_key != second_key
    caches = sorted(p.name for p in node_dir.iterdir() if (p / "cache.git").is_dir())
    assert first_key in caches, caches
    assert second_key in caches, caches
    assert not holds(node_dir / second_key / "cache.git", secret)
    assert holds(node_dir / first_key / "cache.git", secret)  # it was there to see


def holds(repo: Path, sha: str) -> bool:
    """Whether the bare repository ``repo`` holds the commit ``sha``."""
    done = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True
    )
    return done.returncode == 0
