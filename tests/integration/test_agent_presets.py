"""The presets, as an operator would use them: ``[agent] preset = "<cli>"`` and nothing else.

Each real CLI, installed at its pinned version, is put on the daemon's PATH (as a
global npm install would be) and its install folder shown read-only; the vendor's
key and base URL are in the daemon's environment, pointing at the stand-in.  The
preset alone must walk a ticket to ``merged`` with the CLI's commit on main, and
the run's tokens must be what the stand-in reported (cost too, where the vendor's
stream carries it).  A two-seat panel of two different CLIs is selected per seat
with ``agent = "..."``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopd.vendor import pricing
from tests.support.agent_clis import PINNED, cache_dir, cli
from tests.support.agents import BENCH_VAR, Bench, ticket_text, toml_value
from tests.support.standins import anthropic, gemini, openai
from tests.support.standins.openai_code_mode import declares_code_mode

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

RUN_TIMEOUT_S = 120.0


def install(name: str) -> Path:
    cli(name)  # installs it when missing
    return cache_dir() / PINNED[name].replace("/", "+")


def preset_toml(bench: Bench, preset: str, clis: list[str], flows: str = "") -> str:
    mounts = [str(install(name)) for name in clis]
    return (
        "[agent]\n"
        f'preset = "{preset}"\n'
        f"env = {toml_value([BENCH_VAR])}\n"
        f"ro_mounts = {toml_value(mounts)}\n"
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}\n"
        f"{flows}"
    )


def on_path(bench: Bench, clis: list[str]) -> None:
    """The CLIs on the daemon's PATH, as `npm install -g` would put them."""
    bins = [str(install(name) / "node_modules" / ".bin") for name in clis]
    bench.env["PATH"] = os.pathsep.join([*bins, os.environ.get("PATH", os.defpath)])


@pytest.fixture
def claude_api() -> Iterator[anthropic.AnthropicStandIn]:
    with anthropic.AnthropicStandIn() as standin:
        yield standin


@pytest.fixture
def codex_api() -> Iterator[openai.OpenAIStandin]:
    with openai.OpenAIStandin() as standin:
        yield standin


@pytest.fixture
def gemini_api() -> Iterator[gemini.GeminiStandIn]:
    standin = gemini.GeminiStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()


def merged_run(bench: Bench, name: str) -> dict[str, Any]:
    bench.post(name)
    run = bench.wait_run(f"{name}#1", timeout=RUN_TIMEOUT_S)
    logs = [r["text"] for r in bench.ok("logs", {"run": run["id"]})["records"]][-15:]
    assert run["state"] == "merged", (run["reason"], logs)
    assert (bench.repo / "hello.txt").read_text() == "hello\n"
    return run


def test_the_claude_preset_merges_and_counts_tokens_and_cost(
    bench: Bench, claude_api: anthropic.AnthropicStandIn
) -> None:
    on_path(bench, ["claude"])
    bench.env.update(
        ANTHROPIC_API_KEY="sk-ant-api03-sloop-stand-in", ANTHROPIC_BASE_URL=claude_api.url
    )
    bench.setup(preset_toml(bench, "claude", ["claude"]), {"hello": ticket_text("Add hello")})
    bench.start()
    run = merged_run(bench, "hello")
    calls = len(claude_api.message_requests())
    per_call = anthropic.USAGE
    usage = run["usage"]
    assert usage["input_tokens"] == calls * (
        per_call["input_tokens"]
        + per_call["cache_read_input_tokens"]
        + per_call["cache_creation_input_tokens"]
    ), usage
    assert usage["output_tokens"] == calls * per_call["output_tokens"], usage
    assert usage["cached_tokens"] == calls * per_call["cache_read_input_tokens"], usage
    assert isinstance(usage["cost_usd"], float), usage
    assert usage["cost_usd"] > 0, usage


def test_the_codex_preset_merges_and_counts_tokens(
    bench: Bench, codex_api: openai.OpenAIStandin
) -> None:
    on_path(bench, ["codex"])
    bench.env.update(
        OPENAI_API_KEY="sk-standin-key", OPENAI_BASE_URL=codex_api.base_url, CODEX_MODEL="gpt-5.5"
    )
    bench.setup(preset_toml(bench, "codex", ["codex"]), {"hello": ticket_text("Add hello")})
    bench.start()
    run = merged_run(bench, "hello")
    turns = len(codex_api.requests)
    usage = run["usage"]
    assert usage["input_tokens"] == turns * openai.USAGE["input_tokens"], usage
    assert usage["output_tokens"] == turns * openai.USAGE["output_tokens"], usage
    assert usage["cached_tokens"] == turns * openai.USAGE["cached_tokens"], usage
    # Codex reports no cost, and gpt-5.5 has no built-in price ([pricing] can add one).
    assert usage["cost_usd"] is None, usage


