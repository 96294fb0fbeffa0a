"""Flows and the agent section of ``sloop.toml``, validated strictly.

A run admits a snapshot of its flow (``Flow.to_json``) when it is claimed and
replays its stage log against that snapshot only, so editing sloop.toml never
changes a run in flight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from sloopd.flows import landings, placement
from sloopd.flows.agent_settings import (
    DEFAULT_AGENT_COMMAND,
    AgentSettings,
    Budget,
    FlowError,
    argv,
    budget,
    duration,
    parse_agent,
    preset_named,
    stream,
)
from sloopd.flows.panel_keys import Reviewer
from sloopd.flows.panel_keys import panel as _panel
from sloopd.flows.placement import Placement
from sloopd.util import validate
from sloopd.util.names import NAME_RULE, name_problem

__all__ = [
    "DEFAULT_AGENT_COMMAND",
    "AgentSettings",
    "Budget",
    "Flow",
    "FlowError",
    "Flows",
    "Reviewer",
    "Stage",
    "parse",
]

Action = Literal["agent", "command", "sync", "ff_only"]
Check = Literal["exit_code", "reported", "panel"]

ACTIONS: tuple[Action, ...] = ("agent", "command", "sync", "ff_only")
CHECKS: tuple[Check, ...] = ("exit_code", "reported", "panel")
FAIL_ACTIONS = ("fail", "continue")
SYNC_MODES = ("merge", "rebase")
DEFAULT_PROMPT = "Implement the ticket. Commit your work."
_STAGE_KEYS = {
    "name",
    "action",
    "prompt",
    "command",
    "result_check",
    "fail_action",
    "return_to",
    "returns",
    "quorum",
    "reviewers",
    "mode",
    "network",
    "commit",
    "allow_empty",
    "timeout",
    "stream",
    "agent",
    "backend",
    "resources",
}
COMMIT_MODES = ("manual", "auto")


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    action: Action
    result_check: Check = "exit_code"
    fail_action: str = "fail"
    prompt: str | None = None
    command: tuple[str, ...] | None = None
    return_to: str | None = None
    returns: int = 0
    quorum: int = 0
    reviewers: tuple[Reviewer, ...] = ()
    mode: str = "merge"
    # The child's network (agents need their vendor; tests usually should not).
    network: bool = True
    # "auto": Sloop commits what an agent left uncommitted; "manual": that fails.
    commit: str = "manual"
    # ff_only only: merging nothing beyond main passes instead of failing.
    allow_empty: bool = False
    # Wall-clock limit per child (an agent or command stage, each panel seat);
    # None: agent.agent_timeout or agent.command_timeout.
    timeout_ms: int | None = None
    # An agent stage's JSON event stream; None: agent.stream.
    stream: str | None = None
    # Variables the stage's preset (``agent = "codex"``) passes through, beside agent.env.
    env: tuple[str, ...] = ()
    # The stage's preset's login files (``~/...``), read-only in its HOME when present.
    logins: tuple[str, ...] = ()
    # Its own backend and resources (sloopd.flows.placement); None: [executor]'s.
    placement: Placement | None = None
    # Derived, never read from sloop.toml: the stage sits between a landing's sync and
    # its ff_only (sloopd.flows.landings), so it runs on the run's merge-queue candidate
    # and never moves it.  Set by ``Flow`` itself whatever built it.
    gate: bool = False

    @property
    def advisory(self) -> bool:
        return self.fail_action == "continue"

    def stream_of(self, seat: int | None, agent_stream: str) -> str:
        """The stream its child prints: the seat's, else the stage's, else ``[agent]``'s
        (``agent_stream``); a command stage runs tools, not agents: none."""
        if self.action != "agent":
            return "none"
        if seat is not None and self.reviewers[seat].stream is not None:
            return self.reviewers[seat].stream or "none"
        return self.stream or agent_stream

    @property
    def produces(self) -> bool:
        """Whether its commits become the run's work (else it reviews a pinned commit)."""
        return (
            self.action in ("agent", "command")
            and self.result_check == "exit_code"
            and not self.advisory
            and not self.gate  # a merge-queue gate runs on the candidate (DESIGN rule 9)
        )


