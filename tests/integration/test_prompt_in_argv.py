"""``{prompt}`` in argv shows the ticket to every local user (issue 23, item 4).

A process's command line is readable by every uid in ``/proc/<pid>/cmdline``.  With
``{prompt}`` in a command the ticket is there for as long as its child runs; with
``{prompt_file}`` (or standard input, as every preset does) it is in no command line.
Loading such a command is logged with its key (``agent.prompt_in_argv = "warn"``, the
default), silent once the operator accepted the exposure (``"accept"``), and a load
error with ``"refuse"``; ``sloopctl doctor`` says the same from the file.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import make_repo, new_daemon, wait_until

UNSET = ("SLOOP_OPERATOR_SOCKET", "SLOOP_SOCKET", "SLOOP_TOKEN", "SLOOP_METRICS_URL")
EXPOSURE = "/proc/<pid>/cmdline"


def command_lines_with(secret: bytes) -> list[int]:
    """Every process on the host whose command line holds ``secret``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if secret in f.read():
                    found.append(int(name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def exposed_while_running(bench: Bench, placeholder: str) -> list[int]:
    """Run a ticket with a secret in its body; the processes showing it while the agent runs."""
    secret = secrets.token_hex(16)
    agent = bench.argv(
        "--wait-for", bench.flag("go"), "--write", "done.txt=x", "--say", "running", placeholder
    )
    bench.setup(sloop_toml(agent), {"secret": ticket_text("Secret", f"The code is {secret}.")})
    bench.start()
    bench.post("secret")
    bench.wait_stage_running("secret#1", "implement")
    wait_until(lambda: any(r[3] == "running" for r in bench.log_lines("R1")), timeout=30)
    showing = command_lines_with(secret.encode())
    bench.release("go")
    assert bench.wait_run("secret#1")["state"] == "merged"
    return showing


def test_prompt_file_keeps_the_ticket_out_of_every_command_line(bench: Bench) -> None:
    assert exposed_while_running(bench, "{prompt_file}") == []


def test_prompt_in_argv_shows_the_ticket_in_a_command_line_and_says_so(bench: Bench) -> None:
    """The exposure the docs and the warning describe is real."""
    assert exposed_while_running(bench, "{prompt}") != []
    log = bench.log()
    assert "'agent.command' puts {prompt} in argv" in log, log
    assert EXPOSURE in log, log
    assert "{prompt_file}" in log, log


def test_accept_silences_the_warning(bench: Bench) -> None:
    config = sloop_toml(bench.argv("{prompt}"), extra="")
    config = config.replace("[agent]\n", '[agent]\nprompt_in_argv = "accept"\n', 1)
    bench.setup(config)
    bench.start()
    assert "puts {prompt} in argv" not in bench.log()


def test_refuse_makes_prompt_in_argv_a_load_error(sandbox: Path) -> None:
    config = '[agent]\nprompt_in_argv = "refuse"\ncommand = ["my-agent", "-p", "{prompt}"]\n'
    repo = make_repo(sandbox, {"sloop.toml": config})
    daemon = new_daemon(sandbox, repo)
    code, stdout, log = daemon.run_to_exit()
    assert code != 0
    assert stdout == ""
    assert "'agent.command' puts {prompt} in argv" in log, log
    assert 'prompt_in_argv is "refuse"' in log, log
    assert "{prompt_file}" in log, log


def refusing(config: str) -> str:
    return config.replace("[agent]\n", '[agent]\nprompt_in_argv = "refuse"\n', 1)


def test_a_reload_that_puts_prompt_in_argv_is_refused_with_refuse(bench: Bench) -> None:
    agent = bench.argv("--write", "one.txt=x", "{prompt_file}")
    bench.setup(refusing(sloop_toml(agent)), {"one": ticket_text("One")}, commit_config=False)
    bench.start()
    assert bench.daemon is not None
    in_stage = [{"name": "implement", "action": "agent", "command": bench.argv("{prompt}")}]
    for config, key in (
        (refusing(sloop_toml(bench.argv("{prompt}"))), "agent.command"),
        (refusing(sloop_toml(agent, flows={"default": in_stage})), "flows.default.stages[0]"),
    ):
        bench.write_config(config)
        bench.daemon.signal(signal.SIGHUP)
        refusal = f"'{key}"
        wait_until(
            lambda refusal=refusal: refusal in bench.log() and "reload refused" in bench.log()
        )
        assert "puts {prompt} in argv" in bench.log()
    bench.post("one")
    assert bench.wait_run("one#1")["state"] == "merged"  # the last good flow


# --- sloopctl doctor --------------------------------------------------------------------


def doctor_prompt(repo: Path) -> dict[str, Any]:
    """doctor's ``prompt`` check in ``repo`` (no daemon needed: it reads sloop.toml)."""
    environ = {k: v for k, v in os.environ.items() if k not in UNSET}
    done = subprocess.run(
        [sys.executable, "-m", "sloopctl", "doctor", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**environ, "NO_COLOR": "1", "SLOOP_SOCKET_DIR": str(repo.parent / "nowhere")},
    )
    checks = orjson.loads(done.stdout)["checks"]
    (found,) = [check for check in checks if check["name"] == "prompt"]
    assert isinstance(found, dict)
    return found


def test_doctor_warns_on_prompt_in_argv_and_names_the_fix(sandbox: Path) -> None:
    repo = make_repo(sandbox)
    assert doctor_prompt(repo)["status"] == "ok"  # no sloop.toml: the preset reads stdin

    stage = '[[flows.default.stages]]\nname = "implement"\naction = "agent"\n'
    panel = (
        '[[flows.default.stages]]\nname = "review"\naction = "agent"\nresult_check = "panel"\n'
        'reviewers = [{ target = "a", command = ["a", "{prompt_file}"] },\n'
        '             { target = "b", command = ["b", "--", "say {prompt}"] }]\n'
    )
    toml = '[agent]\ncommand = ["my-agent", "-p", "{prompt}"]\n\n' + stage + panel
    (repo / "sloop.toml").write_text(toml)
    check = doctor_prompt(repo)
    assert check["status"] == "warn", check
    assert "agent.command" in check["detail"], check
    assert "flows.default.stages[1].reviewers[1].command" in check["detail"], check
    assert "reviewers[0]" not in check["detail"], check
    assert EXPOSURE in check["detail"], check
    assert "{prompt_file}" in check["fix"], check

    (repo / "sloop.toml").write_text(
        toml.replace("[agent]\n", '[agent]\nprompt_in_argv = "accept"\n')
    )
    assert doctor_prompt(repo)["status"] == "ok"
    (repo / "sloop.toml").write_text(
        toml.replace("[agent]\n", '[agent]\nprompt_in_argv = "refuse"\n')
    )
    assert doctor_prompt(repo)["status"] == "fail"
    (repo / "sloop.toml").write_text('[agent]\ncommand = ["my-agent", "{prompt_file}"]\n')
    assert doctor_prompt(repo)["status"] == "ok"
