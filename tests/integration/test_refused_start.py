"""A start refused half way undoes exactly what it made (sloopd.server's exit stack).

The metrics port is the last thing start-up may be refused over after it has
recovered the store's runs and bound the operator socket, so a refusal there must
leave no socket file, no ``daemon.json``, no held lock and a store that the next
start opens and serves.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from sloopd.server import ServeOptions, Server
from sloopd.startup import StartupError
from tests.support.daemon import count_events


def _options(sandbox: Path, repo: Path, metrics: str | None = None) -> ServeOptions:
    return ServeOptions(
        repo=repo, state_dir=sandbox / "state", socket_dir=sandbox / "s", metrics=metrics
    )


async def _serve_once(server: Server) -> None:
    serving = asyncio.ensure_future(server.serve())
    await asyncio.wait_for(server.ready.wait(), 15)
    server.request_stop()
    await serving


def test_a_start_refused_after_it_listened_undoes_what_it_made(
    sandbox: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = Server(_options(sandbox, repo, f"127.0.0.1:{port}"))
        with pytest.raises(StartupError, match="cannot serve metrics"):
            asyncio.run(refused.serve())
    assert not refused.layout.operator_socket.exists()
    assert not refused.layout.daemon_info.exists()
    assert refused.daemon is not None
    assert refused.daemon.store is None  # closed

    again = Server(_options(sandbox, repo))  # the lock was let go: this one takes it
    asyncio.run(_serve_once(again))
    assert not again.layout.operator_socket.exists()
    # The refused start said neither that it started nor that it stopped.
    assert count_events(again.layout.state_dir, "daemon_started") == 1
    assert count_events(again.layout.state_dir, "daemon_stopped") == 1
