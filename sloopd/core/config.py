"""``sloop.toml``: strict loading with errors that name the key and the reason.

The daemon refuses to start on a bad file and keeps the last good
configuration when a reload (SIGHUP) finds one.  Flows and the agent section
are validated by sloopd.flows.flow, the other sections by the layers that own
them; every refusal is a ``ConfigError`` (sloopd.util.validate), named here once
with the file it came from.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sloopd.core import cost_budgets, executor_config
from sloopd.core.executor_config import ExecutorConfig
from sloopd.core.logcache import DEFAULT_LOG_CACHE_BYTES
from sloopd.flows.flow import AgentSettings, Flow, default_flow
from sloopd.flows.flow import parse as parse_flows
from sloopd.flows.prompts import check_policy as check_prompt_in_argv
from sloopd.flows.uses import warn_offline
from sloopd.ops.webhook_targets import Target, parse_targets
from sloopd.util import validate
from sloopd.util.names import ref_problem
from sloopd.util.validate import ConfigError as ConfigError
from sloopd.vendor import Pattern, patterns_from_config
from sloopd.vendor import usage as vendor_usage
from sloopd.vendor.pricing import PriceTable, parse_pricing
from sloopd.wire.api import parse_duration_ms as parse_ms

CONFIG_FILE = "sloop.toml"
DEFAULT_MAX_TICKET_BYTES = 1 << 20
# Bounds of repo.max_ticket_bytes: a ticket is a task description, not a data file.
MAX_TICKET_BYTES_RANGE = (1 << 10, 16 << 20)


DEFAULT_TREE_CACHE_BYTES = 4 << 30
WORKSPACE_MODES = ("auto", "checkout")


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
    # (0.9.0) Disk the shared trees of copy-on-write checkouts may take
    # (sloopd.git.shared_trees); the least recently used go first past it.
    tree_cache: int = DEFAULT_TREE_CACHE_BYTES
    # (0.9.0) "auto": copy-on-write checkouts where this host allows them, else whole
    # ones; "checkout": always whole checkouts, as before 0.9.0.
    workspaces: str = "auto"
    # (0.9.0) Memory for log records readers asked for (sloopd.core.logcache); 0: none.
    log_cache: int = DEFAULT_LOG_CACHE_BYTES

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
    """The configuration ``document`` describes; a ConfigError naming ``path`` if not."""
    try:
        return _sections(document, path, os.environ if environ is None else environ)
    except ConfigError as exc:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{exc}") from exc


def _sections(document: dict[str, Any], path: Path | None, environ: Mapping[str, str]) -> Config:
    unknown = sorted(set(document) - _TOP_LEVEL)
    if unknown:
        known = ", ".join(sorted(_TOP_LEVEL))
        raise ConfigError(f"unknown key '{unknown[0]}' (known: {known})")
    sandbox = validate.choice(document.get("sandbox", "bwrap"), "sandbox", SANDBOX_MODES)
    repo = _repo_section(document.get("repo", {}))
    agent = document.get("agent", {})
    flows = document.get("flows", {})
    for key, value in (("agent", agent), ("flows", flows)):
        if not isinstance(value, dict):
            raise ConfigError(f"'{key}' must be a table")
    parsed = parse_flows(agent, flows)
    check_prompt_in_argv(parsed.agent, parsed.flows)
    _check_streams(parsed.agent, parsed.flows)
    warn_offline(parsed.agent, parsed.flows.values())
    pricing = parse_pricing(document.get("pricing", {}))
    unenforceable = cost_budgets.check(parsed.agent, parsed.flows, pricing, environ)
    if unenforceable is not None:
        raise ConfigError(unenforceable)
    notify = parse_targets(document.get("notify", []), environ)
    executor = executor_config.parse(document.get("executor", {}))
    executor = executor_config.with_overrides(executor, *_serve_overrides(environ))
    executor_config.check(executor, parsed.flows.values(), sandbox)
    executor_config.check_passed(parsed.agent.env)
    return Config(
        executor=executor,
        repo=repo,
        agent=parsed.agent,
        flows=parsed.flows,
        source=path,
        vendor_patterns=_vendor_section(document.get("vendor", {})),
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


def _check_streams(agent: AgentSettings, flows: dict[str, Flow]) -> None:
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
            raise ConfigError(f"'{key}': {exc}") from exc


def _vendor_section(section: Any) -> tuple[Pattern, ...]:
    if not isinstance(section, dict):
        raise ConfigError("'vendor' must be a table")
    unknown = sorted(set(section) - {"patterns"})
    if unknown:
        raise ConfigError(f"unknown key 'vendor.{unknown[0]}'")
    return patterns_from_config(section.get("patterns", []))


def _checkout_keys(section: dict[str, Any]) -> dict[str, Any]:
    """``repo.tree_cache``, ``repo.log_cache`` and ``repo.workspaces`` (0.9.0), where
    written."""
    values: dict[str, Any] = {}
    if "tree_cache" in section:
        values["tree_cache"] = validate.size_bytes(
            section["tree_cache"],
            "repo.tree_cache",
            'must be a size like 1073741824, "512MiB" or "4GiB"',
        )
    if "log_cache" in section:
        values["log_cache"] = validate.size_bytes(
            section["log_cache"],
            "repo.log_cache",
            'must be a size like 16777216, "64MiB" or "0" (none)',
        )
    if "workspaces" in section:
        values["workspaces"] = validate.choice(
            section["workspaces"], "repo.workspaces", WORKSPACE_MODES
        )
    return values


def _repo_section(section: Any) -> RepoConfig:
    if not isinstance(section, dict):
        raise ConfigError("'repo' must be a table")
    defaults = RepoConfig()
    allowed = set(RepoConfig.__dataclass_fields__) - {"git_timeout_ms"} | {"git_timeout"}
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(f"unknown key 'repo.{unknown[0]}'")
    values: dict[str, Any] = {}
    for key in ("main", "tickets", "branch_prefix"):
        values[key] = validate.text(section.get(key, getattr(defaults, key)), f"repo.{key}")
    values["parallel"] = validate.count(section.get("parallel", defaults.parallel), "repo.parallel")
    if "merge_window" in section:
        values["merge_window"] = validate.count(section["merge_window"], "repo.merge_window")
    if "git_timeout" in section:
        key = "repo.git_timeout"
        ms = validate.duration_ms(
            section["git_timeout"], key, parse_ms, like="2m", kind_as_reason=True
        )
        values["git_timeout_ms"] = validate.bounded(ms, key, "at least 1s", least=1000)
    if "max_ticket_bytes" in section:
        key, (low, high) = "repo.max_ticket_bytes", MAX_TICKET_BYTES_RANGE
        size = validate.size_bytes(
            section["max_ticket_bytes"], key, 'must be an integer or a size string like "1MiB"'
        )
        values["max_ticket_bytes"] = validate.bounded(
            size, key, "between 1KiB and 16MiB", least=low, most=high
        )
    values.update(_checkout_keys(section))
    if "disk_reserve" in section:
        values["disk_reserve"] = validate.size_bytes(
            section["disk_reserve"],
            "repo.disk_reserve",
            'must be a size like 65536, "512KiB", "64MiB" or "1GiB"',
        )
    # Run branches are <branch_prefix><ticket name>/<attempt>: with a valid ticket
    # name, the prefix alone decides whether git takes them.
    for key, ref in (
        ("main", f"refs/heads/{values['main']}"),
        ("branch_prefix", f"refs/heads/{values['branch_prefix']}name/1"),
    ):
        problem = ref_problem(ref)
        if problem is not None:
            raise ConfigError(
                f"'repo.{key}' = {values[key]!r} makes no valid git branch name "
                f"({ref!r}: {problem})"
            )
    tickets = Path(values["tickets"])
    if tickets.is_absolute() or ".." in tickets.parts:
        raise ConfigError("'repo.tickets' must be a folder inside the repository")
    return RepoConfig(**values)
