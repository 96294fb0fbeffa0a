"""The real Gemini CLI as a Sloop agent, in Sloop's sandbox, against a loopback Gemini API.

The CLI (``@google/gemini-cli``, pinned in tests/support/agent_clis.py) runs unattended
through the default flow (``implement`` → ``sync`` → ``merge``) with the sandbox on; the
API it talks to is ``tests.support.standins.gemini``, which answers turn 1 with a
``run_shell_command`` call that writes and commits ``hello.txt`` and turn 2 with text.

What it takes (``gemini_command``), each found by running this version:

* ``--yolo``: without it a headless run offers no shell or write tools (exit 0, nothing
  done).  Folder trust is off in the settings (an untrusted folder turns yolo back to
  ``default``), so no ``--skip-trust`` is needed.
* ``--model``: a pinned model.  With ``auto`` the CLI asks a router model first and its
  availability policy retries 3 times (10 on its flash fallback) whatever
  ``general.maxAttempts`` says; a single model honours ``maxAttempts``.
* The prompt on standard input (``< "$SLOOP_PROMPT_FILE"``), not in argv: a prompt over
  128 KiB does not fit one argument.  In non-interactive mode the CLI reads piped input as
  the prompt (up to 8 MiB).
* ``~/.gemini/settings.json`` written by the wrapper into the run's own writable HOME:
  ``security.auth.selectedType = "gemini-api-key"`` (``GOOGLE_GEMINI_BASE_URL`` alone makes
  the CLI pick the "gateway" auth type, which non-interactive mode refuses: "Invalid auth
  method selected."), retries capped, telemetry, usage statistics, auto-update and IDE
  integration off.  ``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` is no way round: the CLI skips a
  system settings file whose parent directories are writable by others (``/tmp``).
* Environment by name (``[agent] env``): ``GEMINI_API_KEY``, ``GOOGLE_GEMINI_BASE_URL``,
  and the git identity ``GIT_AUTHOR_*``/``GIT_COMMITTER_*``.
* The CLI's installation folder named on the command line (``$0`` of the wrapper): a
  folder under the daemon user's hidden home becomes visible read-only that way.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clis import cli
from tests.support.agents import BENCH_VAR, Bench, ticket_text, toml_value
from tests.support.standins.gemini import FINAL_TEXT, GeminiStandIn

MODEL = "gemini-2.5-pro"
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {
        "maxAttempts": 1,
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "checkpointing": {"enabled": False},
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "ide": {"enabled": False},
}
PASSED = [
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
]
IDENTITY = {
    "GIT_AUTHOR_NAME": "Gemini Agent",
    "GIT_AUTHOR_EMAIL": "gemini@example.invalid",
    "GIT_COMMITTER_NAME": "Gemini Agent",
    "GIT_COMMITTER_EMAIL": "gemini@example.invalid",
}


def install_folder() -> Path:
    """The pinned CLI's installation folder (holding ``node_modules/.bin/gemini``)."""
    return cli("gemini").parents[2]


def gemini_command(folder: Path) -> list[str]:
    """The agent command: write the settings into the run's HOME, then exec the CLI."""
    script = (
        'set -e; mkdir -p "$HOME/.gemini"; '
        f'printf "%s\\n" {shlex.quote(json.dumps(SETTINGS))} > "$HOME/.gemini/settings.json"; '
        f'exec "$0/node_modules/.bin/gemini" --yolo --model {MODEL} --output-format stream-json'
        ' < "$SLOOP_PROMPT_FILE"'
    )
    return ["sh", "-c", script, str(folder)]


