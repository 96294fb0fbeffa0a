"""A worker socket's line → a worker verb's handler, for the run's live credential only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError
from sloopd.wire.dispatch import Dispatcher, Result
from sloopd.worker.credentials import UNAUTHORIZED, Credential, Credentials

WorkerHandler = Callable[[Credential, dict[str, Any]], Result]


class WorkerDispatcher(Dispatcher):
    def __init__(
        self, run: str, credentials: Credentials, handlers: Mapping[str, WorkerHandler]
    ) -> None:
        self._run = run
        self._credentials = credentials
        self._handlers = handlers

    def _envelope_error(self, err: ProtocolError) -> ProtocolError:
        # An unknown verb would list every verb the daemon has: scope leaks.
        if err.code == ErrorCode.UNKNOWN_VERB:
            return UNAUTHORIZED
        return err

    def _call(self, request: api.Request) -> Result:
        if not request.verb.worker:
            raise UNAUTHORIZED
        credential = self._credentials.check(self._run, request.token)
        args = request.verb.parse(request.args)
        return self._handlers[request.verb.name](credential, args)
