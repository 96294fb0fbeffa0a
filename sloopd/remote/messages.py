"""The remote protocol's schema: every message of its three pipes, as frozen dataclasses.

The pipes: the daemon and its driver process (one encoded message a line on the
driver's standard input, ops, and output, events: ``sloopd.remote.launcher``,
``sloopd.remote.driver``); the driver and a stage's actor on a node (Ray calls
whose arguments and answers are encoded messages: ``sloopd.remote.node``); and the
node's outbox the driver drains (``Item``).  ``sloopd.remote.codec`` encodes them
(a kind tag, every field) and decodes them strictly; nothing else reads one by key.

A ``RemoteLaunch`` is a ``StageLaunch`` with every host path replaced by what the
node needs to make its own: the prompt's bytes, the HOME files the daemon made,
the values of the allowlisted variables, the commit to start from and the run's
base (which the work must descend from): the daemon makes it
(``sloopd.remote.launcher.remote_launch``) and the node builds a ``StageLaunch``
of its own from it (``sloopd.remote.node.node_launch``), so the node runs exactly
the launcher the daemon's host runs.  Bundles are not messages: they travel
beside them as bytes (``start``'s second argument, ``bundle``'s answer) or as a
file in the daemon's ship/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sloopd.proc.stage_io import Limits
from sloopd.remote.codec import ProtocolError as ProtocolError
from sloopd.remote.codec import decode as decode
from sloopd.remote.codec import decode_any, register
from sloopd.remote.codec import encode as encode

# The driver's pipes carry one message a line; bytes travel as base64.
MAX_PIPE_LINE_BYTES = 8 << 20
# How much output or relayed socket data a node holds for the daemon before it stops
# reading the child's pipes (or the agent's socket): memory is bounded on the node
# when the daemon is slow, and the child blocks on a full pipe as it would locally.
NODE_OUTBOX_BYTES = 1 << 20

register("limits")(Limits)


@register("node")
@dataclass(frozen=True, slots=True)
class Node:
    """Where an actor runs: the Ray node id and the host, as the run view shows them."""

    id: str
    host: str

    def as_mapping(self) -> dict[str, str]:
        return {"id": self.id, "host": self.host}

    @property
    def label(self) -> str:
        return f"{self.host or '?'} ({self.id[:12]})"


@register("resources")
@dataclass(frozen=True, slots=True)
class Resources:
    """What a stage's actor asks Ray for: the stage's resolved ``resources``."""

    cpus: float
    memory: int | None
    custom: Mapping[str, float]

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> Resources:
        """From a placement's request (``sloopd.flows.placement.Resources.request``)."""
        memory = request.get("memory")
        custom = request.get("custom") or {}
        return cls(
            cpus=float(request.get("cpus", 1)),
            memory=int(memory) if memory else None,
            custom={str(name): float(amount) for name, amount in custom.items()},
        )


@register("remote_launch")
@dataclass(frozen=True, slots=True)
class RemoteLaunch:
    owner: str
    commit: str  # the commit the child starts from (the node fetched it in a bundle)
    base: str  # the run's base: what the work brought back must descend from
    branch: str
    argv: tuple[str, ...]
    limits: Limits
    variables: Mapping[str, str]
    passed: tuple[str, ...]
    values: Mapping[str, str]  # the daemon's values of the passed names it has
    ro_mounts: tuple[str, ...]
    rw_mounts: tuple[str, ...]
    token: str | None
    token_file: bool
    token_env: bool
    prompt: bytes | None
    home_files: Mapping[str, str]  # name -> text, as the daemon made HOME for this child
    network: bool
    # The most bytes a bundle may hold either way ([executor] max_bundle): the node
    # refuses to send back more.
    max_bundle: int
    # commit = "auto": the message the node's daemon-side git commits leftovers with.
    auto_commit: str | None = None
    identity: tuple[str, str] = ("Sloop", "sloop@localhost")
    repository: str = "repository"  # the node's cache key for this daemon's repository

    @property
    def collect(self) -> Collect:
        """What the node is asked to give back once the child ended."""
        return Collect(self.commit, self.base, self.auto_commit, self.identity, self.max_bundle)


# --- the node's outbox: what a child said, polled by the driver, relayed to the daemon


@register("lines")
@dataclass(frozen=True, slots=True)
class Lines:
    """A batch of the child's lines on one stream (``split``: the last was cut)."""

    stream: str
    texts: tuple[str, ...]
    split: bool


@register("conn")
@dataclass(frozen=True, slots=True)
class Conn:
    """Bytes the agent wrote on worker-socket connection ``number``; None: it closed."""

    number: int
    data: bytes | None


@register("latency")
@dataclass(frozen=True, slots=True)
class Latency:
    """A worker-socket round trip, as the node measured it."""

    seconds: float


Item = Lines | Conn | Latency


# --- how a child on a node ended (the driver's ``ended`` event, or the daemon's own) --


@register("ran")
@dataclass(frozen=True, slots=True)
class Ran:
    """The child exited on its node and its work was collected there."""

    exit_code: int
    tip: str
    uncommitted: tuple[str, ...]
    bundle: str  # the work's bundle in the daemon's ship/, "" when it made no commit
    node: Node | None


