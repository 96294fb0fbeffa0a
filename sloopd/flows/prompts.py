"""The prompt a stage's child is given, and the two ways it reaches the child.

Every child gets the prompt as a file (``SLOOP_PROMPT_FILE``; ``{prompt_file}`` in a
command is that file's path as the child sees it).  ``{prompt}`` in a command puts
the text itself in argv instead, which costs two things the file does not:

* **Size.**  Linux refuses an argument over ``MAX_ARG_STRLEN`` (128 KiB, its NUL
  included) and a command line and environment over ``ARG_MAX``: the child would
  never start (``E2BIG``).  ``argv_problem`` finds that before anything is started,
  at ``post`` for a ticket and again before each child, and says what to use instead.
* **Exposure.**  A process's argv is readable by every local uid in
  ``/proc/<pid>/cmdline`` (unless ``/proc`` is mounted ``hidepid=2``), so the ticket
  and the stage's instructions are, for as long as the child runs.
  ``agent.prompt_in_argv`` says what loading a ``sloop.toml`` that does it does:
  ``warn`` (logged at every load; ``sloopctl doctor`` warns too), ``accept`` (the
  operator accepted the exposure) or ``refuse`` (a load error).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sloopd.flows.agent_settings import AgentSettings, FlowError
from sloopd.flows.flow import Flow, Stage
from sloopd.util import argv_limits

PROMPT: str = "{prompt}"
PROMPT_FILE: str = "{prompt_file}"
# One pass over a command's parts: a prompt that itself holds "{prompt_file}" stays text.
_PLACEHOLDER = re.compile(r"\{prompt(?:_file)?\}")
INSTEAD = (
    "put {prompt_file} in the command (the prompt file's path), or read the prompt on "
    "standard input (sh -c 'exec my-agent < \"$SLOOP_PROMPT_FILE\"'), instead of {prompt}"
)
EXPOSURE = (
    "argv is readable by every local user in /proc/<pid>/cmdline, so the ticket is too "
    "while the child runs"
)
# What post estimates a prompt with: wider ids than any store will reach, so the
# estimate is never smaller than the prompt a run renders.
_WIDEST_TICKET, _WIDEST_RUN, _WIDEST_ATTEMPT = "T" + "9" * 15, "R" + "9" * 15, 99_999

log = logging.getLogger(__name__)


def render(
    instructions: str | None,
    title: str,
    body: str,
    *,
    ticket: str,
    ticket_name: str,
    run: str,
    stage: str,
    attempt: int,
) -> str:
    """The prompt text: the stage's instructions, the ticket's title, where, and its body."""
    return (
        f"{instructions or ''}\n\n# {title}\n\nTicket {ticket} ({ticket_name}), run {run}, "
        f"stage '{stage}' execution {attempt}.\n\n{body}\n"
    ).lstrip("\n")


def expand(command: Sequence[str], prompt: str, prompt_file: str) -> tuple[str, ...]:
    """``command`` with every ``{prompt}`` and ``{prompt_file}`` replaced, in one pass."""

    def value(found: re.Match[str]) -> str:
        return prompt if found.group(0) == PROMPT else prompt_file

    return tuple(_PLACEHOLDER.sub(value, part) for part in command)


def in_argv(command: Sequence[str]) -> bool:
    return any(PROMPT in part for part in command)


@dataclass(frozen=True, slots=True)
class Child:
    """One child a flow starts: its stage, its command and the sloop.toml key it is from."""

    stage: Stage
    command: tuple[str, ...]
    key: str


def children(flow: Flow, agent: AgentSettings) -> Iterator[Child]:
    """Every command the flow's stages run (as sloopd.runs.execute picks them)."""
    where = f"flows.{flow.name}.stages"
    for index, stage in enumerate(flow.stages):
        if stage.result_check == "panel":
            for seat, reviewer in enumerate(stage.reviewers):
                key = f"{where}[{index}].reviewers[{seat}].command"
                yield Child(stage, reviewer.command, key)
        elif stage.command:
            yield Child(stage, stage.command, f"{where}[{index}].command")
        elif stage.action == "agent":
            yield Child(stage, agent.command, "agent.command")


