"""``sloopd.flows.prompts`` and ``sloopd.util.argv_limits``: the prompt's way into a child.

The daemon-level behaviour (post refusals, stage failures, the load policy) is in
tests/integration/test_ticket_limits.py and test_prompt_in_argv.py; these pin the
pure parts: one-pass placeholders, the limits' arithmetic, and which commands count.
"""

from __future__ import annotations

import pytest

from sloopd.core import config
from sloopd.core.bodies import shown
from sloopd.flows import presets, prompts
from sloopd.flows.flow import FlowError
from sloopd.util import argv_limits

FITS_ONE_ARGUMENT = argv_limits.MAX_ARG_STRLEN - 1  # bytes, before the NUL


def test_placeholders_are_replaced_in_one_pass() -> None:
    # A prompt that itself says "{prompt_file}" (a ticket about Sloop) stays text.
    expanded = prompts.expand(
        ["agent", "-p", "{prompt}", "--file={prompt_file}", "{prompt}{prompt}"],
        "see {prompt_file} and {prompt}",
        "/sloop/prompt.md",
    )
    assert expanded == (
        "agent",
        "-p",
        "see {prompt_file} and {prompt}",
        "--file=/sloop/prompt.md",
        "see {prompt_file} and {prompt}" * 2,
    )


def test_one_argument_fits_up_to_max_arg_strlen_with_its_nul() -> None:
    command = ("agent", "{prompt}")
    at_limit = prompts.expand(command, "x" * FITS_ONE_ARGUMENT, "")
    assert prompts.argv_problem(command, at_limit) is None
    over = prompts.expand(command, "x" * (FITS_ONE_ARGUMENT + 1), "")
    problem = prompts.argv_problem(command, over, "agent.command", "implement")
    assert problem is not None
    assert problem.size_bytes == argv_limits.MAX_ARG_STRLEN + 1
    assert problem.limit_bytes == argv_limits.MAX_ARG_STRLEN
    assert "{prompt_file}" in problem.message
    assert "standard input" in problem.message
    # Bytes, not characters: a multi-byte prompt reaches the limit sooner.
    wide = prompts.expand(command, "é" * (FITS_ONE_ARGUMENT // 2 + 1), "")
    assert prompts.argv_problem(command, wide) is not None


def test_many_arguments_are_judged_together_against_arg_max() -> None:
    prompt = "x" * (FITS_ONE_ARGUMENT - 16)
    count = argv_limits.prompt_budget() // len(prompt) + 1
    command = ("agent", *["{prompt}"] * count)
    problem = prompts.argv_problem(command, prompts.expand(command, prompt, ""))
    assert problem is not None
    assert "ARG_MAX" in problem.message


def test_the_operators_own_arguments_are_not_the_prompts_problem() -> None:
    # No {prompt}: nothing to say here (the process layer judges the whole command line).
    assert prompts.argv_problem(("agent", "x" * 200_000), ("agent", "x" * 200_000)) is None
    assert argv_limits.problem(["agent", "x" * 200_000], {}) is not None
    assert "MAX_ARG_STRLEN" in (argv_limits.problem(["a"], {"V": "x" * 200_000}) or "")
    assert argv_limits.problem(["agent", "small"], {"HOME": "/h"}) is None


def test_a_tickets_prompt_is_judged_per_stage_command() -> None:
    loaded = config.parse(
        {
            "agent": {"command": ["agent", "{prompt_file}"], "prompt_in_argv": "accept"},
            "flows": {
                "default": {
                    "stages": [
                        {"name": "implement", "action": "agent"},
                        {"name": "check", "action": "command", "command": ["check", "{prompt}"]},
                    ]
                }
            },
        }
    )
    flow = loaded.flows["default"]
    assert prompts.ticket_problem(flow, loaded.agent, "t", "T", "x" * 100_000) is None
    problem = prompts.ticket_problem(flow, loaded.agent, "t", "T", "x" * FITS_ONE_ARGUMENT)
    assert problem is not None
    assert (problem.stage, problem.key) == ("check", "flows.default.stages[1].command")


def test_load_policy_names_every_key_with_prompt_in_argv(caplog: pytest.LogCaptureFixture) -> None:
    document = {
        "agent": {"command": ["agent", "{prompt}"]},
        "flows": {
            "default": {
                "stages": [
                    {
                        "name": "review",
                        "action": "agent",
                        "result_check": "panel",
                        "reviewers": [
                            {"target": "a", "command": ["a", "{prompt_file}"]},
                            {"target": "b", "command": ["b", "say: {prompt}"]},
                        ],
                    }
                ]
            }
        },
    }
    loaded = config.parse(document)
    assert prompts.argv_keys(loaded.agent, loaded.flows) == [
        "agent.command",
        "flows.default.stages[0].reviewers[1].command",
    ]
    assert "'agent.command' puts {prompt} in argv" in caplog.text
    document["agent"]["prompt_in_argv"] = "refuse"  # type: ignore[index]
    with pytest.raises(config.ConfigError, match=r"'agent\.command' puts \{prompt\} in argv"):
        config.parse(document)
    document["agent"]["prompt_in_argv"] = "sometimes"  # type: ignore[index]
    with pytest.raises(config.ConfigError, match=r"agent\.prompt_in_argv"):
        config.parse(document)


def test_no_preset_and_no_default_puts_the_prompt_in_argv() -> None:
    for preset in presets.PRESETS.values():
        assert not prompts.in_argv(preset.command), preset.name
    assert prompts.argv_keys(config.Config().agent, config.Config().flows) == []


def test_flow_error_is_what_the_policy_raises() -> None:
    loaded = config.parse({"agent": {"command": ["a", "{prompt}"], "prompt_in_argv": "accept"}})
    refusing = loaded.agent.__class__(command=loaded.agent.command, prompt_in_argv="refuse")
    with pytest.raises(FlowError):
        prompts.check_policy(refusing, loaded.flows)


@pytest.mark.parametrize(("value", "size"), [("4KiB", 4096), (2048, 2048), ("16MiB", 16 << 20)])
def test_max_ticket_bytes_takes_sizes(value: int | str, size: int) -> None:
    assert config.parse({"repo": {"max_ticket_bytes": value}}).repo.max_ticket_bytes == size


@pytest.mark.parametrize("value", ["1GiB", 512, "lots", True, 1.5])
def test_max_ticket_bytes_refuses_the_rest(value: object) -> None:
    with pytest.raises(config.ConfigError, match=r"repo\.max_ticket_bytes"):
        config.parse({"repo": {"max_ticket_bytes": value}})


def test_a_clipped_body_is_valid_utf8_within_the_bound() -> None:
    body = "é" * 40_000  # 80,000 bytes: the cut falls inside a character
    reply = shown(body, "see the file", limit=65_535)
    assert reply["body_clipped"] is True
    assert reply["body_bytes"] == 80_000
    kept, _, marker = reply["body"].rpartition("\n\n[sloopd: ")
    assert len(kept.encode()) <= 65_535
    assert body.startswith(kept)
    assert "80000 bytes" in marker
    assert "see the file" in marker
    assert shown("short", "x") == {"body": "short", "body_bytes": 5, "body_clipped": False}