@register("lost")
@dataclass(frozen=True, slots=True)
class Lost:
    """The child was lost with its node, its actor or the driver (or its node lost it):
    nothing of the stage's doing, so a transient failure (``node_lost``)."""

    reason: str
    node: Node | None


@register("refused")
@dataclass(frozen=True, slots=True)
class Refused:
    """The child never started: a node refused it, or it was stopped first."""

    reason: str


@register("unreturned")
@dataclass(frozen=True, slots=True)
class Unreturned:
    """The child ran, but its node could not give its work back."""

    error: str
    node: Node | None


Ended = Ran | Lost | Refused | Unreturned


# --- the daemon to its driver (ops) --------------------------------------------------


@register("start")
@dataclass(frozen=True, slots=True)
class Start:
    id: str
    launch: RemoteLaunch
    resources: Resources


@register("ship")
@dataclass(frozen=True, slots=True)
class Ship:
    """The start commit's bundle for the node the child was placed on ("": none needed)."""

    id: str
    bundle: str  # a file in the daemon's ship/


@register("stop")
@dataclass(frozen=True, slots=True)
class Stop:
    id: str


@register("deliver")
@dataclass(frozen=True, slots=True)
class Deliver:
    """The run's worker socket answered on connection ``conn``; None: it closed."""

    id: str
    conn: int
    data: bytes | None


Op = Start | Ship | Stop | Deliver


# --- the driver to the daemon (events) -----------------------------------------------


@register("up")
@dataclass(frozen=True, slots=True)
class Up:
    nodes: int


@register("down")
@dataclass(frozen=True, slots=True)
class Down:
    """A sign that the cluster is gone (``sloopd.remote.connection``); always said
    before a stage lost with it."""

    reason: str


@register("placed")
@dataclass(frozen=True, slots=True)
class Placed:
    """Ray placed the child's actor: the node, and the commits its cache holds."""

    id: str
    node: Node
    haves: tuple[str, ...]


@register("started")
@dataclass(frozen=True, slots=True)
class Started:
    id: str
    pid: int


@register("items")
@dataclass(frozen=True, slots=True)
class Items:
    """One poll of the node (every poll, items or none): ``silent`` is how long the
    child has been silent by the node's clock (the daemon's stall clock)."""

    id: str
    items: tuple[Item, ...]
    silent: float


@register("ended")
@dataclass(frozen=True, slots=True)
class Finished:
    id: str
    ended: Ended


Event = Up | Down | Placed | Started | Items | Finished


# --- the driver and a stage's actor (Ray calls: their arguments and answers) --------


@register("ready")
@dataclass(frozen=True, slots=True)
class Ready:
    """``ready()``'s answer: the actor's worker process is up (a warm actor of the
    driver's pool, ``sloopd.remote.pool``, is made and answered ahead of demand)."""

    version: str
    node: Node


@register("released")
@dataclass(frozen=True, slots=True)
class Released:
    """``release(stage)``'s answer: the stage is gone from the actor.  ``clean``: its
    child confirmed dead, its room removed, its collect whole, so the actor may serve
    another stage; else ``reason`` says why it is retired instead."""

    clean: bool
    reason: str


@register("prepared")
@dataclass(frozen=True, slots=True)
class Prepared:
    """``prepare(repository, commit)``'s answer: who runs there and what its cache holds
    (the start ``commit`` alone when it holds that one)."""

    version: str
    node: Node
    haves: tuple[str, ...]


@register("began")
@dataclass(frozen=True, slots=True)
class Began:
    """``start(launch, bundle)``'s answer: the child runs."""

    pid: int


@register("exited")
@dataclass(frozen=True, slots=True)
class Exited:
    exit_code: int


@register("failed")
@dataclass(frozen=True, slots=True)
class Failed:
    """The node lost its child (waiting for it failed): no exit code, a loss."""

    reason: str


@register("polled")
@dataclass(frozen=True, slots=True)
class Polled:
    """``poll(wait_s)``'s answer: what the child said, and its end once all was taken."""

    items: tuple[Item, ...]
    silent: float
    end: Exited | Failed | None


@register("collect")
@dataclass(frozen=True, slots=True)
class Collect:
    """``collect``'s argument: what the work must descend from, and how to commit."""

    start: str
    base: str
    auto_commit: str | None
    identity: tuple[str, str]
    max_bundle: int


@register("collected")
@dataclass(frozen=True, slots=True)
class Collected:
    """The commit the child left; ``size`` bytes of bundle wait in the actor (``bundle``)."""

    tip: str
    uncommitted: tuple[str, ...]
    size: int


@register("uncollected")
@dataclass(frozen=True, slots=True)
class Uncollected:
    error: str


Collection = Collected | Uncollected


def decode_op(raw: bytes | str) -> Op:
    """An op on the driver's standard input."""
    op: Op = decode_any(raw, Op)
    return op


def decode_event(raw: bytes | str) -> Event:
    """An event on the driver's standard output."""
    event: Event = decode_any(raw, Event)
    return event


def decode_collection(raw: bytes | str) -> Collection:
    collection: Collection = decode_any(raw, Collection)
    return collection