@dataclass(frozen=True, slots=True)
class Flow:
    name: str
    stages: tuple[Stage, ...]
    # The flow's own run budget; None falls back to [agent]'s.
    max_cost_usd: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        # A snapshot's "gate" is recomputed too: the flow's shape decides, nothing stored.
        gates = landings.gate_positions(self.stages)
        marked = tuple(
            replace(stage, gate=index in gates) if stage.gate != (index in gates) else stage
            for index, stage in enumerate(self.stages)
        )
        object.__setattr__(self, "stages", marked)

    def landing(self, name: str) -> landings.Span | None:
        """The landing stage ``name`` belongs to (its sync, a gate stage, its ff_only)."""
        return landings.span_at(self.stages, self.index(name))

    def budget(self, agent: AgentSettings) -> Budget:
        """The budget a run of this flow spends: the flow's figures, else [agent]'s."""
        fallback = agent.budget
        return Budget(
            self.max_cost_usd if self.max_cost_usd is not None else fallback.max_cost_usd,
            self.max_tokens if self.max_tokens is not None else fallback.max_tokens,
        )

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def index(self, name: str) -> int:
        return next(i for i, s in enumerate(self.stages) if s.name == name)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Flow:
        stages = []
        for raw in data["stages"]:
            raw = dict(raw)
            raw["reviewers"] = tuple(
                Reviewer(
                    r["target"],
                    tuple(r["command"]),
                    r.get("stream"),
                    tuple(r.get("env", ())),
                    tuple(r.get("logins", ())),
                    placement.from_json(r.get("placement")),
                )
                for r in raw.get("reviewers", ())
            )
            raw["placement"] = placement.from_json(raw.get("placement"))
            if raw.get("command") is not None:
                raw["command"] = tuple(raw["command"])
            raw["env"] = tuple(raw.get("env", ()))
            raw["logins"] = tuple(raw.get("logins", ()))
            # Snapshots taken before 0.5.0 lack the newer keys: their defaults apply.
            stages.append(Stage(**raw))
        return cls(
            name=data["name"],
            stages=tuple(stages),
            max_cost_usd=data.get("max_cost_usd"),
            max_tokens=data.get("max_tokens"),
        )


@dataclass(frozen=True, slots=True)
class Flows:
    agent: AgentSettings = field(default_factory=AgentSettings)
    flows: dict[str, Flow] = field(default_factory=dict)


def default_flow() -> Flow:
    """Without ``flows.default`` in sloop.toml: implement → sync → merge."""
    return Flow(
        "default",
        (
            Stage("implement", "agent", prompt=DEFAULT_PROMPT),
            Stage("sync", "sync"),
            Stage("merge", "ff_only", return_to="sync", returns=3),
        ),
    )


def parse(agent: dict[str, Any], flows: dict[str, Any]) -> Flows:
    settings = parse_agent(agent)
    parsed = {"default": default_flow()}
    for name, body in flows.items():
        parsed[name] = _flow(name, body)
    return Flows(agent=settings, flows=parsed)


def _flow(name: str, body: Any) -> Flow:
    where = f"flows.{name}"
    # Flow names are front matter values and metrics labels; stage names become
    # file names and ``logs`` selectors: one rule for both (sloopd.util.names).
    problem = name_problem(name)
    if problem is not None:
        raise FlowError(f"'{where}': the flow name {name!r} is refused: {problem} ({NAME_RULE})")
    if not isinstance(body, dict):
        raise FlowError(f"'{where}' must be a table")
    unknown = sorted(set(body) - {"stages", "max_cost_usd", "max_tokens"})
    if unknown:
        raise FlowError(f"unknown key '{where}.{unknown[0]}'")
    raw_stages = body.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise FlowError(f"'{where}.stages' must list at least one stage")
    stages: list[Stage] = []
    for index, raw in enumerate(raw_stages):
        stages.append(_stage(f"{where}.stages[{index}]", raw, stages))
    _check_landing_returns(where, stages)
    limits = budget(body, where)
    return Flow(name, tuple(stages), limits.max_cost_usd, limits.max_tokens)