def test_the_codex_preset_with_the_clis_default_model_runs_its_shell_in_code_mode(
    bench: Bench, codex_api: openai.OpenAIStandin
) -> None:
    """Issue 24 item 8: what a user gets with only the key and the base URL set.

    Codex then picks its own default model, which offers the shell only through code
    mode (a custom ``exec`` tool taking JavaScript that calls ``tools.exec_command``).
    The preset must merge through that protocol: the shell's result must come back
    as a ``custom_tool_call_output``, not the classic ``function_call_output``.
    """
    on_path(bench, ["codex"])
    bench.env.pop("CODEX_MODEL", None)
    bench.env.update(OPENAI_API_KEY="sk-standin-key", OPENAI_BASE_URL=codex_api.base_url)
    bench.setup(preset_toml(bench, "codex", ["codex"]), {"hello": ticket_text("Add hello")})
    bench.start()
    run = merged_run(bench, "hello")
    turns = codex_api.turns()
    models = {t.body.get("model") for t in turns if isinstance(t.body, dict)}
    assert len(models) == 1, models
    assert None not in models, models
    assert all(isinstance(t.body, dict) and declares_code_mode(t.body) for t in turns)
    last = turns[-1].body
    assert isinstance(last, dict)
    kinds = [item.get("type") for item in last.get("input", []) if isinstance(item, dict)]
    assert "custom_tool_call_output" in kinds, kinds
    assert "function_call_output" not in kinds, kinds
    assert codex_api.code_mode_turns >= 1
    assert any("add hello" in output for output in codex_api.tool_outputs()), (
        codex_api.tool_outputs()
    )
    assert run["usage"]["input_tokens"] == len(turns) * openai.USAGE["input_tokens"], run


def test_the_codex_preset_does_not_sleep_out_a_long_retry_after(bench: Bench) -> None:
    """Issue 24 item 3: a 429 saying ``retry-after: 300`` fails the stage at once.

    With ``stream_max_retries=1`` Codex printed "Reconnecting... 1/1" and slept the
    300 s out, holding its slot with the gate open.  The stage must fail promptly,
    ``rate_limited``, and the gate must close; the bound only tells "promptly" from
    "waited the 300 s".
    """
    with openai.OpenAIStandin(mode=openai.Mode.RATE_LIMITED, retry_after_s=300) as api:
        on_path(bench, ["codex"])
        bench.env.update(
            OPENAI_API_KEY="sk-standin-key", OPENAI_BASE_URL=api.base_url, CODEX_MODEL="gpt-5.5"
        )
        bench.setup(preset_toml(bench, "codex", ["codex"]), {"limited": ticket_text("Hello")})
        bench.start()
        bench.post("limited")
        run = bench.wait_run("limited#1", timeout=90)  # far under the 300 s
        requests = len(api.turns())
    logs = [r["text"] for r in bench.ok("logs", {"run": run["id"]})["records"]][-10:]
    assert run["state"] == "failed", (run, logs)
    assert run["classification"] == "rate_limited", (run["diagnosis"], logs)
    assert requests == 1, logs  # no retry of its own, so no sleep before one
    assert not any("Reconnecting" in text for text in logs), logs
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert run["id"] in gate["reason"], gate
    # Codex names no reset ("exceeded retry limit, last status: 429 Too Many
    # Requests"): the gate probes after agent.probe_cooldown (1m), not 30 minutes.
    assert run["diagnosis"]["reset_at_ms"] is None, run["diagnosis"]
    assert "no reset named: trying again after 1m" in gate["reason"], gate
    assert gate["until_ms"] <= run["finished_at_ms"] + 60_000, (gate, run["finished_at_ms"])
    ticket = bench.ticket("limited")
    assert ticket["state"] == "ready", ticket
    assert ticket["trigger"]["due_at_ms"] == gate["until_ms"], (ticket, gate)


def test_the_gemini_preset_merges_and_counts_tokens(
    bench: Bench, gemini_api: gemini.GeminiStandIn
) -> None:
    on_path(bench, ["gemini"])
    bench.env.update(GEMINI_API_KEY="standin-key", GOOGLE_GEMINI_BASE_URL=gemini_api.url)
    bench.setup(preset_toml(bench, "gemini", ["gemini"]), {"hello": ticket_text("Add hello")})
    bench.start()
    run = merged_run(bench, "hello")
    usage = run["usage"]
    assert usage["output_tokens"] > 0, usage
    assert usage["input_tokens"] > 0, usage
    assert usage["output_tokens"] % gemini.USAGE["candidatesTokenCount"] == 0, usage
    assert usage["cached_tokens"] % gemini.USAGE["cachedContentTokenCount"] == 0, usage
    # Gemini reports no cost: its tokens are priced at gemini-2.5-pro's built-in price.
    price = pricing.BUILT_IN["gemini-2.5-pro"]
    fresh = usage["input_tokens"] - usage["cached_tokens"]
    expected = (fresh * price.input + usage["cached_tokens"] * price.cached) + usage[
        "output_tokens"
    ] * price.output
    assert abs(usage["cost_usd"] - expected / 1e6) < 1e-9, usage


