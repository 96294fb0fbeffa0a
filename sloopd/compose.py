"""The run machinery, assembled: which collaborator each part of ``sloopd.runs`` gets.

``RunManager``, ``StageExecutor``, ``ChildStarter`` and the launchers build
nothing themselves; this module (part of the composition root, with
``sloopd.server``) is the one place that builds them and says who shares what:
one ``Credentials`` between the children that are minted one and the worker
sockets that check it, one ``RunRecords`` for the driver, the stages and the
worker verbs, one registry of runs in flight for the driver, the git steps and
the daemon's read side.  Tests build the same graph with fakes in place of the
launchers (``tests.support.fakes``).
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Mapping
from pathlib import Path

from sloopd.core import executor_config
from sloopd.core.instance import instance_id
from sloopd.core.logsink import LogSink
from sloopd.core.paths import Layout, git_common_dir
from sloopd.core.state import Daemon
from sloopd.git import ops as gitops
from sloopd.git.run_branches import RunBranches
from sloopd.git.shared_trees import SharedTrees
from sloopd.git.workspace import LocalWorkspace, ShippedWorkspace, Workspace
from sloopd.landing.merge_slot import MergeSlot
from sloopd.landing.queue import MergeQueue
from sloopd.landing.steps import LandingSteps
from sloopd.proc import overlay_probe
from sloopd.proc.children import Child, ProcessGroups
from sloopd.proc.launchers import ChildLauncher, SandboxPlaces, protected_paths
from sloopd.proc.stage_io import Launcher
from sloopd.remote.cluster_gate import ClusterGate
from sloopd.remote.launcher import RayExecutor, RayLauncher
from sloopd.runs.execute import StageExecutor
from sloopd.runs.records import RunRecords
from sloopd.runs.runner import RunManager, sandboxed_as_admitted
from sloopd.runs.runstate import ActiveRun
from sloopd.runs.spawning import ChildStarter
from sloopd.util.trash import Trash
from sloopd.worker.credentials import Credentials
from sloopd.worker.dispatcher import WorkerDispatcher, WorkerHandler
from sloopd.worker.sockets import WorkerSockets
from sloopd.worker.verbs import WorkerVerbs

log = logging.getLogger(__name__)

# Descriptors kept for the operator socket's clients, the store, the metrics
# endpoint and the children's pipes, whatever the worker sockets hold.
OPERATOR_FD_RESERVE = 512


def raise_open_file_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open file limit above %d: %s", soft, exc)
    return soft


def worker_connection_budget() -> int:
    """How many worker connections all runs together may hold: whatever agents open
    on their worker sockets, the operator keeps room (the limit raised first)."""
    return max(64, raise_open_file_limit() - OPERATOR_FD_RESERVE)


def local_launchers(layout: Layout, groups: ProcessGroups) -> dict[str, Launcher]:
    """Where children run on this host, by the ``sandbox`` mode a run was admitted with."""
    places = SandboxPlaces(
        hide=hidden_from_children(layout), objects=_common_dir(layout) / "objects"
    )
    return {
        "bwrap": ChildLauncher[Child](groups, places),
        "none": ChildLauncher[Child](groups, None),
    }


def _common_dir(layout: Layout) -> Path:
    """The repository's git directory (objects, refs, config, hooks), resolved."""
    return Path(os.path.realpath(git_common_dir(layout.repo)))


def hidden_from_children(layout: Layout) -> tuple[Path, ...]:
    """What no child on this host may see (sloopd.proc.launchers.protected_paths)."""
    return protected_paths(layout.state_dir, layout.socket_dir, layout.repo, _common_dir(layout))


def trees_root(layout: Layout) -> Path:
    """Where this host's shared trees live: per uid, as their files are owned."""
    return layout.state_dir / f"trees-{os.getuid()}"


def shared_trees(daemon: Daemon, trash: Trash) -> SharedTrees:
    """The copy-on-write checkouts' shared trees, bounded by ``[repo] tree_cache``."""
    layout = daemon.layout
    return SharedTrees(
        trees_root(layout), layout.repo, _common_dir(layout) / "objects",
        hidden_from_children(layout), limit=lambda: daemon.config.repo.tree_cache,
        trash=trash,
    )  # fmt: skip


