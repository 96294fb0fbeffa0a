"""``sloop.toml``: strict loading with errors that name the key and the reason.

The daemon refuses to start on a bad file and keeps the last good
configuration when a reload (SIGHUP) finds one.  Flows and the agent section
are validated by sloopd.flows.flow.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sloopd.core import cost_budgets, executor_config
from sloopd.core.executor_config import ExecutorConfig, ExecutorConfigError
from sloopd.flows import placement
from sloopd.flows.flow import AgentSettings, Flow, FlowError, default_flow
from sloopd.flows.flow import parse as parse_flows
from sloopd.flows.prompts import check_policy as check_prompt_in_argv
from sloopd.flows.uses import warn_offline
from sloopd.ops.webhook_targets import NotifyConfigError, Target, parse_targets
from sloopd.util.names import ref_problem
from sloopd.util.sizes import parse_bytes
from sloopd.vendor import Pattern, VendorConfigError, patterns_from_config
from sloopd.vendor import usage as vendor_usage
from sloopd.vendor.pricing import PriceTable, PricingError, parse_pricing
from sloopd.wire.api import parse_duration_ms as parse_ms

CONFIG_FILE = "sloop.toml"
DEFAULT_MAX_TICKET_BYTES = 1 << 20
# Bounds of repo.max_ticket_bytes: a ticket is a task description, not a data file.
MAX_TICKET_BYTES_RANGE = (1 << 10, 16 << 20)


class ConfigError(Exception):
    """A sloop.toml that does not validate; the message names key and reason."""


@dataclass(frozen=True, slots=True)
class RepoConfig:
    main: str = "main"
    tickets: str = "tickets"
    parallel: int = 2
    branch_prefix: str = "sloop/"
    # The deadline of a git call that may run hooks (the merge); past it git is killed.
    git_timeout_ms: int = 120_000
    # A ticket file larger than this is refused at post (before it is read), so one
    # file cannot fill the store, the loop or every reply that carries its body.
    max_ticket_bytes: int = DEFAULT_MAX_TICKET_BYTES
    # Free bytes captured output never takes on the state directory's filesystem
    # (sloopd.core.logroom); None: a tenth of the filesystem, at most 256 MiB.
    disk_reserve: int | None = None
    # How many runs of the merge queue build and gate their candidates at once
    # (sloopd.landing); None: ``parallel``.
    merge_window: int | None = None

    @property
    def window(self) -> int:
        return self.merge_window if self.merge_window is not None else self.parallel


@dataclass(frozen=True, slots=True)
class Config:
    repo: RepoConfig = field(default_factory=RepoConfig)
    agent: AgentSettings = field(default_factory=AgentSettings)
    flows: dict[str, Flow] = field(default_factory=lambda: {"default": default_flow()})
    source: Path | None = None
    # [[vendor.patterns]]: tried before the built-in table (sloopd.vendor.classify).
    vendor_patterns: tuple[Pattern, ...] = ()
    # "bwrap": every child in a bubblewrap sandbox; "none": unsafe, flagged by doctor.
    sandbox: str = "bwrap"
    # [[notify]]: webhook targets (sloopd.ops.webhook_targets), daemon-wide: a reload
    # applies them to the next event.
    notify: tuple[Target, ...] = ()
    # [pricing]: dollars per million tokens per model, over the built-in table
    # (sloopd.vendor.pricing): how the cost of a vendor that reports none is known.
    pricing: PriceTable = field(default_factory=PriceTable)
    # [executor]: where children run (sloopd.core.executor_config).
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)


SANDBOX_MODES = ("bwrap", "none")
_TOP_LEVEL = {"repo", "agent", "flows", "vendor", "sandbox", "notify", "pricing", "executor"}


def load(repo: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``<repo>/sloop.toml``; defaults when the file is absent.

    ``environ`` (the daemon's environment by default) holds the secrets that
    ``[[notify]] secret_env`` names.
    """
    path = repo / CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse(document, path, environ)


def parse(
    document: dict[str, Any],
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    where = f"{path}: " if path else ""
    unknown = sorted(set(document) - _TOP_LEVEL)
    if unknown:
        known = ", ".join(sorted(_TOP_LEVEL))
        raise ConfigError(f"{where}unknown key '{unknown[0]}' (known: {known})")
    sandbox = document.get("sandbox", "bwrap")
    if sandbox not in SANDBOX_MODES:
        raise ConfigError(f"{where}'sandbox' must be one of {' | '.join(SANDBOX_MODES)}")
    repo = _repo_section(document.get("repo", {}), where)
    agent = document.get("agent", {})
    flows = document.get("flows", {})
    for key, value in (("agent", agent), ("flows", flows)):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}'{key}' must be a table")
    try:
        parsed = parse_flows(agent, flows)
        check_prompt_in_argv(parsed.agent, parsed.flows)
    except FlowError as exc:
        raise ConfigError(f"{where}{exc}") from exc
    _check_streams(parsed.agent, parsed.flows, where)
    warn_offline(parsed.agent, parsed.flows.values())
    environment = os.environ if environ is None else environ
    try:
        pricing = parse_pricing(document.get("pricing", {}))
    except PricingError as exc:
        raise ConfigError(f"{where}{exc}") from exc
    unenforceable = cost_budgets.check(parsed.agent, parsed.flows, pricing, environment)
    if unenforceable is not None:
        raise ConfigError(f"{where}{unenforceable}")
    try:
        notify = parse_targets(document.get("notify", []), environment)
    except NotifyConfigError as exc:
        raise ConfigError(f"{where}{exc}") from exc
    try:
        executor = executor_config.parse(document.get("executor", {}))
        executor = executor_config.with_overrides(executor, *_serve_overrides(environment))
        executor_config.check(executor, parsed.flows.values(), sandbox)
        executor_config.check_passed(parsed.agent.env)
    except (ExecutorConfigError, placement.PlacementError) as exc:
        raise ConfigError(f"{where}{exc}") from exc
    return Config(
        executor=executor,
        repo=repo,
        agent=parsed.agent,
        flows=parsed.flows,
        source=path,
        vendor_patterns=_vendor_section(document.get("vendor", {}), where),
        sandbox=sandbox,
        notify=notify,
        pricing=pricing,
    )


