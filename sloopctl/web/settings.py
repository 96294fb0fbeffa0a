"""What a gateway is told on its command line, checked before anything listens.

Loopback only unless the operator says otherwise: the gateway speaks plain HTTP,
so on any other interface the token (and with ``--allow-actions`` the power to
abort runs) would cross the network in the clear.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sloopd.wire import api

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8421
DEFAULT_LISTEN: Final = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
TOKEN_DIR_NAME: Final = "sloopctl"
LOOPBACK_NAMES: Final = frozenset({"localhost"})


class SettingsError(Exception):
    """The command line cannot be served as given (a usage error)."""


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int

    @property
    def url_host(self) -> str:
        """The host as a URL writes it (an IPv6 literal in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def url(self, port: int | None = None) -> str:
        return f"http://{self.url_host}:{self.port if port is None else port}"


@dataclass(frozen=True, slots=True)
class Settings:
    socket: Path
    listen: Listen
    allow_actions: bool
    token_file: Path | None  # None: the default place for the port actually bound
    verbatim: bool  # --raw: agents' text keeps its terminal control sequences


def parse_listen(value: str) -> Listen:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (the default host); port 0 picks one."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise SettingsError(f"--listen wants HOST:PORT, not {value!r}")
    port = int(port_text)
    if port > 65535:
        raise SettingsError(f"--listen port {port} is out of range (0-65535)")
    host = host.strip("[]") if host.startswith("[") else host
    return Listen(host or DEFAULT_HOST, port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: 127.0.0.0/8, ::1 or ``localhost``."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # any other name could resolve anywhere: not loopback


def check_listen(listen: Listen, allow_remote: bool) -> None:
    if not is_loopback(listen.host) and not allow_remote:
        raise SettingsError(
            f"refusing to listen on {listen.host}: not a loopback address. The gateway "
            "speaks plain HTTP, so its token would cross the network in the clear; reach "
            "it through an SSH tunnel instead, or pass --allow-remote to accept that risk"
        )


def token_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/sloopctl``, else ``/tmp/sloopctl-<uid>``: private to this user."""
    env = dict(os.environ) if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / TOKEN_DIR_NAME
    return Path(f"/tmp/{TOKEN_DIR_NAME}-{os.getuid()}")


def default_token_file(port: int, environ: dict[str, str] | None = None) -> Path:
    """One file per port, so two gateways on one machine never overwrite each other's."""
    return token_dir(environ) / f"web-{port}.token"


def prepare_token_dir(path: Path) -> None:
    """Create the token's directory 0700, refusing one another user could read or swap."""
    reason = api.untrusted_directory(path)
    if reason is not None:
        raise SettingsError(f"refusing to write the token into {path}: {reason}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"cannot create {path}: {exc.strerror}") from None
    reason = api.untrusted_directory(path)
    if reason is not None:
        raise SettingsError(f"refusing to write the token into {path}: {reason}")
