"""The real Codex CLI as a Sloop agent, in Sloop's sandbox, against a stand-in Responses API.

Issue 14.  Each test starts ``tests.support.standins.openai.OpenAIStandin`` on
127.0.0.1, points the pinned ``codex exec`` at it (``codex_argv``: the stand-in's
URL as a custom model provider, the key passed by name through ``agent.env``) and
walks a ticket through a real daemon with the bubblewrap sandbox on.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clis import PINNED, cache_dir, cli
from tests.support.agents import BENCH_VAR, Bench, stage_table, ticket_text, toml_value
from tests.support.daemon import git
from tests.support.standins.openai import (
    HELLO_DONE,
    KEY_VAR,
    USAGE,
    Mode,
    OpenAIStandin,
    Say,
    Shell,
    codex_argv,
    refused_url,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

KEY = "sk-standin-key"
CODEX_TIMEOUT_S = 90.0
MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only"}


@pytest.fixture(scope="module")
def codex() -> Path:
    return cli("codex")


@pytest.fixture
def standin() -> Iterator[OpenAIStandin]:
    with OpenAIStandin() as server:
        yield server


def codex_install() -> Path:
    """The pinned package's folder: codex.js, its native binary and helpers."""
    return cache_dir() / PINNED["codex"].replace("/", "+")


def config(
    bench: Bench,
    command: Sequence[str],
    flow: Sequence[dict[str, Any]] | None = None,
    agent_extra: str = "",
) -> str:
    """sloop.toml: Codex as ``[agent] command``, its install read-only, its key by name."""
    lines = [
        "[agent]",
        f"command = {toml_value(list(command))}",
        f"env = {toml_value([BENCH_VAR, KEY_VAR])}",
        f"ro_mounts = {toml_value([str(codex_install())])}",
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}",
        agent_extra,
        "",
    ]
    for stage in flow or ():
        lines.append("[[flows.default.stages]]")
        lines += [f"{key} = {toml_value(value)}" for key, value in stage.items()]
        lines.append("")
    return "\n".join(lines) + "\n"


def start(bench: Bench, text: str, tickets: dict[str, str]) -> None:
    bench.env[KEY_VAR] = KEY
    bench.setup(text, tickets)
    bench.start()


def log_texts(bench: Bench, run_id: str) -> list[str]:
    return [text for _, _, _, text in bench.log_lines(run_id)]


def assert_hello_merged(bench: Bench, run: dict[str, Any]) -> None:
    assert run["state"] == "merged", run
    assert git(bench.repo, "show", "main:hello.txt") == "hello"
    assert git(bench.repo, "log", "-1", "--format=%s", "main") == "add hello"


def test_codex_walks_a_ticket_to_merged(bench: Bench, codex: Path, standin: OpenAIStandin) -> None:
    start(bench, config(bench, codex_argv(str(codex), standin.base_url)), {"hi": ticket_text("Hi")})
    bench.post("hi")
    run = bench.wait_run("hi#1", timeout=CODEX_TIMEOUT_S)

    assert_hello_merged(bench, run)
    assert stage_table(run) == [
        ("implement", 1, "passed"),
        ("sync", 1, "passed"),
        ("merge", 1, "passed"),
    ]
    # Two model turns: the shell call, then the final message after its output.
    turns = standin.turns()
    assert len(turns) == 2, standin.paths()
    assert all(t.headers.get("authorization") == f"Bearer {KEY}" for t in turns)
    assert {p.split()[1] for p in standin.paths()} <= {"/v1/responses", "/v1/models"}
    # The prompt reached Codex on stdin: the ticket's title is in the user message.
    assert "Hi" in str(turns[0].body["input"])
    assert "add hello" in standin.tool_outputs()[0], standin.tool_outputs()
    texts = log_texts(bench, run["id"])
    assert any(HELLO_DONE in t and "agent_message" in t for t in texts), texts
    # Codex's own turn.completed adds both requests' usage.
    completed = [t for t in texts if '"turn.completed"' in t]
    assert len(completed) == 1, texts
    assert f'"input_tokens":{2 * USAGE["input_tokens"]}' in completed[0], completed


def test_codex_casts_a_reported_verdict_through_its_shell(bench: Bench, codex: Path) -> None:
    reason = "hello.txt is there and committed"
    verdict = f"sloopctl verdict pass --reason '{reason}' --confidence high"
    with (
        OpenAIStandin() as implementer,
        OpenAIStandin(script=(Shell(verdict), Say("Verdict cast."))) as reviewer,
    ):
        flow: list[dict[str, Any]] = [
            {
                "name": "implement",
                "action": "agent",
                "command": codex_argv(str(codex), implementer.base_url),
            },
            {
                "name": "review",
                "action": "agent",
                "result_check": "reported",
                "command": codex_argv(str(codex), reviewer.base_url),
            },
            {"name": "sync", "action": "sync"},
            MERGE,
        ]
        start(bench, config(bench, ["false"], flow), {"rv": ticket_text("Review me")})
        bench.post("rv")
        run = bench.wait_run("rv#1", timeout=CODEX_TIMEOUT_S)
        outputs = reviewer.tool_outputs()

    assert_hello_merged(bench, run)
    review = next(r for r in run["stages"] if r["stage"] == "review")
    assert review["state"] == "passed", (review, outputs)
    assert review["verdict_source"] == "reported", review
    assert review["reason"] == reason, review
    assert "command not found" not in str(outputs), outputs


