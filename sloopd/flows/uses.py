"""Which presets a configuration runs, and where: what load and start check on them.

A preset is selected three ways (``[agent] preset`` or the default for every agent
stage without a command of its own, a stage's ``agent``, a panel seat's ``agent``),
and every way ends in the preset's command line; so a child's preset is told from
its command (``presets.preset_of``), and an explicit ``command`` equal to a preset's
is that preset.  Two checks read the answer:

* at load, a warning for an agent stage with ``network = false`` whose preset talks
  to a vendor's API: it can only fail, and says so too late, as a ``network``
  failure of its first run (sloopd.flows.diagnosed makes that one final);
* at start and in doctor, whether each preset's CLI is visible in the sandbox
  (sloopd.core.cli_sight).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from sloopd.flows.agent_settings import AgentSettings
from sloopd.flows.flow import Flow
from sloopd.flows.presets import Preset, preset_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PresetUse:
    """One agent stage or seat that runs a preset: where it is configured, and how."""

    where: str  # "flows.default.stages[0]" (a seat: "….reviewers[1]")
    preset: Preset
    network: bool


def preset_uses(agent: AgentSettings, flows: Iterable[Flow]) -> list[PresetUse]:
    """Every agent stage and panel seat whose command is a preset's, in flow order."""
    uses: list[PresetUse] = []
    for flow in flows:
        for index, stage in enumerate(flow.stages):
            if stage.action != "agent":
                continue
            where = f"flows.{flow.name}.stages[{index}]"
            commands = [(where, stage.command or agent.command)]
            if stage.result_check == "panel":
                commands = [
                    (f"{where}.reviewers[{seat}]", reviewer.command)
                    for seat, reviewer in enumerate(stage.reviewers)
                ]
            for key, command in commands:
                chosen = preset_of(command)
                if chosen is not None:
                    uses.append(PresetUse(key, chosen, stage.network))
    return uses


def offline_warnings(uses: Iterable[PresetUse]) -> list[str]:
    """One sentence per agent stage or seat that cannot reach its preset's vendor."""
    return [
        f"'{use.where}' sets network = false, but its agent (the {use.preset.name!r} "
        f"preset) needs {use.preset.api}, which it cannot reach: its runs fail "
        "(network, not retried)"
        for use in uses
        if not use.network and use.preset.api is not None
    ]


def warn_offline(agent: AgentSettings, flows: Iterable[Flow]) -> None:
    """Log, at each load, the agent stages whose ``network = false`` their vendor needs."""
    for warning in offline_warnings(preset_uses(agent, flows)):
        log.warning("%s", warning)
