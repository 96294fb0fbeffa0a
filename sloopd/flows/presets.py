"""Agent presets: the command lines that make the real agent CLIs work unattended in Sloop.

Each preset was found by running the CLI, unmodified, inside Sloop's sandbox against
a stand-in of its vendor's API (tests/integration/test_agent_<cli>.py):

* the prompt goes on standard input from ``$SLOOP_PROMPT_FILE``, never in argv: every
  local user reads a command line in ``/proc/<pid>/cmdline``, and a ticket over
  128 KiB would not fit one argument (sloopd.flows.prompts);
* the CLI's own permission system is switched off: Sloop's sandbox is the boundary,
  and a headless CLI that asks for permission refuses every tool and exits 0;
* its own retries are capped at one (none for Codex, which sleeps out any
  ``retry-after``), so a vendor limit reaches Sloop's classifier while it is fresh
  instead of hiding behind minutes of silent back-off;
* it prints a JSON event per line (``stream``), which Sloop reads for tokens and cost
  and ``sloopctl logs`` renders for people;
* telemetry, update checks and other traffic to the vendor's side hosts are off;
* what the checkout holds is content, never configuration for the CLI: after the first
  stage any checkout may carry an agent's commits (a reviewer's always does), so in
  every stage the CLI's project settings, hooks and MCP servers from the checkout (and
  from the run's HOME, which every stage of a run shares) stay off, as far as the CLI
  can turn them off (tests/integration/test_agent_project_settings.py).  Where it
  cannot, the preset's ``caveat`` says so when sloop.toml selects it.

Only variables named in ``env`` reach the CLI (credentials and base URLs, passed by
name from the daemon's environment); the fixed settings are exported by the command
itself, so they show in ``sloop.toml`` as written by ``sloopctl init``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

PROMPT_ON_STDIN: Final = '< "$SLOOP_PROMPT_FILE"'


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    command: tuple[str, ...]
    env: tuple[str, ...]  # passed through by name when the daemon has them
    stream: str | None  # the JSON event stream the command prints (sloopd.vendor.usage)
    summary: str
    # A subscription login's files in the daemon user's HOME (``~/...``), shown
    # read-only in the run's HOME when they exist: `claude login`, `codex login`,
    # Gemini's Google sign-in work unattended as they do in a terminal.
    logins: tuple[str, ...] = ()
    # What the CLI obeys in a checkout that the preset cannot turn off, and what the
    # preset does about it: logged when sloop.toml selects the preset (docs/security.md).
    caveat: str | None = None
    # The program the command runs from PATH (sloopd.core.cli_sight checks at start
    # that the sandbox shows it), and the vendor API it talks to: an agent stage with
    # network = false cannot reach it (warned at load, sloopd.flows.uses).
    cli: str | None = None
    api: str | None = None
    # The model the command runs: the variable it reads it from, and its default
    # (None: the CLI's own), for pricing tokens whose stream names no model.
    model_env: str | None = None
    default_model: str | None = None
    # Checkout files the command refuses to start its CLI beside (its own check, which
    # prints Sloop's "sloop: not starting …" and exits 2): the daemon warns at start
    # when main holds one, since then every stage of the preset fails (sloopd.core.cli_sight).
    refuses: tuple[str, ...] = ()


def _sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


CLAUDE = Preset(
    "claude",
    _sh(
        "export IS_SANDBOX=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 "
        "DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "
        "CLAUDE_CODE_MAX_RETRIES=1; "
        # No setting sources: neither the checkout's .claude/settings*.json (hooks, an
        # apiKeyHelper, env) nor HOME's; no MCP server but --mcp-config's (none).
        "exec claude -p --output-format stream-json --verbose "
        "--setting-sources '' --strict-mcp-config "
        f"--dangerously-skip-permissions {PROMPT_ON_STDIN}"
    ),
    (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",  # `claude setup-token`: a subscription, unattended
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ),
    "claude",
    "Claude Code in headless mode, tools allowed (IS_SANDBOX=1: Sloop's sandbox is the boundary)",
    ("~/.claude/.credentials.json",),
    cli="claude",
    api="the Anthropic API (ANTHROPIC_BASE_URL)",
    model_env="ANTHROPIC_MODEL",
)

CODEX = Preset(
    "codex",
    _sh(
        # The checkout is an untrusted project (no .codex/config.toml, hooks, rules);
        # without HOME's config.toml nothing can mark it trusted, and hooks are off.
        "exec codex exec --json --dangerously-bypass-approvals-and-sandbox "
        "--ignore-user-config --ignore-rules --disable hooks "
        "--disable unbounded_connection_retries --disable plugins --disable remote_plugin "
        "--disable apps --disable in_app_updates "
        "-c allow_login_shell=false -c analytics.enabled=false -c feedback.enabled=false "
        "-c check_for_update_on_startup=false "
        '-c model_providers.sloop.name=\\"sloop\\" '
        '-c "model_providers.sloop.base_url=\\"${OPENAI_BASE_URL:-https://api.openai.com/v1}\\"" '
        '-c model_providers.sloop.wire_api=\\"responses\\" '
        '-c model_providers.sloop.env_key=\\"OPENAI_API_KEY\\" '
        # No retries of its own: Codex sleeps out whatever retry-after the API sends
        # (stream retries on a 429, request retries on a 5xx), silent, holding the
        # run's slot; the stage fails at once instead, the gate closes on a 429 and
        # Sloop's transient retries take the 5xx (issue 24).
        "-c model_providers.sloop.request_max_retries=0 "
        "-c model_providers.sloop.stream_max_retries=0 "
        '-c model_provider=\\"sloop\\" '
        '${CODEX_MODEL:+-m "$CODEX_MODEL"} '
        f"- {PROMPT_ON_STDIN}"
    ),
    ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_MODEL"),
    "codex",
    "Codex exec, its own sandbox off (Sloop's is the boundary), commands in a plain shell",
    cli="codex",
    api="the OpenAI Responses API (OPENAI_BASE_URL)",
    model_env="CODEX_MODEL",  # -m "$CODEX_MODEL"; its stream never names the model
    # No login: the preset's own provider (which caps the retries) reads OPENAI_API_KEY;
    # a ChatGPT sign-in (~/.codex/auth.json) needs the built-in provider (docs/agents.md).
)

# A printf format: %s is the auth type (an API key, or the Google sign-in whose files
# the preset shows read-only when the daemon user has them and no key is set).
GEMINI_SETTINGS: Final = (
    '{"security": {"auth": {"selectedType": "%s"}, "folderTrust": {"enabled": false}}, '
    '"general": {"maxAttempts": 1, "enableAutoUpdate": false, '
    '"enableAutoUpdateNotification": false, "checkpointing": {"enabled": false}}, '
    '"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false}, '
    '"ide": {"enabled": false}}'
)

# Gemini CLI runs its tools (and git) only in a trusted folder, and in a trusted folder
# it obeys the workspace's .gemini/settings.json (hooks, MCP servers, tool discovery
# and call commands) and loads .gemini/.env and .env into its environment (BASH_ENV,
# LD_PRELOAD, ...).  So the preset does not start in a checkout holding one of them.
GEMINI_OBEYS: Final = (".gemini/settings.json", ".gemini/.env", ".env")
GEMINI_REFUSAL: Final = (
    "sloop: not starting Gemini CLI: the checkout holds %s, which Gemini CLI obeys in a "
    "trusted folder (hooks, MCP servers, tool discovery commands, environment variables) "
    "and cannot ignore while its tools are on; see docs/security.md"
)

GEMINI = Preset(
    "gemini",
    _sh(
        f"for f in {' '.join(GEMINI_OBEYS)}; do "
        'if [ -e "$f" ] || [ -L "$f" ]; then '
        f"printf '{GEMINI_REFUSAL}\\n' \"$f\" >&2; exit 2; fi; done; "
        # The run's HOME is shared by its stages: an earlier one may have left these.
        'rm -f "$HOME/.env" "$HOME/.gemini/.env"; '
        'set -e; mkdir -p "$HOME/.gemini"; auth=gemini-api-key; '
        'if [ -z "${GEMINI_API_KEY:-}" ] && [ -s "$HOME/.gemini/oauth_creds.json" ]; '
        "then auth=oauth-personal; fi; "
        f'printf \'{GEMINI_SETTINGS}\\n\' "$auth" > "$HOME/.gemini/settings.json"; '
        # Gemini runs git with GIT_CONFIG_GLOBAL=/dev/null: give its commits the run's identity.
        'export GIT_AUTHOR_NAME="$(git config user.name)" '
        'GIT_AUTHOR_EMAIL="$(git config user.email)"; '
        'export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"; '
        # --extensions none: none of HOME's ~/.gemini/extensions (hooks, MCP servers).
        'exec gemini --yolo --extensions none --model "${GEMINI_MODEL:-gemini-2.5-pro}" '
        f"--output-format stream-json {PROMPT_ON_STDIN}"
    ),
    ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL"),
    "gemini",
    "Gemini CLI with --yolo (tools allowed), one attempt per request, a pinned model",
    ("~/.gemini/oauth_creds.json", "~/.gemini/google_accounts.json"),
    caveat=(
        "Gemini CLI cannot ignore a checkout's .gemini/settings.json, .gemini/.env or "
        ".env while its tools are on (it obeys them in every folder it trusts, and it "
        "runs no tool or git in one it does not): the gemini preset refuses to start "
        "in a checkout that holds one, so an implementer that commits one fails every "
        "later gemini stage (docs/security.md)"
    ),
    cli="gemini",
    api="the Gemini API (GOOGLE_GEMINI_BASE_URL)",
    model_env="GEMINI_MODEL",
    default_model="gemini-2.5-pro",
    refuses=GEMINI_OBEYS,
)

EXAMPLE = Preset(
    "example",
    # The daemon's own interpreter: the one that has sloopd installed (a venv's too).
    (sys.executable or "python3", "-m", "sloopd.examples.agent"),
    (),
    None,
    "the bundled example agent (sloopd.examples.agent): edits and commits, no vendor",
)

PRESETS: Final[dict[str, Preset]] = {p.name: p for p in (CLAUDE, CODEX, GEMINI, EXAMPLE)}


def configured_model(command: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    """The model a preset's command runs, from the daemon's environment or its default.

    None for a command that is no preset's (Sloop cannot know what it runs) and for
    a preset left to its CLI's default model (Codex without ``CODEX_MODEL``).
    """
    for chosen in PRESETS.values():
        if chosen.command == command and chosen.model_env is not None:
            return environ.get(chosen.model_env) or chosen.default_model
    return None


def preset(name: str) -> Preset:
    """The preset called ``name``; KeyError names the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown agent preset {name!r} (known: {', '.join(PRESETS)})") from None


def preset_of(command: tuple[str, ...] | None) -> Preset | None:
    """The preset whose command line this is (a stage's, a seat's, ``[agent]``'s), if any."""
    return next((p for p in PRESETS.values() if p.command == command), None)