# sloopd serve --executor/--ray-address: set in the daemon's own environment by the
# command line, so every load (start-up and each reload) applies them over the file.
EXECUTOR_OVERRIDE = "SLOOPD_EXECUTOR"
RAY_ADDRESS_OVERRIDE = "SLOOPD_RAY_ADDRESS"


def _serve_overrides(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    return environ.get(EXECUTOR_OVERRIDE) or None, environ.get(RAY_ADDRESS_OVERRIDE) or None


def _check_streams(agent: AgentSettings, flows: dict[str, Flow], where: str) -> None:
    """Every stream named has a parser here: a typo fails at load, not mid-run."""
    named: list[tuple[str, str | None]] = [("agent.stream", agent.stream)]
    for flow in flows.values():
        for index, stage in enumerate(flow.stages):
            key = f"flows.{flow.name}.stages[{index}]"
            named.append((f"{key}.stream", stage.stream))
            named += [
                (f"{key}.reviewers[{seat}].stream", reviewer.stream)
                for seat, reviewer in enumerate(stage.reviewers)
            ]
    for key, name in named:
        if name is None:
            continue
        try:
            vendor_usage.parser(name)
        except vendor_usage.UnknownStream as exc:
            raise ConfigError(f"{where}'{key}': {exc}") from exc


def _vendor_section(section: Any, where: str) -> tuple[Pattern, ...]:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}'vendor' must be a table")
    unknown = sorted(set(section) - {"patterns"})
    if unknown:
        raise ConfigError(f"{where}unknown key 'vendor.{unknown[0]}'")
    try:
        return patterns_from_config(section.get("patterns", []))
    except VendorConfigError as exc:
        raise ConfigError(f"{where}{exc}") from exc


def _git_timeout(value: Any, where: str) -> int:
    try:
        if not isinstance(value, str):
            raise ValueError('must be a duration string like "2m"')
        ms = parse_ms(value)
    except ValueError as exc:
        raise ConfigError(f"{where}'repo.git_timeout': {exc}") from exc
    if ms < 1000:
        raise ConfigError(f"{where}'repo.git_timeout' must be at least 1s")
    return ms


def _max_ticket_bytes(value: Any, where: str) -> int:
    low, high = MAX_TICKET_BYTES_RANGE
    try:
        if not isinstance(value, int | str):
            raise ValueError('must be an integer or a size string like "1MiB"')
        size = parse_bytes(value)
    except ValueError as exc:
        raise ConfigError(f"{where}'repo.max_ticket_bytes': {exc}") from exc
    if not low <= size <= high:
        raise ConfigError(f"{where}'repo.max_ticket_bytes' must be between 1KiB and 16MiB")
    return size


def _disk_reserve(value: Any, where: str) -> int:
    try:
        if not isinstance(value, int | str):
            raise ValueError('must be a size like 65536, "512KiB", "64MiB" or "1GiB"')
        return parse_bytes(value)
    except ValueError as exc:
        raise ConfigError(f"{where}'repo.disk_reserve': {exc}") from exc


def _count(section: dict[str, Any], key: str, default: int, where: str) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}'repo.{key}' must be an integer of at least 1")
    return value


def _repo_section(section: Any, where: str) -> RepoConfig:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}'repo' must be a table")
    defaults = RepoConfig()
    allowed = set(RepoConfig.__dataclass_fields__) - {"git_timeout_ms"} | {"git_timeout"}
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(f"{where}unknown key 'repo.{unknown[0]}'")
    values: dict[str, Any] = {}
    for key in ("main", "tickets", "branch_prefix"):
        value = section.get(key, getattr(defaults, key))
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}'repo.{key}' must be a non-empty string")
        values[key] = value
    values["parallel"] = _count(section, "parallel", defaults.parallel, where)
    if "merge_window" in section:
        values["merge_window"] = _count(section, "merge_window", 1, where)
    if "git_timeout" in section:
        values["git_timeout_ms"] = _git_timeout(section["git_timeout"], where)
    if "max_ticket_bytes" in section:
        values["max_ticket_bytes"] = _max_ticket_bytes(section["max_ticket_bytes"], where)
    if "disk_reserve" in section:
        values["disk_reserve"] = _disk_reserve(section["disk_reserve"], where)
    # Run branches are <branch_prefix><ticket name>/<attempt>: with a valid ticket
    # name, the prefix alone decides whether git takes them.
    for key, ref in (
        ("main", f"refs/heads/{values['main']}"),
        ("branch_prefix", f"refs/heads/{values['branch_prefix']}name/1"),
    ):
        problem = ref_problem(ref)
        if problem is not None:
            raise ConfigError(
                f"{where}'repo.{key}' = {values[key]!r} makes no valid git branch name "
                f"({ref!r}: {problem})"
            )
    tickets = Path(values["tickets"])
    if tickets.is_absolute() or ".." in tickets.parts:
        raise ConfigError(f"{where}'repo.tickets' must be a folder inside the repository")
    return RepoConfig(**values)