def argv_keys(agent: AgentSettings, flows: dict[str, Flow]) -> list[str]:
    """The sloop.toml keys whose command puts ``{prompt}`` in argv, each once."""
    keys = ["agent.command"] if in_argv(agent.command) else []
    for flow in flows.values():
        keys += [child.key for child in children(flow, agent) if in_argv(child.command)]
    return list(dict.fromkeys(keys))


def check_policy(agent: AgentSettings, flows: dict[str, Flow]) -> None:
    """Apply ``agent.prompt_in_argv`` to a loaded configuration (module docstring)."""
    keys = argv_keys(agent, flows)
    if not keys or agent.prompt_in_argv == "accept":
        return
    if agent.prompt_in_argv == "refuse":
        raise FlowError(
            f"'{keys[0]}' puts {PROMPT} in argv and agent.prompt_in_argv is \"refuse\": "
            f"{EXPOSURE}; {INSTEAD}"
        )
    for key in keys:
        log.warning(
            "'%s' puts %s in argv: %s; %s (or set agent.prompt_in_argv = \"accept\")",
            key,
            PROMPT,
            EXPOSURE,
            INSTEAD,
        )


@dataclass(frozen=True, slots=True)
class TooLong:
    """A command whose argv would not fit once ``{prompt}`` is replaced."""

    message: str
    stage: str
    key: str | None
    size_bytes: int
    limit_bytes: int


def argv_problem(
    command: Sequence[str], expanded: Sequence[str], key: str | None = None, stage: str = ""
) -> TooLong | None:
    """Why ``expanded`` (``command`` with ``{prompt}`` replaced) cannot start, or None.

    Only arguments the prompt went into are judged: the rest is the operator's own
    command line, which the process layer still checks as a whole before it starts.
    """
    if not in_argv(command):
        return None
    grown = [part for template, part in zip(command, expanded, strict=True) if PROMPT in template]
    where = f"'{key}'" if key else "the command"
    for part in grown:
        size = argv_limits.argument_bytes(part)
        if size > argv_limits.MAX_ARG_STRLEN:
            return TooLong(
                f"the prompt does not fit one argument of {where}: {size} bytes with its "
                f"NUL, over Linux's limit of {argv_limits.MAX_ARG_STRLEN} (MAX_ARG_STRLEN); "
                f"{INSTEAD}",
                stage,
                key,
                size,
                argv_limits.MAX_ARG_STRLEN,
            )
    total = argv_limits.argv_bytes(expanded)
    budget = argv_limits.prompt_budget()
    if total > budget:
        return TooLong(
            f"the prompt does not fit the command line of {where}: {total} bytes, over "
            f"{budget} (half of this host's ARG_MAX, the rest kept for the environment and "
            f"the sandbox's own arguments); {INSTEAD}",
            stage,
            key,
            total,
            budget,
        )
    return None


def ticket_problem(
    flow: Flow, agent: AgentSettings, name: str, title: str, body: str
) -> TooLong | None:
    """Whether a ticket's prompt would fit every ``{prompt}`` command its flow runs.

    Rendered with wider ids than a real run has, so a ticket ``post`` accepts never
    fails this check before its child starts.
    """
    for child in children(flow, agent):
        if not in_argv(child.command):
            continue
        prompt = render(
            child.stage.prompt,
            title,
            body,
            ticket=_WIDEST_TICKET,
            ticket_name=name,
            run=_WIDEST_RUN,
            stage=child.stage.name,
            attempt=_WIDEST_ATTEMPT,
        )
        expanded = expand(child.command, prompt, os.devnull)
        problem = argv_problem(child.command, expanded, child.key, child.stage.name)
        if problem is not None:
            return problem
    return None
