"""``[[notify]]`` tables of ``sloop.toml``: webhook targets, validated strictly.

Each table names a receiver (``url``), what it is told about (``on``), how its
bodies look (``format``, ``link``), how it is signed (``secret_env``: the name of
a variable of the daemon's environment, never the secret itself, so the secret
is not committed with the repository) and how hard delivery tries
(``attempts``, ``backoff``, ``timeout``).  Errors name the key:
``'notify[1].on[0]': 'merge' is not one of merged, failed, …``.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, urlsplit

from sloopd.util import validate
from sloopd.util.validate import ConfigError
from sloopd.wire.api import parse_duration_ms as parse_ms

# What a table may be told about: the four ways a run settles (docs/protocol.md
# section 6, "Run states"), every change of the gate (a `gate_changed` event) and
# (0.9.0) a needs_review run resolved (a `run_resolved` event).
RUN_OUTCOMES: Final = ("merged", "failed", "needs_review", "aborted")
NOTIFY_ON: Final = (*RUN_OUTCOMES, "gate_changed", "resolved")
FORMATS: Final = ("json", "slack")
# The fields a `link` pattern may name; all of a run's (a gate change has none).
LINK_FIELDS: Final = ("run", "alias", "ticket", "ticket_name", "attempt")

ATTEMPTS_DEFAULT: Final = 4
ATTEMPTS_MAX: Final = 10
BACKOFF_DEFAULT_MS: Final = 2_000
TIMEOUT_DEFAULT_MS: Final = 10_000
# Every wait between attempts doubles from `backoff`, up to this.
BACKOFF_CAP_MS: Final = 60_000
_DURATION_MIN_MS: Final = 100
_DURATION_MAX_MS: Final = 60_000
_KEYS: Final = frozenset(
    {"url", "on", "secret_env", "format", "link", "attempts", "backoff", "timeout"}
)


class NotifyConfigError(ConfigError, ValueError):
    """A ``[[notify]]`` table that does not validate; the message names the key."""


@dataclass(frozen=True, slots=True)
class Target:
    """One webhook receiver.  Frozen and hashable: a reload that changes nothing
    keeps the same target (and its queue); any change makes a new one."""

    index: int
    url: str
    on: frozenset[str]
    format: str = "json"
    link: str | None = None
    secret_env: str | None = None
    # The variable's value when the configuration was loaded; kept out of repr so
    # that no log line or traceback prints it.
    secret: str | None = field(default=None, repr=False)
    attempts: int = ATTEMPTS_DEFAULT
    backoff_ms: int = BACKOFF_DEFAULT_MS
    timeout_ms: int = TIMEOUT_DEFAULT_MS

    @property
    def host(self) -> str:
        """The receiver's host and port: what records and logs name, never the URL,
        whose path often is the secret (a Slack incoming webhook's is)."""
        parts = urlsplit(self.url)
        host = parts.hostname or "?"
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{parts.port}" if parts.port else host

    def retry_delay_ms(self, failed_attempts: int) -> int:
        """The wait after the ``failed_attempts``-th failure: backoff, doubled each time."""
        return min(BACKOFF_CAP_MS, self.backoff_ms << max(0, failed_attempts - 1))

    def link_for(self, run: Mapping[str, Any] | None) -> str | None:
        """The ``link`` pattern filled in (values percent-encoded); None without a
        pattern, and for a gate change when the pattern names a run's field."""
        if self.link is None:
            return None
        wanted = _fields_of(self.link)
        if wanted and run is None:
            return None
        facts = run or {}
        values = {
            name: quote(str(facts.get("id" if name == "run" else name, "")), safe="")
            for name in wanted
        }
        return self.link.format_map(values)


def parse_targets(value: Any, environ: Mapping[str, str]) -> tuple[Target, ...]:
    """The ``notify`` array of tables; ``environ`` supplies the secrets."""
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise NotifyConfigError("'notify' must be an array of tables ([[notify]])")
    return tuple(_target(index, table, environ) for index, table in enumerate(value))


def _target(index: int, table: dict[str, Any], environ: Mapping[str, str]) -> Target:
    key = f"notify[{index}]"
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise NotifyConfigError(
            f"unknown key '{key}.{unknown[0]}' (known: {', '.join(sorted(_KEYS))})"
        )
    if "url" not in table:
        raise NotifyConfigError(f"'{key}.url' is required")
    if "on" not in table:
        raise NotifyConfigError(f"'{key}.on' is required: a list of {', '.join(NOTIFY_ON)}")
    fmt = validate.choice(
        table.get("format", "json"), f"{key}.format", FORMATS, error=NotifyConfigError
    )
    link = table.get("link")
    if link is not None:
        _check_link(link, f"{key}.link")
    secret_env, secret = _secret(table.get("secret_env"), f"{key}.secret_env", environ)
    return Target(
        index=index,
        url=_check_url(table["url"], f"{key}.url"),
        on=_on(table["on"], f"{key}.on"),
        format=fmt,
        link=link,
        secret_env=secret_env,
        secret=secret,
        attempts=_attempts(table.get("attempts", ATTEMPTS_DEFAULT), f"{key}.attempts"),
        backoff_ms=_duration(table, "backoff", BACKOFF_DEFAULT_MS, key),
        timeout_ms=_duration(table, "timeout", TIMEOUT_DEFAULT_MS, key),
    )


def _check_url(value: Any, key: str) -> str:
    """An absolute http or https URL with a host.  Any host: operators post to
    Slack and to CI services (docs/security.md weighs what that allows)."""
    url = validate.text(value, key, error=NotifyConfigError)
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise NotifyConfigError(f"'{key}' must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        raise NotifyConfigError(f"'{key}' is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise NotifyConfigError(f"'{key}' must be an http:// or https:// URL")
    if not parts.hostname:
        raise NotifyConfigError(f"'{key}' has no host")
    if port == 0:
        raise NotifyConfigError(f"'{key}' has port 0")
    return url


def _on(value: Any, key: str) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise NotifyConfigError(f"'{key}' must be a non-empty list of {', '.join(NOTIFY_ON)}")
    for position, name in enumerate(value):
        if name not in NOTIFY_ON:
            raise NotifyConfigError(
                f"'{key}[{position}]': {name!r} is not one of {', '.join(NOTIFY_ON)}"
            )
    if len(set(value)) != len(value):
        raise NotifyConfigError(f"'{key}' names a state twice")
    return frozenset(value)


def _secret(name: Any, key: str, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The secret's variable and value.  A named variable that is unset or empty is
    an error, not a warning: the operator asked for signed bodies, and a receiver
    that verifies would drop every unsigned one without anyone noticing."""
    if name is None:
        return None, None
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise NotifyConfigError(f"'{key}' must be the name of an environment variable")
    secret = environ.get(name, "")
    if not secret:
        raise NotifyConfigError(
            f"'{key}' names {name}, which the daemon's environment does not set (or sets "
            "empty); set it where the daemon starts (the unit's EnvironmentFile) and "
            "restart it, or remove secret_env"
        )
    return name, secret


def _check_link(value: Any, key: str) -> None:
    validate.text(value, key, error=NotifyConfigError)
    try:
        wanted = _fields_of(value)
    except ValueError as exc:
        raise NotifyConfigError(f"'{key}': {exc}") from exc
    unknown = sorted(wanted - set(LINK_FIELDS))
    if unknown:
        raise NotifyConfigError(
            f"'{key}': unknown field {{{unknown[0]}}} (known: "
            + ", ".join(f"{{{name}}}" for name in LINK_FIELDS)
            + ")"
        )
    sample = value.format_map(dict.fromkeys(wanted, "R1"))
    _check_url(sample, key)


def _fields_of(pattern: str) -> frozenset[str]:
    """The ``{field}`` names of a link pattern; ValueError on a malformed one."""
    names = set()
    for _literal, name, spec, conversion in string.Formatter().parse(pattern):
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            raise ValueError(f"'{{{name}}}' is not a plain {{field}} (write {{{{ for a brace)")
        names.add(name)
    return frozenset(names)


def _attempts(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ATTEMPTS_MAX:
        raise NotifyConfigError(f"'{key}' must be an integer from 1 to {ATTEMPTS_MAX}")
    return value


def _duration(table: Mapping[str, Any], name: str, default: int, key: str) -> int:
    if name not in table:
        return default
    ms = validate.duration_ms(
        table[name],
        f"{key}.{name}",
        parse_ms,
        error=NotifyConfigError,
        like="2s",
        kind_as_reason=True,
    )
    return validate.bounded(
        ms,
        f"{key}.{name}",
        "from 100ms to 1m",
        least=_DURATION_MIN_MS,
        most=_DURATION_MAX_MS,
        error=NotifyConfigError,
    )
