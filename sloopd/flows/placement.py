"""Where a stage's children run: ``[executor]`` and a stage's or seat's own choice.

``backend`` is ``local`` (a bubblewrap sandbox on the daemon's host) or ``ray``
(the same sandbox on a Ray node, ``sloopd.remote``).  ``resources`` is what a
child asks Ray for: ``cpus`` (default 1), ``memory`` (a size such as "2GiB") and
``custom`` (Ray's custom resources, by name).  A stage's or seat's own
``resources`` win over ``[executor] resources`` key by key (``custom`` name by
name), so a seat can ask for one more resource without repeating the rest.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sloopd.util import validate
from sloopd.util.sizes import parse_bytes
from sloopd.util.validate import ConfigError

BACKENDS = ("local", "ray")
RESOURCE_KEYS = ("cpus", "memory", "custom")
RAY_INSTALL = "pip install 'sloop[ray]'"


class PlacementError(ConfigError):
    """A placement setting that does not validate; the message names the key."""


@dataclass(frozen=True, slots=True)
class Resources:
    cpus: float | None = None
    memory: int | None = None
    custom: tuple[tuple[str, float], ...] = ()

    def over(self, defaults: Resources) -> Resources:
        """These resources where set, ``defaults`` elsewhere (custom merged by name)."""
        custom = dict(defaults.custom)
        custom.update(self.custom)
        return Resources(
            cpus=self.cpus if self.cpus is not None else defaults.cpus,
            memory=self.memory if self.memory is not None else defaults.memory,
            custom=tuple(sorted(custom.items())),
        )

    def request(self) -> dict[str, Any]:
        """What the driver asks Ray for (sloopd.remote.driver._options)."""
        return {
            "cpus": 1.0 if self.cpus is None else self.cpus,
            "memory": self.memory,
            "custom": dict(self.custom),
        }


@dataclass(frozen=True, slots=True)
class Placement:
    """A stage's or seat's own ``backend`` (None: the executor's) and ``resources``."""

    backend: str | None = None
    resources: Resources = Resources()


def from_json(data: Mapping[str, Any] | None) -> Placement | None:
    """A placement as a run's flow snapshot stored it (``dataclasses.asdict``)."""
    if data is None:
        return None
    asked = data.get("resources") or {}
    return Placement(
        data.get("backend"),
        Resources(
            cpus=asked.get("cpus"),
            memory=asked.get("memory"),
            custom=tuple((str(k), float(v)) for k, v in asked.get("custom") or ()),
        ),
    )


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PlacementError(f"'{where}' must be a number of at least 0")
    return float(value)


def resources(value: Any, where: str) -> Resources:
    if not isinstance(value, dict):
        raise PlacementError(f"'{where}' must be a table with cpus, memory or custom")
    unknown = sorted(set(value) - set(RESOURCE_KEYS))
    if unknown:
        raise PlacementError(
            f"unknown key '{where}.{unknown[0]}' (known: {', '.join(RESOURCE_KEYS)})"
        )
    cpus = _number(value["cpus"], f"{where}.cpus") if "cpus" in value else None
    memory = None
    if "memory" in value:
        raw = value["memory"]
        try:
            memory = parse_bytes(raw) if isinstance(raw, str) else int(_number(raw, where))
        except ValueError as exc:
            raise PlacementError(f"'{where}.memory': {exc}") from exc
    custom_raw = value.get("custom", {})
    if not isinstance(custom_raw, dict):
        raise PlacementError(f"'{where}.custom' must be a table of resource names and amounts")
    custom = []
    for name, amount in custom_raw.items():
        if not name or name in ("CPU", "GPU", "memory", "object_store_memory"):
            raise PlacementError(f"'{where}.custom.{name}' is not a custom resource name")
        custom.append((str(name), _number(amount, f"{where}.custom.{name}")))
    return Resources(cpus=cpus, memory=memory, custom=tuple(sorted(custom)))


def backend(value: Any, where: str) -> str:
    return validate.choice(value, where, BACKENDS, error=PlacementError)


def of(raw: Mapping[str, Any], where: str) -> Placement | None:
    """A stage's or seat's ``backend`` and ``resources`` keys; None when it sets neither."""
    if "backend" not in raw and "resources" not in raw:
        return None
    chosen = backend(raw["backend"], f"{where}.backend") if "backend" in raw else None
    asked = resources(raw["resources"], f"{where}.resources") if "resources" in raw else Resources()
    return Placement(chosen, asked)


def ray_missing() -> str | None:
    """Why ``backend = "ray"`` cannot be used by this installation, None when it can."""
    if importlib.util.find_spec("ray") is None:
        return f'backend = "ray" needs Ray, which is not installed: {RAY_INSTALL}'
    return None
