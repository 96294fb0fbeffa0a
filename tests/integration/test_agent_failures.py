"""Failures that say why, with each real CLI's preset (issue 24, items 5-7).

* A stage with ``network = false`` cannot reach its vendor by its own configuration:
  one failure whose reason names the setting, never queued again as a transient
  network failure, and a warning when sloop.toml is loaded.
* A CLI on the daemon's PATH but in a folder the sandbox hides (here: the pinned
  install under the daemon user's ``~/.cache``, not in ``agent.ro_mounts``) fails
  with a reason that says so and names the fix; the daemon warns at start and
  ``sloopctl doctor`` fails its ``clis`` check.
* Codex without its key says so in a ``turn.failed`` event: ``auth_failed``, with
  its words in the reason.

The vendor's base URL is a loopback port where nothing listens: no request is meant
to reach anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import orjson
import pytest

from tests.integration.test_agent_presets import install, on_path, preset_toml
from tests.support.agents import BENCH_VAR, Bench, ticket_text, toml_value
from tests.support.standins.openai import refused_url

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

RUN_TIMEOUT_S = 120.0
CLIS = ["claude", "codex", "gemini"]


def vendor_env(name: str, url: str) -> dict[str, str]:
    """The key and base URL each preset passes by name, pointing at ``url``."""
    root = url.removesuffix("/v1")
    return {
        "claude": {"ANTHROPIC_API_KEY": "sk-ant-api03-sloop-stand-in", "ANTHROPIC_BASE_URL": root},
        "codex": {"OPENAI_API_KEY": "sk-standin-key", "OPENAI_BASE_URL": url, "CODEX_MODEL": "m"},
        "gemini": {"GEMINI_API_KEY": "standin-key", "GOOGLE_GEMINI_BASE_URL": root},
    }[name]


def agent_lines(bench: Bench, run_id: str) -> list[str]:
    return [text for _, _, _, text in bench.log_lines(run_id)][-10:]


OFFLINE_FLOW = """
[[flows.default.stages]]
name = "implement"
action = "agent"
network = false

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


@pytest.mark.parametrize("name", CLIS)
def test_a_stage_without_network_fails_once_naming_the_setting(bench: Bench, name: str) -> None:
    on_path(bench, [name])
    bench.env.update(vendor_env(name, refused_url()))
    bench.setup(preset_toml(bench, name, [name], OFFLINE_FLOW), {"off": ticket_text("Off")})
    bench.start()
    bench.post("off")
    run = bench.wait_run("off#1", timeout=RUN_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines)
    assert run["classification"] == "network", (run, lines)
    assert "network = false" in run["reason"], run
    assert "queued again" not in run["reason"], run
    assert "network = false" in (run["stages"][0]["reason"] or ""), run["stages"][0]
    ticket = bench.ticket("off")
    assert ticket["state"] == "failed", ticket  # not queued again as a transient failure
    assert ticket["trigger"] is None, ticket
    assert bench.dashboard()["queued_triggers"] == []
    warning = "'flows.default.stages[0]' sets network = false, but its agent"
    assert warning in bench.log(), bench.log()  # said at load, before any run


def unmounted_toml(bench: Bench, name: str) -> str:
    """The preset with everything but the CLI's install folder in ro_mounts."""
    return (
        "[agent]\n"
        f'preset = "{name}"\n'
        f"env = {toml_value([BENCH_VAR])}\n"
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}\n"
    )


def doctor_json(bench: Bench) -> dict[str, Any]:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sloopctl",
            "doctor",
            "--json",
            "--socket",
            str(bench.daemon.socket),
        ],
        cwd=bench.repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    report: dict[str, Any] = orjson.loads(done.stdout)
    assert report["ok"] is (done.returncode == 0), done
    return report


@pytest.mark.parametrize("name", CLIS)
def test_a_cli_the_sandbox_cannot_see_is_named_with_its_fix(bench: Bench, name: str) -> None:
    folder = install(name)
    hidden = os.path.realpath(os.path.expanduser("~"))
    assert str(folder).startswith(hidden + "/"), (folder, "the test needs the CLI under HOME")
    on_path(bench, [name])
    bench.env.update(vendor_env(name, refused_url()))
    bench.setup(unmounted_toml(bench, name), {"unseen": ticket_text("Unseen")})
    bench.start()
    expected_mount = str(folder / "node_modules")
    bench.post("unseen")
    run = bench.wait_run("unseen#1", timeout=RUN_TIMEOUT_S)
    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines)
    assert run["agent_exit_code"] == 127, run
    reason = run["stages"][0]["reason"] or ""
    assert reason.startswith("exited with code 127: "), reason
    assert f"{name} is not visible in the sandbox" in reason, reason
    assert f'add "{expected_mount}" to agent.ro_mounts' in reason, reason
    assert reason in run["reason"], run

    # Said before any run too: at the daemon's start, and by doctor.
    assert f"agent preset '{name}': {name} is not visible in the sandbox" in bench.log()
    report = doctor_json(bench)
    clis = next(c for c in report["checks"] if c["name"] == "clis")
    assert clis["status"] == "fail", clis
    assert expected_mount in clis["detail"], clis
    assert "agent.ro_mounts" in clis["fix"], clis
    assert report["ok"] is False


def test_the_same_cli_mounted_passes_the_check(bench: Bench) -> None:
    on_path(bench, ["codex"])
    bench.setup(preset_toml(bench, "codex", ["codex"]), {})
    bench.start()
    assert "is not visible in the sandbox" not in bench.log(), bench.log()
    assert bench.dashboard()["daemon"]["sandbox"]["clis"] == []
    clis = next(c for c in doctor_json(bench)["checks"] if c["name"] == "clis")
    assert clis["status"] == "ok", clis


def test_codex_without_its_key_is_an_auth_failure_in_its_own_words(bench: Bench) -> None:
    on_path(bench, ["codex"])
    env = vendor_env("codex", refused_url())
    del env["OPENAI_API_KEY"]
    bench.env.update(env)
    bench.setup(preset_toml(bench, "codex", ["codex"]), {"nokey": ticket_text("No key")})
    bench.start()
    bench.post("nokey")
    run = bench.wait_run("nokey#1", timeout=RUN_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    words = "Missing environment variable: `OPENAI_API_KEY`."
    assert any(words in line and '"turn.failed"' in line for line in lines), lines
    assert run["state"] == "failed", (run, lines)
    assert run["classification"] == "auth_failed", (run, lines)
    assert run["diagnosis"]["vendor"] == "codex", run
    assert words in run["reason"], run
    assert words in (run["stages"][0]["reason"] or ""), run["stages"][0]
