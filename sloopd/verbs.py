"""The operator socket's verb handlers, by name."""

from __future__ import annotations

from typing import Any

from sloopd import show
from sloopd.daemon import Daemon
from sloopd.dispatch import Handler


def operator_handlers(daemon: Daemon) -> dict[str, Handler]:
    def show_verb(args: dict[str, Any]) -> dict[str, Any]:
        if "ref" not in args:
            return show.dashboard(daemon, args.get("limit"))
        daemon.require_store()
        raise NotImplementedError

    def status_verb(args: dict[str, Any]) -> dict[str, Any]:
        return show.status(daemon)

    return {"show": show_verb, "status": status_verb}