def gemini_toml(bench: Bench, *, cooldown: str | None = None) -> str:
    lines = [
        "[agent]",
        f"command = {toml_value(gemini_command(install_folder()))}",
        f"env = {toml_value([*PASSED, BENCH_VAR])}",
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}",
    ]
    if cooldown:
        lines.append(f"cooldown = {toml_value(cooldown)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def api() -> Iterator[GeminiStandIn]:
    with GeminiStandIn() as standin:
        yield standin


def start(bench: Bench, api: GeminiStandIn, tickets: dict[str, str], **toml: Any) -> None:
    bench.env.update(IDENTITY)
    bench.env["GEMINI_API_KEY"] = "sloop-test-key"
    bench.env["GOOGLE_GEMINI_BASE_URL"] = api.url
    bench.setup(gemini_toml(bench, **toml), tickets)
    bench.start()


def texts(bench: Bench, run_id: str) -> list[str]:
    return [r["text"] for r in bench.ok("logs", {"run": run_id})["records"]]


def explain(bench: Bench, run: dict[str, Any]) -> str:
    """A failed assertion's message: the run's reason and its log, one record a line."""
    return "\n".join([f"{run['state']}: {run.get('reason')}", *texts(bench, run["id"])[-40:]])


def test_gemini_walks_a_ticket_to_merged(bench: Bench, api: GeminiStandIn) -> None:
    start(bench, api, {"hello": ticket_text("Hello", "Create hello.txt and commit it.")})
    assert bench.dashboard()["daemon"]["sandbox"]["mode"] == "bwrap"
    bench.post("hello")
    run = bench.wait_run("hello#1", timeout=120)

    assert run["state"] == "merged", explain(bench, run) + "\n" + "\n".join(api.paths())
    assert (bench.repo / "hello.txt").read_text() == "hello\n"
    assert bench.rev("main") == run["stages"][0]["commit"]
    log = texts(bench, run["id"])
    assert any(FINAL_TEXT.split()[0] in t for t in log), log
    # The CLI reached the stand-in from inside the sandbox, two turns of the script.
    streams = [r for r in api.model_calls() if "streamGenerateContent" in r.path]
    assert len(streams) == 2, api.paths()
    assert all(f"models/{MODEL}:" in r.path for r in streams), api.paths()
    # The prompt arrived on stdin: the ticket's body is in the first turn's contents.
    assert "Create hello.txt and commit it." in json.dumps(streams[0].body)


def test_a_200_kb_ticket_body_reaches_the_cli(bench: Bench, api: GeminiStandIn) -> None:
    body = "Create hello.txt and commit it.\n\n" + ("lorem ipsum dolor sit amet " * 7600)
    assert len(body) > 200_000
    start(bench, api, {"big": ticket_text("Big", body)})
    bench.post("big")
    run = bench.wait_run("big#1", timeout=120)

    assert run["state"] == "merged", explain(bench, run)
    first = next(r for r in api.model_calls() if "streamGenerateContent" in r.path)
    assert body.strip()[-200:].strip() in json.dumps(first.body)


def limited_run(bench: Bench, api: GeminiStandIn, mode: str) -> dict[str, Any]:
    """A run whose every model call fails with ``mode``; the gate's cooldown is 60 s."""
    api.mode = mode
    start(bench, api, {"one": ticket_text("One", "Create hello.txt.")}, cooldown="60s")
    bench.post("one")
    run = bench.wait_run("one#1", timeout=120)
    assert run["state"] == "failed", explain(bench, run)
    # One model call: maxAttempts = 1 hands the limit to Sloop at once.
    assert len(api.model_calls()) == 1, api.paths()
    print(f"{mode} diagnosis:", json.dumps(run["diagnosis"]))
    print(f"{mode} agent_exit_code:", run["agent_exit_code"], "reason:", run["reason"][:120])
    return run


def test_per_minute_quota_closes_the_gate(bench: Bench, api: GeminiStandIn) -> None:
    run = limited_run(bench, api, "rate_minute")

    assert run["classification"] in ("rate_limited", "usage_limit"), explain(bench, run)
    # Gemini exits with the HTTP status modulo 256; bwrap's 128+N is not read as signal 45.
    assert run["agent_exit_code"] == 429 % 256, run
    assert run["diagnosis"]["vendor"] == "gemini", run["diagnosis"]
    evidence = run["diagnosis"]["evidence"]
    assert "Quota exceeded for metric" in evidence
    assert "Please retry in 20s." in evidence
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert run["id"] in gate["reason"], gate
    # "Please retry in 20s." is read: the gate closes for 20 s, not the 60 s cooldown.
    reset = run["diagnosis"]["reset_at_ms"]
    assert gate["until_ms"] == reset, (gate, run["diagnosis"])
    finished = run["stages"][0]["finished_at_ms"]
    assert 15_000 <= reset - finished <= 21_000, (reset, finished)
    print("gate:", json.dumps(gate))


def test_per_minute_quota_is_classified_rate_limited(bench: Bench, api: GeminiStandIn) -> None:
    run = limited_run(bench, api, "rate_minute")
    assert run["classification"] == "rate_limited", explain(bench, run)


def test_daily_quota_closes_the_gate_and_is_recorded(bench: Bench, api: GeminiStandIn) -> None:
    run = limited_run(bench, api, "quota_daily")

    # What Sloop makes of Gemini's daily quota (see tests/unit/vendor_strings/gemini.json).
    assert run["classification"] == "usage_limit", explain(bench, run)
    assert "exhausted your daily quota" in run["diagnosis"]["evidence"], run["diagnosis"]
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    print("gate:", json.dumps(gate))