def test_a_200kb_ticket_body_reaches_codex(
    bench: Bench, codex: Path, standin: OpenAIStandin
) -> None:
    body = "\n".join(f"line {i:06d} " + "x" * 60 for i in range(3000))  # ~200 KB
    assert len(body.encode()) > 200_000
    start(
        bench,
        config(bench, codex_argv(str(codex), standin.base_url)),
        {"big": ticket_text("Big", body)},
    )
    bench.post("big")
    run = bench.wait_run("big#1", timeout=CODEX_TIMEOUT_S)

    assert_hello_merged(bench, run)
    first = str(standin.turns()[0].body["input"])
    assert "line 002999 " in first
    assert "line 000000 " in first


def test_a_429_is_rate_limited_and_closes_the_gate(bench: Bench, codex: Path) -> None:
    with OpenAIStandin(mode=Mode.RATE_LIMITED, retry_after_s=600) as standin:
        start(
            bench,
            config(bench, codex_argv(str(codex), standin.base_url)),
            {"rl": ticket_text("RL")},
        )
        bench.post("rl")
        run = bench.wait_run("rl#1", timeout=CODEX_TIMEOUT_S)
        requests = len(standin.turns())

    assert run["state"] == "failed", run
    assert run["classification"] == "rate_limited", (run, log_texts(bench, run["id"]))
    assert run["agent_exit_code"] == 1, run
    assert requests == 1  # request_max_retries = 0: Codex did not retry on its own
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert "rate limit" in gate["reason"], gate
    assert run["id"] in gate["reason"], gate


@pytest.mark.parametrize(
    ("mode", "classification"),
    [
        # Codex prints the 503's message alone, without its status: "Selected model is
        # at capacity. Please try a different model."
        (Mode.OVERLOADED, "overloaded"),
        (Mode.UNAUTHORIZED, "auth_failed"),
        (Mode.CONTEXT, "context_length"),
        (Mode.USAGE_LIMIT, "usage_limit"),
        (Mode.DISCONNECT, "network"),
    ],
)
def test_vendor_errors_are_classified(
    bench: Bench, codex: Path, mode: Mode, classification: str
) -> None:
    with OpenAIStandin(mode=mode) as standin:
        start(
            bench, config(bench, codex_argv(str(codex), standin.base_url)), {"e": ticket_text("E")}
        )
        bench.post("e")
        run = bench.wait_run("e#1", timeout=CODEX_TIMEOUT_S)

    assert run["state"] == "failed", run
    assert run["classification"] == classification, (run, log_texts(bench, run["id"]))


def test_an_unreachable_api_fails_at_once_as_network(bench: Bench, codex: Path) -> None:
    # With unbounded_connection_retries left on, Codex would print
    # "Reconnecting... waiting for network" at growing intervals and never exit.
    url = refused_url()
    start(bench, config(bench, codex_argv(str(codex), url)), {"off": ticket_text("Off")})
    bench.post("off")
    run = bench.wait_run("off#1", timeout=CODEX_TIMEOUT_S)

    assert run["state"] == "failed", run
    assert run["classification"] == "network", (run, log_texts(bench, run["id"]))
    texts = log_texts(bench, run["id"])
    assert any("Connection failed: error sending request" in t for t in texts), texts
    assert not any("Reconnecting" in t for t in texts), texts


def reconnecting_argv(codex: Path) -> list[str]:
    """Codex against nothing, with its default unbounded connection retries left on."""
    argv = codex_argv(str(codex), refused_url())
    at = argv.index("unbounded_connection_retries")
    del argv[at - 1 : at + 1]
    return argv


def test_left_retrying_an_unreachable_api_codex_is_stopped_once_silent(
    bench: Bench, codex: Path
) -> None:
    # Codex's default (unbounded_connection_retries on) never gives up: it prints
    # "Reconnecting... waiting for network (…)" after about 3 s, 11 s, 24 s, 47 s, …
    # The gaps grow, so a stall_kill_after shorter than one stops it as silent.
    argv = reconnecting_argv(codex)
    stall = 'stall_after = "2s"\nstall_kill_after = "6s"'
    start(bench, config(bench, argv, agent_extra=stall), {"lost": ticket_text("Lost")})
    bench.post("lost")
    run = bench.wait_run("lost#1", timeout=CODEX_TIMEOUT_S)

    assert run["state"] == "failed", run
    assert run["classification"] == "stalled", run
    texts = log_texts(bench, run["id"])
    assert any("Reconnecting... waiting for network" in t for t in texts), texts
    assert not any('"turn.failed"' in t for t in texts), texts  # it never gave up itself


def test_left_reconnecting_for_ever_codex_is_stopped_by_the_stage_timeout(
    bench: Bench, codex: Path
) -> None:
    # Its "Reconnecting..." lines keep the stall clock from ever firing (stall_kill_after
    # is an hour here); the stage's wall-clock timeout stops it all the same.
    argv = reconnecting_argv(codex)
    limits = 'stall_after = "1h"\nstall_kill_after = "1h"\nagent_timeout = "15s"'
    start(bench, config(bench, argv, agent_extra=limits), {"forever": ticket_text("Forever")})
    bench.post("forever")
    run = bench.wait_run("forever#1", timeout=CODEX_TIMEOUT_S)

    assert run["state"] == "failed", run
    assert run["classification"] == "timed_out", run
    assert "timeout 15s" in (run["stages"][0]["reason"] or ""), run["stages"][0]
    texts = log_texts(bench, run["id"])
    assert any("Reconnecting... waiting for network" in t for t in texts), texts
