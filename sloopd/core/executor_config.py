"""``[executor]``: where stages run unless a stage says otherwise.

``backend = "local"`` (the default) runs every child on the daemon's host;
``"ray"`` runs them on a Ray cluster at ``address`` (``auto``: the cluster Ray
finds by itself, from ``RAY_ADDRESS`` or a local head), in ``namespace``, asking
each for ``resources`` unless the stage or seat asks for its own.  A daemon
without Ray installed refuses ``ray`` at load, naming the install command; so
does ``sandbox = "none"``, since a node runs every child in its sandbox.
``sloopd serve --executor``/``--ray-address`` override the file (``with_overrides``).
``max_bundle`` bounds every git bundle shipped to a node or brought back from one.
``warm_actors`` is how many idle actors per resource shape the Ray driver keeps
created ahead of demand (``sloopd.remote.pool``; 0: none).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sloopd.flows import placement
from sloopd.flows.flow import Flow
from sloopd.flows.placement import Resources
from sloopd.util import validate
from sloopd.util.sizes import parse_bytes
from sloopd.util.validate import ConfigError

KEYS = ("backend", "address", "namespace", "resources", "max_bundle", "warm_actors")
# A bundle is held whole on its way (in the node's actor, Ray's object store, the
# driver): the bound keeps one stage from filling any of them.
DEFAULT_MAX_BUNDLE = 512 << 20
MIN_MAX_BUNDLE = 1 << 10
# Each idle warm actor holds its resources on its node: a few per shape at most.
DEFAULT_WARM_ACTORS = 1
MAX_WARM_ACTORS = 8


class ExecutorConfigError(ConfigError):
    """An ``[executor]`` that does not validate; the message names the key."""


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    backend: str = "local"
    address: str = "auto"
    namespace: str = "sloop"
    resources: Resources = field(default_factory=Resources)
    max_bundle: int = DEFAULT_MAX_BUNDLE
    warm_actors: int = DEFAULT_WARM_ACTORS


def parse(section: Any) -> ExecutorConfig:
    if not isinstance(section, dict):
        raise ExecutorConfigError("'executor' must be a table")
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise ExecutorConfigError(f"unknown key 'executor.{unknown[0]}' (known: {', '.join(KEYS)})")
    backend = placement.backend(section.get("backend", "local"), "executor.backend")
    asked = placement.resources(section.get("resources", {}), "executor.resources")
    texts = {}
    for key, default in (("address", "auto"), ("namespace", "sloop")):
        value = section.get(key, default)
        if not isinstance(value, str) or not value.strip() or "\n" in value:
            raise ExecutorConfigError(f"'executor.{key}' must be a non-empty string on one line")
        texts[key] = value.strip()
    if texts["address"].startswith("ray://"):
        # Ray Client keeps a dropped driver's session (and its actors) for a reconnect
        # grace: a dead daemon would leave stages running.  The driver joins as a node's
        # peer instead, and its actors die with it.
        raise ExecutorConfigError(
            "'executor.address' must be HOST:PORT of the cluster's head (its GCS) or auto; "
            "ray:// (Ray Client) is not supported"
        )
    warm = validate.count(
        section.get("warm_actors", DEFAULT_WARM_ACTORS), "executor.warm_actors", least=0,
        error=ExecutorConfigError,
    )  # fmt: skip
    validate.bounded(warm, "executor.warm_actors", f"at most {MAX_WARM_ACTORS}",
                     most=MAX_WARM_ACTORS, error=ExecutorConfigError)  # fmt: skip
    return ExecutorConfig(
        backend, texts["address"], texts["namespace"], asked, _max_bundle(section), warm
    )


def _max_bundle(section: dict[str, Any]) -> int:
    value = section.get("max_bundle", DEFAULT_MAX_BUNDLE)
    try:
        size = parse_bytes(value) if isinstance(value, int | str) else -1
    except ValueError:
        size = -1
    if size < MIN_MAX_BUNDLE:
        raise ExecutorConfigError(
            "'executor.max_bundle' must be a size of at least 1KiB, like \"512MiB\""
        )
    return size


def with_overrides(
    executor: ExecutorConfig, backend: str | None, address: str | None
) -> ExecutorConfig:
    """``sloopd serve --executor/--ray-address`` over the file's ``[executor]``."""
    if backend is not None:
        executor = replace(executor, backend=placement.backend(backend, "--executor"))
    if address is not None:
        executor = replace(executor, address=address)
    return executor


def uses_ray(executor: ExecutorConfig, flows: Iterable[Flow]) -> bool:
    """Whether any child may be placed on Ray (the executor's default, or a stage's own)."""
    if executor.backend == "ray":
        return True
    for flow in flows:
        for stage in flow.stages:
            places = [stage.placement, *(seat.placement for seat in stage.reviewers)]
            if any(p is not None and p.backend == "ray" for p in places):
                return True
    return False


# The cluster's credential: whoever holds it may submit work to every node.
CLUSTER_SECRETS = frozenset({"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"})


def check_passed(names: Iterable[str]) -> None:
    """No child is handed the Ray cluster's token, whatever the configuration passes."""
    leaked = sorted(set(names) & CLUSTER_SECRETS)
    if leaked:
        raise ExecutorConfigError(
            f"'agent.env' passes {leaked[0]} to every child: that is the Ray cluster's "
            "token, with which an agent could submit work to every node; remove it"
        )


def check(executor: ExecutorConfig, flows: Iterable[Flow], sandbox: str) -> None:
    """Refuse what this installation or the sandbox setting cannot honour."""
    if not uses_ray(executor, flows):
        return
    missing = placement.ray_missing()
    if missing is not None:
        raise ExecutorConfigError(missing)
    if sandbox == "none":
        raise ExecutorConfigError(
            'backend = "ray" runs every child in the bubblewrap sandbox on its node; '
            'it cannot be combined with sandbox = "none"'
        )
