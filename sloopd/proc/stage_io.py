"""A stage's child as values: what it starts from (``StageLaunch``), how it ended (``StageEnd``).

This is the seam between the walk and wherever a child runs.  ``Launcher`` is the
one interface the daemon's side (``sloopd.runs.spawning``) depends on: start a
child in an isolated place, stream its lines, report its end.  Everything a
launcher needs is in the ``StageLaunch`` it is handed, resolved from the
configuration the run was admitted with, so a launcher reads no shared state
(no ``ActiveRun``, no ``Daemon``, no configuration that a reload may change
meanwhile) and a launcher on another machine (a Ray or Kubernetes executor) can
be handed the same value, serialised.  The local implementations are
``sloopd.proc.launchers``'s ``ChildLauncher``; the tests'
recording fake is ``tests.support.fakes.FakeLauncher``.

This module imports nothing of Sloop but the type of a line callback, so every
launcher, local or remote, and every fake can implement it without the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sloopd.proc.lines import OnLines


@dataclass(frozen=True, slots=True)
class Limits:
    """What one child may spend.

    The local launchers leave enforcing them to the daemon's side (the watchdog
    stops a child past ``timeout_ms``; the output budget drops lines past the
    other two), which reads them from here; a remote executor may enforce them
    where the child runs as well.
    """

    timeout_ms: int
    max_log_lines: int
    max_log_bytes: int


@dataclass(frozen=True, slots=True)
class StageLaunch:
    """Everything one child of a stage (an agent, a command, a panel seat) starts from."""

    # Who the child's process group belongs to: "<run>/<stage>#<attempt>[/seat<n>]".
    owner: str
    # The commit the checkout stands at when the child starts: the pinned commit a
    # reviewer reviews, else the run's branch as the daemon last recorded it.
    commit: str
    argv: tuple[str, ...]
    checkout: Path  # the run's checkout on the daemon's host
    home: Path  # the run's own HOME on the daemon's host
    limits: Limits
    # SLOOP_* variables that name no path (the launcher adds the ones that do, as
    # the child sees those paths).
    variables: Mapping[str, str] = field(default_factory=dict)
    # The environment allowlist: names passed through from the daemon's environment
    # (agent.env and the stage's or seat's preset), besides PATH, the locale and HOME.
    passed: tuple[str, ...] = ()
    # Binds as configured ("~/x" is the operator's x, seen in the run's HOME): the
    # agent's ro_mounts and login files (agent.logins and the preset's), read-only,
    # and its rw_mounts.  A launcher that isolates nothing (sandbox = "none") ignores them.
    ro_mounts: tuple[str, ...] = ()
    rw_mounts: tuple[str, ...] = ()
    worker_socket: Path | None = None  # where the child's worker verbs are answered
    token: str | None = None  # the credential minted for this child alone
    # The same token in a file of its own (0400), shown read-only to the child; and
    # whether the token is in its environment too (agent.token_env).
    token_file: Path | None = None
    token_env: bool = True
    prompt_file: Path | None = None
    network: bool = True
    # For an executor that runs the child elsewhere and brings its work back itself
    # (sloopd.remote); the local launchers read none of these.
    placement: Placement | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a remote executor runs a child, and what it hands back.

    ``ref`` is the run-private ref the work is recorded under once it is checked
    (fsck, descends from ``base``); ``auto_commit`` the message of ``commit =
    "auto"`` (None: leftovers are only reported); ``resources`` the stage's
    resolved request (cpus, memory in bytes, custom); ``max_bundle`` the most
    bytes a bundle may hold either way (``[executor] max_bundle``).
    """

    base: str
    branch: str
    ref: str
    identity: tuple[str, str]
    max_bundle: int
    auto_commit: str | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StageEnd:
    """How a started child ended; its lines went to the ``on_lines`` it was started with."""

    # Its exit code, as ``subprocess`` reports it: a death by signal N is -N.
    exit_code: int
    # The commit the child left its work at, when the launcher brought it back
    # itself (a remote executor).  None from the local launchers: the work stays in
    # the checkout on this host, and the run's branches (sloopd.runs.branch) bring
    # it back from there and check it descends from the run's base.
    commit: str | None = None
    # A remote executor's: what the child left uncommitted (after commit = "auto"), where
    # it ran, and why it ended without an exit of its own (its node or actor was lost).
    uncommitted: tuple[str, ...] = ()
    node: Mapping[str, str] | None = None
    lost: str | None = None
    # Lost while the executor knew its cluster could not be reached: the loss is the
    # cluster's, not the node's, and spends no transient retry.
    cluster_down: bool = False


class LaunchRefused(Exception):
    """The child cannot be started as asked; the message says why, for the stage's reason."""


class RunningChild(Protocol):
    """A started child, as the run sees it while it runs."""

    # time.monotonic() of its last output (its start, before any): the stall clock.
    # The daemon moves it on by its own pauses (ActiveRun.credit_pause).
    last_output_monotonic: float

    async def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after the grace); its end reports how it died."""
        ...

    async def end(self) -> StageEnd:
        """Once it exited and nothing it left behind still runs: how it ended."""
        ...


@runtime_checkable
class StartsLater(Protocol):
    """A child a remote executor places first (a node, a checkout there) and starts after.

    Its stage's clocks (timeout, stall) start once it really started: the placement's
    seconds are not the child's (under load a node took longer to place and start a
    child than a 2 s timeout).  The executor bounds the placement itself, and an abort
    or a stopping daemon stops a child still being placed.
    """

    async def wait_started(self) -> bool:
        """True once the child runs; False when it ended (or was refused) first."""
        ...


class Launcher(Protocol):
    """Starts a stage's child in an isolated place and streams its lines."""

    def unavailable(self) -> str | None:
        """Why no child can start here now, None when one can (may block: it may probe)."""
        ...

    async def start(self, launch: StageLaunch, on_lines: OnLines) -> RunningChild:
        """Start the child; raise ``LaunchRefused`` when it cannot start as asked.

        ``on_lines(stream, texts, split)`` is called on the loop with each batch of
        its output lines, in order, until its end is reported.
        """
        ...
