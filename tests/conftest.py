"""Fixtures: a short-path sandbox, a git repository in it, a running daemon."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agents import Bench, kill_leftovers
from tests.support.daemon import DaemonProcess, make_repo, new_daemon, short_tmpdir
from tests.support.raycluster import RayCluster, in_loopback_namespace, ray_environment

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment, which
# every CLI a test starts inherits and obeys before its terminal's real size (as
# shutil.get_terminal_size does): a live view on a 40-column pty drew 80-column
# lines.  A test sees the terminal it made, as a user's shell (which does not export
# them) does.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


@pytest.fixture
def sandbox() -> Iterator[Path]:
    root = short_tmpdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def repo(sandbox: Path) -> Path:
    return make_repo(sandbox)


@pytest.fixture
def daemon(sandbox: Path, repo: Path) -> Iterator[DaemonProcess]:
    process = new_daemon(sandbox, repo).start()
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()


@pytest.fixture
def bench(sandbox: Path, repo: Path) -> Iterator[Bench]:
    """A daemon driver for run tests; at the end no process may be left in a worktree."""
    bench = Bench.create(sandbox, repo)
    try:
        yield bench
    finally:
        code = bench.stop()
        leftovers = kill_leftovers(bench.state_dir)
        assert code == 0, bench.log()
        assert leftovers == [], "the daemon left processes running in its worktrees"


# --- stages on a real Ray cluster ---------------------------------------------------
# `make test` runs the tests marked `on_ray` a second time with SLOOP_TEST_EXECUTOR=ray
# inside scripts/in-netns: every daemon a test starts then serves with `--executor ray`
# against the session's cluster (tests.support.daemon.DaemonProcess.command), so the
# same tests check the walk with every stage on a worker node.
EXECUTOR_VAR = "SLOOP_TEST_EXECUTOR"
RAY_ADDRESS_VAR = "SLOOP_TEST_RAY_ADDRESS"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and two worker nodes (custom resources ``w1`` and ``w2``), token auth on."""
    if not in_loopback_namespace():
        message = "the Ray tests run in a loopback-only network namespace: scripts/in-netns"
        if os.environ.get("SLOOP_REQUIRE_RAY") == "1":
            pytest.fail(message)
        pytest.skip(message)
    root = short_tmpdir()
    cluster = RayCluster(root)
    try:
        cluster.start_head()
        # One node at a time: two raylets starting at once on one host pick the same
        # socket names in the session folder and one dies ("bind: Address already in use").
        cluster.start_worker("w1")
        cluster.wait_for_nodes(2)
        cluster.start_worker("w2")
        cluster.wait_for_nodes(3)
        saved = {name: os.environ.get(name) for name in ray_environment(cluster.token)}
        os.environ.update(ray_environment(cluster.token))
        os.environ[RAY_ADDRESS_VAR] = cluster.address
        yield cluster
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _executor_on_ray(request: pytest.FixtureRequest) -> None:
    """Under SLOOP_TEST_EXECUTOR=ray, an `on_ray` test's daemons place stages on Ray."""
    if os.environ.get(EXECUTOR_VAR) == "ray" and request.node.get_closest_marker("on_ray"):
        request.getfixturevalue("ray_cluster")