def choose_checkouts(daemon: Daemon) -> None:
    """Copy-on-write checkouts where the sandbox runs and the probe mounts one, else
    whole ones: said at start (and in ``status``'s sandbox.workspaces, ``doctor``, the
    dashboard) with the reason."""
    settings = daemon.config
    if settings.sandbox == "none":
        reason: str | None = 'sandbox = "none" (a layered checkout needs the sandbox)'
    elif daemon.sandbox_problem is not None:
        reason = "the sandbox cannot start"
    elif settings.repo.workspaces == "checkout":
        reason = 'repo.workspaces = "checkout"'
    else:
        reason = overlay_probe.probe(trees_root(daemon.layout))
    daemon.layered_checkouts = reason is None
    daemon.checkouts_reason = reason
    if reason is None:
        log.info("stages start in copy-on-write checkouts over shared trees")
    else:
        log.warning("stages start in whole checkouts (slower on large trees): %s", reason)


def ray_executor(daemon: Daemon) -> RayExecutor | None:
    """The Ray driver process and its gate, when the configuration places any child on
    Ray (``[executor]`` or a stage's own ``backend``); None otherwise."""
    settings = daemon.config
    if not executor_config.uses_ray(settings.executor, settings.flows.values()):
        return None
    address = settings.executor.address
    return RayExecutor(
        address,
        settings.executor.namespace,
        daemon.layout.state_dir,
        on_reachable=ClusterGate(daemon, address),
        metrics=daemon.metrics,
        warm=settings.executor.warm_actors,
        shape=settings.executor.resources.request(),
    )


def ray_launcher(daemon: Daemon, executor: RayExecutor) -> RayLauncher:
    # The node's cache key: this daemon's own id, kept in its state directory (two
    # daemons with the same host name and repository path must never share a cache).
    repository = instance_id(daemon.layout.state_dir)
    return RayLauncher(executor, daemon.layout.repo, repository)


class _Dispatchers:
    """A run's worker dispatcher: its own run, the shared credentials and verbs."""

    def __init__(self, credentials: Credentials, handlers: Mapping[str, WorkerHandler]) -> None:
        self._credentials = credentials
        self._handlers = handlers

    def __call__(self, run: str) -> WorkerDispatcher:
        return WorkerDispatcher(run, self._credentials, self._handlers)


def run_manager(
    daemon: Daemon,
    sink: LogSink,
    active: dict[str, ActiveRun],
    launchers: Mapping[str, Launcher],
    *,
    worker_connections: int = 512,
) -> RunManager:
    """The runs' object graph over ``launchers``; ``active`` is ``daemon.active_runs``.

    ``worker_connections`` bounds the worker connections of every run together.
    """
    layout = daemon.layout
    records = RunRecords(daemon, sink)
    credentials = Credentials()
    verbs = WorkerVerbs(daemon, records)
    worker_sockets = WorkerSockets(
        layout.worker_socket_dir,
        _Dispatchers(credentials, verbs.handlers()),
        budget=worker_connections,
    )
    branches = RunBranches(
        layout.repo,
        layout.state_dir,
        _common_dir(layout),
        sandboxed=sandboxed_as_admitted(daemon, active),
        protected=hidden_from_children(layout),
    )
    if daemon.layered_checkouts:
        branches.trees = shared_trees(daemon, branches.trash)
    # Where a child's commit comes in and its work goes out, by its placement's ``where``:
    # this host's checkout, or a node's (shipped back in the stage's end).
    here = LocalWorkspace(branches)
    workspaces: dict[str, Workspace] = {
        "bwrap": here,
        "none": here,
        "ray": ShippedWorkspace(branches),
    }
    children = ChildStarter(
        layout, records, credentials, worker_sockets.path, launchers,
        overlay_of=lambda run: made.overlay if (made := branches.layered(run)) else None,
    )  # fmt: skip
    steps: list[LandingSteps] = []  # the queue tells the steps, built right after it

    async def read_main() -> str | None:
        return await gitops.rev_parse(layout.repo, daemon.config.repo.main)

    queue = MergeQueue(
        daemon, read_main=read_main, on_stale=lambda run, cause: steps[0].stale(run, cause)
    )
    steps.append(LandingSteps(queue, records, active))
    daemon.merge_queue = queue
    executor = StageExecutor(
        daemon,
        records,
        children,
        branches,
        workspaces,
        merge_slot=MergeSlot(),  # one fast-forward of main at a time
        queue=queue,
    )
    return RunManager(
        daemon,
        records=records,
        active=active,
        credentials=credentials,
        worker_sockets=worker_sockets,
        launchers=launchers,
        branches=branches,
        executor=executor,
        landing=steps[0],
        on_settled=daemon.poke,  # a slot is free: the scheduler may claim
    )
