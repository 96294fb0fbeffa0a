"""``make demo AGENT=claude|codex|gemini``: the demo with a real agent CLI.

The CLI is the one the tests pin (installed into ~/.cache/sloop/agent-clis when
missing), unmodified, chosen by its preset, and it talks to a local stand-in of
its vendor's API on 127.0.0.1 (tests/support/standins): no account, no network.
The stand-in scripts the model: create hello.txt and commit it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.support.agent_clis import PINNED, cache_dir, cli  # noqa: E402
from tests.support.standins import anthropic, gemini, openai  # noqa: E402

AGENTS = ("claude", "codex", "gemini")


def install(agent: str) -> Path:
    cli(agent)
    return cache_dir() / PINNED[agent].replace("/", "+")


@contextlib.contextmanager
def stand_in(agent: str) -> Iterator[dict[str, str]]:
    """The stand-in, running; the daemon's environment that points the preset at it."""
    folder = install(agent)
    path = os.pathsep.join([str(folder / "node_modules" / ".bin"), os.environ.get("PATH", "")])
    server: Any
    if agent == "claude":
        with anthropic.AnthropicStandIn() as server:
            yield {"PATH": path, "ANTHROPIC_API_KEY": "sk-demo", "ANTHROPIC_BASE_URL": server.url}
    elif agent == "codex":
        with openai.OpenAIStandin() as server:
            yield {
                "PATH": path,
                "OPENAI_API_KEY": "sk-demo",
                "OPENAI_BASE_URL": server.base_url,
                "CODEX_MODEL": "gpt-5.5",
            }
    else:
        server = gemini.GeminiStandIn().start()
        try:
            yield {"PATH": path, "GEMINI_API_KEY": "demo", "GOOGLE_GEMINI_BASE_URL": server.url}
        finally:
            server.stop()


def agent_section(agent: str) -> str:
    mount = str(install(agent)).replace("\\\\", "\\\\\\\\").replace('"', '\\\\"')
    return f'preset = "{agent}"\nro_mounts = ["{mount}"]\n'


def cost_line(run: dict[str, Any]) -> str:
    usage = run.get("usage") or {}
    cost = usage.get("cost_usd")
    money = f", ${cost:.4f}" if isinstance(cost, int | float) else " (no cost reported)"
    return (
        f"{run.get('alias')}: {usage.get('input_tokens', 0)} input tokens "
        f"({usage.get('cached_tokens', 0)} cached), {usage.get('output_tokens', 0)} output"
        f"{money}"
    )
