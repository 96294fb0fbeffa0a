"""The ``[agent]`` section of ``sloop.toml`` and the value checks flows share.

Kept apart from ``sloopd.flows.flow`` so that neither outgrows one concern: this
module says what an agent child gets (its command, limits, sandbox mounts, the
stream its usage is read from, the run's budgets), the flow module how stages
follow each other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sloopd.flows.presets import CLAUDE, PRESETS, Preset
from sloopd.util import validate
from sloopd.util.validate import ConfigError
from sloopd.wire.api import parse_duration_ms as parse_ms

# Without [agent] command or preset: Claude Code as the "claude" preset runs it
# (headless, tools allowed, prompt on stdin, JSON events); "claude -p {prompt}"
# refused every tool and exited 0, so a run that did nothing read as merged.
DEFAULT_PRESET = CLAUDE
DEFAULT_AGENT_COMMAND = CLAUDE.command
# The JSON event streams a usage parser exists for, and "none" (no usage is read).
# A ``python:<module>:<function>`` spec names any other parser (sloopd.vendor.usage).
STREAMS = ("claude", "codex", "gemini", "none")
PYTHON_STREAM = "python:"

log = logging.getLogger(__name__)

_AGENT_KEYS = {
    "preset",
    "token_env",
    "command",
    "stall_after",
    "stall_kill_after",
    "cooldown",
    "probe_cooldown",
    "max_cooldown",
    "max_log_lines",
    "max_log_bytes",
    "env",
    "ro_mounts",
    "rw_mounts",
    "agent_timeout",
    "command_timeout",
    "transient_retries",
    "max_interruptions",
    "transient_backoff",
    "transient_backoff_max",
    "stream",
    "max_cost_usd",
    "max_tokens",
    "prompt_in_argv",
}
# What loading a command with {prompt} in argv does (sloopd.flows.prompts).
PROMPT_IN_ARGV = ("warn", "accept", "refuse")


class FlowError(ConfigError):
    """A flow or agent section that does not validate; names the key and reason."""


@dataclass(frozen=True, slots=True)
class Budget:
    """A run's spending limits; None is no limit."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class AgentSettings:
    command: tuple[str, ...] = DEFAULT_AGENT_COMMAND
    stall_after_ms: int = 20 * 60_000
    stall_kill_after_ms: int = 2 * 3_600_000
    # The longest the gate stays closed after a vendor limit that names no reset time.
    cooldown_ms: int = 30 * 60_000
    # Variables passed through to every child by name (the rest is an allowlist).
    env: tuple[str, ...] = DEFAULT_PRESET.env
    # Host paths every sandbox sees read-only / read-write (credentials, caches).
    ro_mounts: tuple[str, ...] = ()
    rw_mounts: tuple[str, ...] = ()
    # The preset's login files (``~/...``), read-only in each run's HOME when present.
    logins: tuple[str, ...] = DEFAULT_PRESET.logins
    # A vendor's reset time further ahead than this is capped (the gate says so).
    max_cooldown_ms: int = 6 * 3_600_000
    # Per child (stage execution or panel seat): output stored past these is
    # dropped, counted, and reported in one system record.
    max_log_lines: int = 100_000
    max_log_bytes: int = 64 << 20
    # Wall-clock limits per child (an agent stage or seat; a command stage), for
    # stages that set no ``timeout`` of their own.
    agent_timeout_ms: int = 2 * 3_600_000
    command_timeout_ms: int = 30 * 60_000
    # An overloaded or unreachable vendor: the ticket is queued again this many
    # times, after transient_backoff, doubling, at most transient_backoff_max.
    transient_retries: int = 3
    # A run whose executions a daemon's crash cut short this many times in a row is not
    # continued again: it settles failed (issue 38; a clean stop does not count).
    max_interruptions: int = 3
    transient_backoff_ms: int = 60_000
    transient_backoff_max_ms: int = 30 * 60_000
    # The JSON event stream agent stages print (their usage is read from it).
    stream: str = DEFAULT_PRESET.stream or "none"
    budget: Budget = Budget()
    # The first wait after a limit that names no reset, doubled on each repeat up to
    # cooldown_ms (sloopd.queue.gate: the gate probes whether the limit lifted).
    probe_cooldown_ms: int = 60_000
    # Whether the worker token is also in the child's environment (SLOOP_TOKEN), where
    # every process it starts inherits it and every environment dump shows it; it is
    # always in the file SLOOP_TOKEN_FILE names.  True: what agents before 0.8.0 read.
    token_env: bool = True
    # A command with {prompt} in argv shows the ticket to every local uid (/proc/<pid>/
    # cmdline): "warn" logs it at each load, "accept" does not, "refuse" fails the load.
    prompt_in_argv: str = "warn"


