"""One live credential per run, minted per stage execution or panel seat.

A token dies when the next is minted, when its child exits and when the run
settles, so a leftover process of an earlier stage cannot speak for a later one.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from sloopd.wire.api import ErrorCode, ProtocolError

# Every refusal outside the caller's scope is this one error, so a probing worker
# learns nothing from which check refused it.
UNAUTHORIZED = ProtocolError(ErrorCode.UNAUTHORIZED, "not authorized")


@dataclass(frozen=True, slots=True)
class Credential:
    run: str
    stage: str
    attempt: int
    seat: int | None  # the reviewer index for a panel seat
    token: str


class Credentials:
    """One live credential per run."""

    def __init__(self) -> None:
        self._live: dict[str, Credential] = {}

    def mint(self, run: str, stage: str, attempt: int, seat: int | None = None) -> Credential:
        credential = Credential(run, stage, attempt, seat, secrets.token_urlsafe(32))
        self._live[run] = credential  # the previous one stops validating now
        return credential

    def revoke(self, run: str, credential: Credential | None = None) -> None:
        live = self._live.get(run)
        if live is not None and (credential is None or live is credential):
            del self._live[run]

    def check(self, run: str, token: str | None) -> Credential:
        live = self._live.get(run)
        presented = (token or "").encode()
        expected = live.token.encode() if live is not None else b"\0" * 43
        # compare_digest runs in time independent of where the strings differ.
        if not hmac.compare_digest(presented, expected) or live is None:
            raise UNAUTHORIZED
        return live
