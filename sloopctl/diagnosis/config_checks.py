"""The check of what the repository's sloop.toml exposes: ``{prompt}`` in argv.

A child's argv is readable by every local uid in ``/proc/<pid>/cmdline``, so a
command with ``{prompt}`` shows the ticket and the stage's instructions to every
user of the host while the child runs, and a ticket over 128 KiB cannot start at
all.  The file is read here, not asked of the daemon: doctor says so with the
daemon down too, and what the daemon loads next is this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from sloopctl.diagnosis.facts import Doctor
from sloopctl.diagnosis.report import Check

# sloop.toml's placeholders and key, as the daemon reads them (sloopd.flows.prompts).
PROMPT: Final = "{prompt}"
POLICY_KEY: Final = "prompt_in_argv"
FIX: Final = (
    "use {prompt_file} (the prompt file's path) or standard input from $SLOOP_PROMPT_FILE "
    'in those commands, or set [agent] prompt_in_argv = "accept" (docs/security.md)'
)


def check_prompt(d: Doctor) -> Check:
    name = "prompt"
    if d.elsewhere:
        return Check(name, "warn", d.elsewhere)
    if d.repo is None:
        return Check(name, "warn", "skipped: not inside a git repository")
    path = d.repo / "sloop.toml"
    document = _document(path)
    if document is None:
        return Check(name, "warn", f"skipped: {path} cannot be read as TOML (see the git check)")
    agent = _table(document.get("agent"))
    keys = argv_keys(document)
    policy = agent.get(POLICY_KEY, "warn")
    if not keys:
        return Check(
            name, "ok", "no command puts {prompt} in argv: prompts reach children as files"
        )
    named = ", ".join(keys)
    if policy == "accept":
        return Check(
            name,
            "ok",
            f"{named} put the prompt in argv, readable by every local user; the exposure is "
            'accepted (prompt_in_argv = "accept")',
        )
    if policy == "refuse":
        return Check(
            name,
            "fail",
            f'{named} put the prompt in argv and prompt_in_argv is "refuse": the daemon '
            "refuses this sloop.toml",
            FIX,
        )
    return Check(
        name,
        "warn",
        f"{named} put the prompt in argv: every local user can read it in "
        "/proc/<pid>/cmdline while the child runs, and a ticket over 128 KiB cannot start",
        FIX,
    )


def argv_keys(document: dict[str, Any]) -> list[str]:
    """The keys of every command in the file with ``{prompt}`` in an argument."""
    commands: list[tuple[str, Any]] = [
        ("agent.command", _table(document.get("agent")).get("command"))
    ]
    for flow, body in _table(document.get("flows")).items():
        stages = _table(body).get("stages")
        for index, stage in enumerate(stages if isinstance(stages, list) else []):
            stage = _table(stage)
            where = f"flows.{flow}.stages[{index}]"
            commands.append((f"{where}.command", stage.get("command")))
            reviewers = stage.get("reviewers")
            for seat, reviewer in enumerate(reviewers if isinstance(reviewers, list) else []):
                commands.append(
                    (f"{where}.reviewers[{seat}].command", _table(reviewer).get("command"))
                )
    return [
        key
        for key, command in commands
        if isinstance(command, list) and any(isinstance(p, str) and PROMPT in p for p in command)
    ]


def _document(path: Path) -> dict[str, Any] | None:
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