def parse_agent(section: dict[str, Any]) -> AgentSettings:
    unknown = sorted(set(section) - _AGENT_KEYS)
    if unknown:
        raise FlowError(f"unknown key 'agent.{unknown[0]}'")
    defaults = AgentSettings()
    chosen = preset_named(section.get("preset", DEFAULT_PRESET.name), "agent.preset")
    if "preset" in section and "command" in section:
        raise FlowError("set 'agent.preset' or 'agent.command', not both")
    command = argv(section.get("command", list(chosen.command)), "agent.command")
    # An explicit command prints what it prints: no stream is assumed for it.
    default_stream = "none" if "command" in section else (chosen.stream or "none")
    passed = _names(section.get("env", []), "agent.env")
    if "command" not in section:
        passed = tuple(dict.fromkeys((*chosen.env, *passed)))
    durations = _durations(section, defaults)
    max_lines = validate.count(
        section.get("max_log_lines", defaults.max_log_lines), "agent.max_log_lines", error=FlowError
    )
    max_bytes = validate.bounded(
        validate.size_bytes(
            section.get("max_log_bytes", defaults.max_log_bytes),
            "agent.max_log_bytes",
            "must be an integer or a string",
            error=FlowError,
        ),
        "agent.max_log_bytes",
        "at least 1KiB",
        least=1024,
        error=FlowError,
    )
    token_env = validate.flag(
        section.get("token_env", defaults.token_env), "agent.token_env", error=FlowError
    )
    prompt_in_argv = validate.choice(
        section.get("prompt_in_argv", defaults.prompt_in_argv),
        "agent.prompt_in_argv",
        PROMPT_IN_ARGV,
        error=FlowError,
    )
    retries = validate.count(
        section.get("transient_retries", defaults.transient_retries),
        "agent.transient_retries",
        least=0,
        error=FlowError,
    )
    interruptions = validate.count(
        section.get("max_interruptions", defaults.max_interruptions),
        "agent.max_interruptions",
        least=1,
        error=FlowError,
    )
    return AgentSettings(
        command,
        durations["stall_after"],
        durations["stall_kill_after"],
        durations["cooldown"],
        passed,
        _paths(section.get("ro_mounts", []), "agent.ro_mounts"),
        _paths(section.get("rw_mounts", []), "agent.rw_mounts"),
        max_cooldown_ms=durations["max_cooldown"],
        max_log_lines=max_lines,
        max_log_bytes=max_bytes,
        agent_timeout_ms=durations["agent_timeout"],
        command_timeout_ms=durations["command_timeout"],
        transient_retries=retries,
        max_interruptions=interruptions,
        transient_backoff_ms=durations["transient_backoff"],
        transient_backoff_max_ms=durations["transient_backoff_max"],
        stream=stream(section.get("stream", default_stream), "agent.stream"),
        logins=() if "command" in section else chosen.logins,
        budget=budget(section, "agent"),
        token_env=token_env,
        probe_cooldown_ms=durations["probe_cooldown"],
        prompt_in_argv=prompt_in_argv,
    )


