"""Who may use a gateway: the token, and the checks every HTTP request passes.

The operator socket's authority is the file mode of a Unix socket; a TCP port on
loopback has none (every local user, and every web page a browser shows, can reach
it). So every request carries a token the gateway made at start and wrote to a
0600 file, and the attacks that need no token are closed one by one:

- **DNS rebinding**: a page of ``evil.example`` whose name is made to resolve to
  127.0.0.1 reaches the port as a same-origin page of its own. Its requests carry
  ``Host: evil.example``; only the names the gateway listens under are accepted.
- **Cross-site requests**: the session cookie is ``SameSite=Strict``, so another
  site's page cannot send it; a write must also come from the gateway's own
  origin (``Origin``, and ``Sec-Fetch-Site`` where the browser sends it) and carry
  the CSRF header, which a cross-origin page can neither read nor send without a
  preflight the gateway never grants.
- **Leaks**: the token leaves the address bar at once (the first page redirects
  to itself without it), ``Referrer-Policy: no-referrer`` keeps URLs out of
  Referer, and the cookie is ``HttpOnly`` (no script reads it).

Refusals are a bare status line and a fixed word: nothing a request sent is echoed.
The one exception is for a person: a browser loading a page without a valid token
(a tab left from before the gateway restarted with a new token) gets the same 401
with a fixed page saying so and what to open instead, never any data.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sloopctl.web.settings import Listen, is_loopback

TOKEN_QUERY: Final = "token"
COOKIE_PREFIX: Final = "sloop_web_"
CSRF_HEADER: Final = "X-Sloop-CSRF"
TOKEN_BYTES: Final = 32


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def allowed_hosts(listen: Listen, port: int) -> frozenset[str]:
    """The ``Host`` values a browser sends for this gateway, lower case."""
    names = {listen.url_host.lower()}
    if is_loopback(listen.host):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    hosts = {f"{name}:{port}" for name in names}
    if port == 80:  # a browser leaves the default port out of Host
        hosts |= names
    return frozenset(hosts)


@dataclass(frozen=True, slots=True)
class Guard:
    """The token and the hosts it is good for; ``port`` names the cookie."""

    token: str
    port: int
    hosts: frozenset[str]

    @property
    def cookie_name(self) -> str:
        # Cookies are not kept apart by port: two gateways on one host need two names.
        return f"{COOKIE_PREFIX}{self.port}"

    @property
    def csrf(self) -> str:
        """Derived from the token, so it needs no state and dies with the token."""
        return hmac.new(self.token.encode(), b"sloop-web-csrf", hashlib.sha256).hexdigest()

    def token_ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode(), self.token.encode()
        )

    def host_ok(self, host: str | None) -> bool:
        return host is not None and host.lower() in self.hosts

    def origins(self) -> Iterable[str]:
        return (f"http://{host}" for host in self.hosts)

    def write_refusal(self, headers: Mapping[str, str]) -> str | None:
        """Why a state-changing request is refused (a fixed phrase), or None."""
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site != "same-origin":
            return "cross-site request"
        origin = headers.get("Origin")
        if origin is None or origin.lower() not in set(self.origins()):
            return "bad origin"
        csrf = headers.get(CSRF_HEADER)
        if csrf is None or not hmac.compare_digest(csrf.encode(), self.csrf.encode()):
            return "missing or bad CSRF header"
        return None


def write_token_file(path: Path, token: str) -> None:
    """The token, mode 0600 from its first byte, replacing any older file atomically."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    descriptor = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def remove_token_file(path: Path, token: str) -> None:
    """Remove the file at exit, unless another gateway has written its own there since."""
    try:
        if path.read_text(encoding="ascii").strip() == token:
            path.unlink()
    except OSError:
        pass
