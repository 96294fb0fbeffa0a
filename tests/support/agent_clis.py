"""The real agent CLIs, installed at pinned versions into a cache outside the repository.

``scripts/ensure-agent-clis`` installs them (``make test`` runs it); ``cli("claude")``
is the path of the installed executable, installing it first when it is missing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNED = {
    "claude": "@anthropic-ai/claude-code@2.1.332",
    "codex": "@openai/codex@0.171.0",
    "gemini": "@google/gemini-cli@0.61.0",
}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "sloop" / "agent-clis"
    return Path(os.environ.get("SLOOP_AGENT_CLIS", str(default)))


def cli(name: str) -> Path:
    spec = PINNED[name]
    folder = cache_dir() / spec.replace("/", "+")
    if not (folder / ".installed").exists():
        subprocess.run([str(REPO_ROOT / "scripts" / "ensure-agent-clis"), spec], check=True)
    return folder / "node_modules" / ".bin" / name