def preset_named(name: Any, key: str) -> Preset:
    """The preset ``name`` names, for ``agent.preset`` and a stage's or seat's ``agent``.

    Every preset sloop.toml selects passes here, so a preset's caveat (what its CLI
    obeys in a checkout and cannot turn off) is logged here, at each load.
    """
    chosen = PRESETS[validate.choice(name, key, tuple(PRESETS), error=FlowError)]
    if chosen.caveat:
        log.warning("'%s' = %r: %s", key, name, chosen.caveat)
    return chosen


def _durations(section: dict[str, Any], defaults: AgentSettings) -> dict[str, int]:
    """Every duration key of [agent], its default where unset, checked against the others."""
    durations: dict[str, int] = {}
    for key, default in (
        ("stall_after", defaults.stall_after_ms),
        ("stall_kill_after", defaults.stall_kill_after_ms),
        ("cooldown", defaults.cooldown_ms),
        ("probe_cooldown", defaults.probe_cooldown_ms),
        ("max_cooldown", defaults.max_cooldown_ms),
        ("agent_timeout", defaults.agent_timeout_ms),
        ("command_timeout", defaults.command_timeout_ms),
        ("transient_backoff", defaults.transient_backoff_ms),
        ("transient_backoff_max", defaults.transient_backoff_max_ms),
    ):
        value = section.get(key)
        durations[key] = default if value is None else duration(value, f"agent.{key}")
    if durations["stall_kill_after"] < durations["stall_after"]:
        raise FlowError("'agent.stall_kill_after' must not be shorter than 'agent.stall_after'")
    for key in (
        "max_cooldown",
        "agent_timeout",
        "command_timeout",
        "transient_backoff",
        "probe_cooldown",
    ):
        validate.bounded(durations[key], f"agent.{key}", "at least 1s", least=1000, error=FlowError)
    if durations["transient_backoff_max"] < durations["transient_backoff"]:
        raise FlowError(
            "'agent.transient_backoff_max' must not be shorter than 'agent.transient_backoff'"
        )
    return durations


def duration(value: Any, key: str) -> int:
    """A duration key of ``[agent]`` or a stage, read by the one grammar."""
    return validate.duration_ms(value, key, parse_ms, error=FlowError)


def stream(value: Any, key: str) -> str:
    """A stream name, or a ``python:<module>:<function>`` spec (resolved by the runs)."""
    if isinstance(value, str) and value in STREAMS:
        return value
    if isinstance(value, str) and value.startswith(PYTHON_STREAM):
        module, _, function = value.removeprefix(PYTHON_STREAM).partition(":")
        if module and function.isidentifier():
            return value
    raise FlowError(
        f"'{key}' must be one of {' | '.join(STREAMS)} (or python:<module>:<function>), "
        f"not {value!r}"
    )


def budget(section: dict[str, Any], where: str) -> Budget:
    """``max_cost_usd`` (a positive number) and ``max_tokens`` (a positive integer)."""
    cost = section.get("max_cost_usd")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or cost <= 0
    ):
        raise FlowError(f"'{where}.max_cost_usd' must be a positive number of dollars")
    tokens = section.get("max_tokens")
    if tokens is not None:
        validate.count(tokens, f"{where}.max_tokens", error=FlowError)
    return Budget(None if cost is None else float(cost), tokens)


def argv(value: Any, key: str) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(part, str) and part for part in value)
    ):
        raise FlowError(f"'{key}' must be a non-empty list of strings (an argv)")
    return tuple(value)


def _names(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(name, str) and name.isidentifier() for name in value
    ):
        raise FlowError(f"'{key}' must be a list of environment variable names")
    if any(name.startswith("SLOOP_") for name in value):
        raise FlowError(f"'{key}': SLOOP_* variables are set by the daemon, not passed through")
    return tuple(value)


def _paths(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(path, str) and path.startswith(("/", "~/")) for path in value
    ):
        raise FlowError(f"'{key}' must be a list of absolute paths (or paths under ~/)")
    return tuple(value)