def _check_landing_returns(where: str, stages: list[Stage]) -> None:
    """A landing's stages go back to its sync or before, never into its gate: a gate runs
    on the candidate its sync built, which a return past the sync would not rebuild."""
    for span in landings.spans(stages):
        for index in range(span.sync + 1, span.ff_only + 1):
            target = stages[index].return_to
            if target is None:
                continue
            position = next(i for i, s in enumerate(stages) if s.name == target)
            if span.sync < position:
                raise FlowError(
                    f"'{where}.stages[{index}].return_to': '{target}' is a gate stage of "
                    f"the landing '{stages[span.sync].name}' → '{stages[span.ff_only].name}'"
                    f"; return to '{stages[span.sync].name}' or an earlier stage (the merge "
                    "queue's candidate is built by the sync)"
                )


def _stage(where: str, raw: Any, earlier: list[Stage]) -> Stage:
    if not isinstance(raw, dict):
        raise FlowError(f"'{where}' must be a table")
    unknown = sorted(set(raw) - _STAGE_KEYS)
    if unknown:
        raise FlowError(f"unknown key '{where}.{unknown[0]}'")
    name = _stage_name(where, raw.get("name"))
    if any(s.name == name for s in earlier):
        raise FlowError(f"'{where}.name': stage '{name}' is defined twice")
    action = _choice(raw, "action", ACTIONS, where, None)
    check = _choice(raw, "result_check", CHECKS, where, "exit_code")
    fail_action = _choice(raw, "fail_action", FAIL_ACTIONS, where, "fail")
    _check_fits_action(where, action, check)
    prompt = raw.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or action != "agent"):
        raise FlowError(f"'{where}.prompt' must be a string, on an agent stage")
    command, preset_stream, preset_env, preset_logins = _command(where, raw, action)
    return_to, returns = _return_edge(where, raw, name, earlier, fail_action)
    reviewers, quorum = _panel(where, raw, check)
    mode = _choice(raw, "mode", SYNC_MODES, where, "merge")
    if "mode" in raw and action != "sync":
        raise FlowError(f"'{where}.mode' is only for sync stages")
    network = _flag(raw, "network", where, True)
    if "network" in raw and action not in ("agent", "command"):
        raise FlowError(f"'{where}.network' is only for agent and command stages")
    commit = _choice(raw, "commit", COMMIT_MODES, where, "manual")
    if "commit" in raw and action != "agent":
        raise FlowError(f"'{where}.commit' is only for agent stages")
    timeout_ms, stream_name = _child_limits(where, raw, action)
    stream_name = stream_name or preset_stream
    allow_empty = _flag(raw, "allow_empty", where, False)
    if "allow_empty" in raw and action != "ff_only":
        raise FlowError(f"'{where}.allow_empty' is only for ff_only stages")
    placed = placement.of(raw, where)
    if placed is not None and action not in ("agent", "command"):
        raise FlowError(f"'{where}.backend' and '.resources' are only for agent and command stages")
    return Stage(
        placement=placed,
        name=name,
        action=action,
        result_check=check,
        fail_action=fail_action,
        prompt=prompt,
        command=command,
        return_to=return_to,
        returns=returns,
        quorum=quorum,
        reviewers=reviewers,
        mode=mode,
        network=network,
        commit=commit,
        allow_empty=allow_empty,
        timeout_ms=timeout_ms,
        stream=stream_name,
        env=preset_env,
        logins=preset_logins,
    )


