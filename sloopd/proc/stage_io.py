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
from typing import Any, Protocol

from sloopd.proc.lines import OnLines
from sloopd.proc.overlay import Overlay


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
    # Where the child runs and what is taken back after it, decided once per child
    # (sloopd.runs.placing): the launcher and the workspace are chosen by it.
    placement: Placement | None = None
    # (0.9.0) A copy-on-write checkout on this host (``sloopd.proc.overlay``): the
    # sandbox mounts it at ``checkout`` first.  None: ``checkout`` is a whole one.
    overlay: Overlay | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one child runs, and what is taken back after it: the plan of one child.

    ``where`` names the site (its launcher and its workspace): a sandbox mode of this
    host, or a remote executor (``backend``: the configured one, ``local`` or ``ray``).
    ``ref`` is the run-private ref the work is recorded
    under once it is checked (fsck, descends from ``base``); ``auto_commit`` the
    message of ``commit = "auto"`` (None: leftovers are only listed); ``listing``
    whether leftovers are listed at all (a producing command stage's are not);
    ``advance`` whether the run's branch moves to the work (a producing stage);
    ``resources`` the child's resolved request (cpus, memory in bytes, custom), and
    ``max_bundle`` the most bytes a bundle may hold either way (``[executor]
    max_bundle``), for a remote executor.
    """

    base: str
    branch: str
    ref: str
    identity: tuple[str, str]
    max_bundle: int
    auto_commit: str | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)
    where: str = "bwrap"
    backend: str = "local"  # the configured backend (the metrics' label)
    listing: bool = True
    advance: bool = False


@dataclass(frozen=True, slots=True)
class Collected:
    """Commit out: what a child left, taken back wherever it ran.

    ``tip`` is recorded under the execution's ref in the daemon's repository and
    checked (fsck, descends from the run's base); ``uncommitted`` is what the child
    left uncommitted after ``commit = "auto"`` (empty when not listed).
    """

    tip: str
    uncommitted: tuple[str, ...] = ()

    def discarded(self, pinned: str) -> tuple[str | None, tuple[str, ...]] | None:
        """What a reviewing child changed on its pinned commit: (its commit, when it
        committed, and the paths it left), or None when it left nothing."""
        if self.tip == pinned and not self.uncommitted:
            return None
        return (self.tip if self.tip != pinned else None, self.uncommitted)


@dataclass(frozen=True, slots=True)
class Exited:
    """The child exited on its own or was stopped; its lines went to its ``on_lines``."""

    # Its exit code, as ``subprocess`` reports it: a death by signal N is -N.
    exit_code: int
    # Its work, when the launcher took it back itself (a remote executor: on the node,
    # shipped and checked here); None from this host's launchers, whose work the
    # workspace takes back from the checkout here.
    work: Collected | None = None
    node: Mapping[str, str] | None = None  # where it ran, when not on this host


@dataclass(frozen=True, slots=True)
class Lost:
    """The child ended without an exit of its own: its node or actor was lost, and
    nothing of its work came back."""

    reason: str
    node: Mapping[str, str] | None = None
    # Lost while the executor knew its cluster could not be reached: the loss is the
    # cluster's, not the node's, and spends no transient retry.
    cluster_down: bool = False


# How a started child ended.
StageEnd = Exited | Lost


class LaunchRefused(Exception):
    """The child cannot be started as asked; the message says why, for the stage's reason."""


class RunningChild(Protocol):
    """A started child, as the run sees it while it runs."""

    # time.monotonic() of its last output (its start, before any): the stall clock.
    # The daemon moves it on by its own pauses (ActiveRun.credit_pause).
    last_output_monotonic: float

    @property
    def node(self) -> Mapping[str, str] | None:
        """Where it runs when not on this host (the node's host name and id), else None."""
        ...

    async def wait_started(self) -> bool:
        """True once the child runs; False when it ended (or was refused) first.

        A child on this host runs once started.  A remote executor places one first (a
        node, a checkout there) and starts it after: its stage's clocks (timeout, stall)
        start once it really started, since the placement's seconds are not the
        child's (under load a node took longer to place and start a child than a 2 s
        timeout).  The executor bounds the placement itself, and an abort or a stopping
        daemon stops a child still being placed.
        """
        ...

    async def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after the grace); its end reports how it died."""
        ...

    async def end(self) -> StageEnd:
        """Once it exited and nothing it left behind still runs: how it ended."""
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
