"""A child's environment: an allowlist, never the daemon's own environment.

A denylist leaks whatever the operator's session happens to hold (``TMUX``,
``SSH_AUTH_SOCK``, ``DBUS_SESSION_BUS_ADDRESS``, cloud credentials): each is a
way out of the sandbox or into someone's account.  A child gets ``PATH``, the
locale, its own ``HOME``, the ``SLOOP_*`` variables of its stage, and only the
variables ``agent.env`` names.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Mapping

# The locale, so tools print and sort as the operator expects.
LOCALE_VARS = ("LANG", "LANGUAGE", "TZ")
# How the marker reaches the child: it is how a group's processes are found.
MARKER_VAR = "SLOOP_CHILD_MARKER"


def child_path(host_path: str | None) -> str:
    """The daemon's PATH, with Sloop's own scripts so ``sloopctl`` always resolves."""
    parts = [p for p in (host_path or os.defpath).split(os.pathsep) if p]
    scripts = sysconfig.get_path("scripts")
    if scripts and scripts not in parts:
        parts.append(scripts)
    return os.pathsep.join(parts)


def child_environment(
    host: Mapping[str, str],
    *,
    passed: Iterable[str],
    home: str,
    sloop: Mapping[str, str],
) -> dict[str, str]:
    """What the child sees: PATH, locale, HOME, the passed-through names, SLOOP_*."""
    env = {"PATH": child_path(host.get("PATH")), "HOME": home}
    for name, value in host.items():
        if name in LOCALE_VARS or name.startswith("LC_"):
            env[name] = value
    for name in passed:
        if name in host:
            env[name] = host[name]
    env.update(sloop)
    return env