def _command(
    where: str, raw: dict[str, Any], action: str
) -> tuple[tuple[str, ...] | None, str | None, tuple[str, ...], tuple[str, ...]]:
    """A stage's own command: ``command``, or a preset's (``agent = "codex"``), with the
    preset's stream, the variable names it passes through and its login files."""
    if "agent" in raw:
        if action != "agent":
            raise FlowError(f"'{where}.agent' is only for agent stages")
        if "command" in raw:
            raise FlowError(f"set '{where}.agent' or '{where}.command', not both")
        chosen = preset_named(raw["agent"], f"{where}.agent")
        return chosen.command, chosen.stream, chosen.env, chosen.logins
    command = raw.get("command")
    if command is None and action != "command":
        return None, None, (), ()
    if action not in ("agent", "command"):
        raise FlowError(f"'{where}.command' is only for agent and command stages")
    return argv(command, f"{where}.command"), None, (), ()


def _child_limits(where: str, raw: dict[str, Any], action: str) -> tuple[int | None, str | None]:
    """A stage's own ``timeout`` (agent and command stages) and ``stream`` (agent stages)."""
    timeout_ms = None
    if "timeout" in raw:
        if action not in ("agent", "command"):
            raise FlowError(f"'{where}.timeout' is only for agent and command stages")
        timeout_ms = validate.bounded(
            duration(raw["timeout"], f"{where}.timeout"),
            f"{where}.timeout",
            "at least 1s",
            least=1000,
            error=FlowError,
        )
    stream_name = None
    if "stream" in raw:
        if action != "agent":
            raise FlowError(f"'{where}.stream' is only for agent stages")
        stream_name = stream(raw["stream"], f"{where}.stream")
    return timeout_ms, stream_name


def _stage_name(where: str, name: Any) -> str:
    if not isinstance(name, str):
        raise FlowError(f"'{where}.name' is required: a stage name ({NAME_RULE})")
    problem = name_problem(name)
    if problem is not None:
        raise FlowError(
            f"'{where}.name': the stage name {name!r} is refused: {problem} ({NAME_RULE})"
        )
    return name


def _flag(raw: dict[str, Any], key: str, where: str, default: bool) -> bool:
    return validate.flag(raw.get(key, default), f"{where}.{key}", error=FlowError)


def _choice(
    raw: dict[str, Any], key: str, allowed: tuple[Any, ...], where: str, default: Any
) -> Any:
    value = raw.get(key, default)
    if value is None:
        raise FlowError(f"'{where}.{key}' is required ({' | '.join(allowed)})")
    return validate.choice(value, f"{where}.{key}", allowed, error=FlowError, show_value=True)


def _check_fits_action(where: str, action: str, check: str) -> None:
    if action in ("sync", "ff_only") and check != "exit_code":
        raise FlowError(f"'{where}.result_check': {action} stages are decided by git")
    if check == "panel" and action != "agent":
        raise FlowError(f"'{where}.result_check': a panel needs an agent stage")


def _return_edge(
    where: str, raw: dict[str, Any], name: str, earlier: list[Stage], fail_action: str
) -> tuple[str | None, int]:
    return_to = raw.get("return_to")
    if return_to is None:
        if "returns" in raw:
            raise FlowError(f"'{where}.returns' needs 'return_to'")
        return None, 0
    if not isinstance(return_to, str):
        raise FlowError(f"'{where}.return_to' must be a stage name")
    if fail_action == "continue":
        raise FlowError(
            f"'{where}': 'fail_action = \"continue\"' cannot be combined with 'return_to'"
        )
    if return_to != name and not any(s.name == return_to for s in earlier):
        raise FlowError(
            f"'{where}.return_to': '{return_to}' is not this stage or an earlier "
            "one (unknown, or it points forward)"
        )
    return return_to, validate.count(raw.get("returns", 1), f"{where}.returns", error=FlowError)
