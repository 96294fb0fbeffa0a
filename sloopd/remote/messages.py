"""What crosses from the daemon to a Ray node and back, as plain values.

A ``RemoteLaunch`` is a ``StageLaunch`` with every host path replaced by what the
node needs to make its own: the prompt's bytes, the HOME files the daemon made,
the values of the allowlisted variables, the commit to start from and the run's
base (which the work must descend from).  The node builds a ``StageLaunch`` of
its own from it (``node_launch``), so the node runs exactly the launcher the
daemon's host runs.  Everything here is picklable plain data: it travels as Ray
task arguments, and between the daemon and its driver process as JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sloopd.proc.stage_io import Limits, StageLaunch

# The driver's pipes carry one JSON object per line; bytes travel as base64.
MAX_PIPE_LINE_BYTES = 8 << 20
# How much output or relayed socket data a node holds for the daemon before it stops
# reading the child's pipes (or the agent's socket): memory is bounded on the node
# when the daemon is slow, and the child blocks on a full pipe as it would locally.
NODE_OUTBOX_BYTES = 1 << 20


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
    extra: Mapping[str, Any] = field(default_factory=dict)


def remote_launch(
    launch: StageLaunch,
    *,
    base: str,
    branch: str,
    auto_commit: str | None,
    identity: tuple[str, str],
    repository: str,
    environ: Mapping[str, str],
    max_bundle: int,
) -> RemoteLaunch:
    """The node's value of ``launch``: its host files read now, its variables' values taken."""
    prompt = launch.prompt_file.read_bytes() if launch.prompt_file is not None else None
    home_files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(launch.home.iterdir())
        if entry.is_file() and not entry.is_symlink()
    }
    return RemoteLaunch(
        owner=launch.owner,
        commit=launch.commit,
        base=base,
        branch=branch,
        argv=launch.argv,
        limits=launch.limits,
        variables=dict(launch.variables),
        passed=launch.passed,
        # The passed names' values, and the daemon's PATH (the node keeps the folders of
        # it that exist there: sloopd.remote.node.node_path).
        values={name: environ[name] for name in (*launch.passed, "PATH") if name in environ},
        ro_mounts=launch.ro_mounts,
        rw_mounts=launch.rw_mounts,
        token=launch.token,
        token_file=launch.token_file is not None,
        token_env=launch.token_env,
        prompt=prompt,
        home_files=home_files,
        network=launch.network,
        auto_commit=auto_commit,
        identity=identity,
        repository=repository,
        max_bundle=max_bundle,
    )


def node_launch(
    remote: RemoteLaunch, *, checkout: Path, home: Path, socket: Path | None, files: Path
) -> StageLaunch:
    """The ``StageLaunch`` a node runs: the same child, in the node's own places."""
    token_file = None
    if remote.token is not None and remote.token_file:
        token_file = files / "token"
        token_file.unlink(missing_ok=True)
        token_file.write_text(remote.token, encoding="ascii")
        token_file.chmod(0o400)
    prompt_file = None
    if remote.prompt is not None:
        prompt_file = files / "prompt.md"
        prompt_file.write_bytes(remote.prompt)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, text in remote.home_files.items():
        if "/" in name or name in (".", ".."):
            continue  # a file name, never a path: the daemon made HOME flat
        (home / name).write_text(text, encoding="utf-8")
    return StageLaunch(
        owner=remote.owner,
        commit=remote.commit,
        argv=remote.argv,
        checkout=checkout,
        home=home,
        limits=remote.limits,
        variables=remote.variables,
        passed=remote.passed,
        ro_mounts=remote.ro_mounts,
        rw_mounts=remote.rw_mounts,
        worker_socket=socket if remote.token is not None else None,
        token=remote.token,
        token_file=token_file,
        token_env=remote.token_env,
        prompt_file=prompt_file,
        network=remote.network,
    )


def to_json(remote: RemoteLaunch) -> dict[str, Any]:
    data = asdict(remote)
    data["prompt"] = None if remote.prompt is None else encode(remote.prompt)
    return data


def from_json(data: Mapping[str, Any]) -> RemoteLaunch:
    fields = dict(data)
    fields["limits"] = Limits(**fields["limits"])
    fields["prompt"] = None if fields["prompt"] is None else decode(fields["prompt"])
    for name in ("argv", "passed", "ro_mounts", "rw_mounts", "identity"):
        fields[name] = tuple(fields[name])
    return RemoteLaunch(**fields)


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


# --- how a child on a node ended, as the driver reports it (its ``ended`` event) ----


@dataclass(frozen=True, slots=True)
class Ran:
    """The child exited on its node and its work was collected there."""

    exit_code: int
    tip: str
    uncommitted: tuple[str, ...]
    bundle: str  # the work's bundle in the daemon's ship/, "" when it made no commit
    node: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Lost:
    """The child was lost with its node, its actor or the driver (or its node lost it):
    nothing of the stage's doing, so a transient failure."""

    reason: str
    node: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The child never started: a node refused it, or it was stopped first."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unreturned:
    """The child ran, but its node could not give its work back."""

    error: str
    node: Mapping[str, str] | None


Ended = Ran | Lost | Refused | Unreturned
_ENDED_KEYS = frozenset(
    {"ev", "id", "exit_code", "failure", "tip", "uncommitted", "bundle", "error", "node",
     "lost", "refused"}
)  # fmt: skip


class BadEvent(ValueError):
    """An event the driver should not have sent; the message says what is wrong."""


def ended_of(event: Mapping[str, Any]) -> Ended:
    """The one reading of an ``ended`` event.

    A node that lost its child (``failure``: waiting for it failed, so its exit code
    is a stand-in) reports a loss, as a lost node does: the stage did nothing wrong.
    """
    unknown = sorted(set(event) - _ENDED_KEYS)
    if unknown:
        raise BadEvent(f"an ended event with unknown keys {unknown}")
    node = _node(event.get("node"))
    if event.get("refused"):
        return Refused(str(event["refused"]))
    if event.get("lost"):
        return Lost(str(event["lost"]), node)
    if event.get("failure"):
        return Lost(str(event["failure"]), node)
    if event.get("error"):
        return Unreturned(str(event["error"]), node)
    try:
        return Ran(
            exit_code=int(event["exit_code"]),
            tip=str(event["tip"]),
            uncommitted=tuple(str(path) for path in event.get("uncommitted") or ()),
            bundle=str(event.get("bundle") or ""),
            node=node,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEvent(f"an ended event without its exit code or tip: {exc}") from exc


def _node(value: Any) -> Mapping[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadEvent(f"an ended event whose node is {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}