PANEL = """
[[flows.default.stages]]
name = "implement"
action = "agent"
agent = "example"

[[flows.default.stages]]
name = "review"
action = "agent"
result_check = "panel"
quorum = 2
reviewers = [ { target = "claude", agent = "claude" }, { target = "codex", agent = "codex" } ]

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


@pytest.mark.parametrize("codex_model", ["gpt-5.5", None], ids=["classic-tools", "default-model"])
def test_a_panel_of_two_different_clis_each_casting_its_verdict(
    bench: Bench, codex_model: str | None
) -> None:
    """Each seat casts its verdict through its CLI's own shell; Codex's default model
    (no ``CODEX_MODEL``) runs ``sloopctl verdict`` from code mode's JavaScript."""
    claude_api = anthropic.AnthropicStandIn(scripts=[anthropic.verdict_script("pass", "fine")])
    verdict = "sloopctl verdict pass --reason 'codex agrees' --confidence high"
    codex_api = openai.OpenAIStandin(script=[openai.Shell(verdict), openai.Say("Reported.")])
    with claude_api, codex_api:
        on_path(bench, ["claude", "codex"])
        bench.env.update(
            ANTHROPIC_API_KEY="sk-ant-api03-sloop-stand-in",
            ANTHROPIC_BASE_URL=claude_api.url,
            OPENAI_API_KEY="sk-standin-key",
            OPENAI_BASE_URL=codex_api.base_url,
        )
        if codex_model is not None:
            bench.env["CODEX_MODEL"] = codex_model
        config = preset_toml(bench, "example", ["claude", "codex"], PANEL)
        bench.setup(config, {"panel": ticket_text("Reviewed by two CLIs")})
        bench.start()
        bench.post("panel")
        run = bench.wait_run("panel#1", timeout=RUN_TIMEOUT_S)
    review = next(s for s in run["stages"] if s["stage"] == "review")
    assert run["state"] == "merged", (run["reason"], review)
    seats = {seat["target"]: seat for seat in review["reviewers"]}
    assert seats["claude"]["verdict"] == "pass"
    assert seats["claude"]["reason"] == "fine"
    assert seats["codex"]["verdict"] == "pass"
    assert seats["codex"]["reason"] == "codex agrees"
    assert (codex_api.code_mode_turns > 0) == (codex_model is None), codex_api.code_mode_turns
    assert seats["claude"]["usage"]["cost_usd"] > 0, seats["claude"]
    assert seats["codex"]["usage"]["output_tokens"] > 0, seats["codex"]
    assert run["usage"]["output_tokens"] >= (
        seats["claude"]["usage"]["output_tokens"] + seats["codex"]["usage"]["output_tokens"]
    )


def test_tools_the_cli_refused_are_named_in_the_stage_reason(
    bench: Bench, claude_api: anthropic.AnthropicStandIn
) -> None:
    # Without the bypass, headless Claude Code refuses its tools and still exits 0.
    on_path(bench, ["claude"])
    bench.env.update(
        ANTHROPIC_API_KEY="sk-ant-api03-sloop-stand-in",
        ANTHROPIC_BASE_URL=claude_api.url,
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    command = [
        "sh",
        "-c",
        'exec claude -p --output-format stream-json --verbose < "$SLOOP_PROMPT_FILE"',
    ]
    names = [BENCH_VAR, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DISABLE_TELEMETRY"]
    names.append("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
    config = (
        "[agent]\n"
        f"command = {toml_value(command)}\n"
        'stream = "claude"\n'
        f"env = {toml_value(names)}\n"
        f"ro_mounts = {toml_value([str(install('claude'))])}\n"
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}\n"
    )
    bench.setup(config, {"refused": ticket_text("Add hello")})
    bench.start()
    bench.post("refused")
    run = bench.wait_run("refused#1", timeout=RUN_TIMEOUT_S)
    implement = run["stages"][0]
    assert "refused tools: Bash" in (implement["reason"] or ""), implement
    assert run["state"] != "merged", run


def test_the_claude_preset_uses_a_subscription_login_read_only(
    bench: Bench, claude_api: anthropic.AnthropicStandIn
) -> None:
    """`claude login` as the daemon's user: no API key, the login file shown read-only."""
    home = bench.root / "home"
    login = home / ".claude" / ".credentials.json"
    login.parent.mkdir(parents=True)
    far = int(time.time() * 1000) + 10 * 86_400_000  # not due for a refresh (no such host)
    oauth = {
        "accessToken": "sk-ant-oat01-sloop-stand-in",
        "refreshToken": "sk-ant-ort01-sloop-stand-in",
        "expiresAt": far,
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }
    login.write_text(json.dumps({"claudeAiOauth": oauth}))
    login.chmod(0o600)
    on_path(bench, ["claude"])
    bench.env.update(HOME=str(home), ANTHROPIC_BASE_URL=claude_api.url)
    bench.setup(preset_toml(bench, "claude", ["claude"]), {"hello": ticket_text("Add hello")})
    bench.start()
    merged_run(bench, "hello")
    calls = claude_api.message_requests()
    assert calls, claude_api.requests
    bearer = {call.headers.get("Authorization") for call in calls}
    assert bearer == {"Bearer sk-ant-oat01-sloop-stand-in"}, bearer
    assert json.loads(login.read_text()) == {"claudeAiOauth": oauth}  # never written
