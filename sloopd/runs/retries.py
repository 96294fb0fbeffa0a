"""Transient vendor failures: the ticket is queued again, later each time, a few times.

An ``overloaded`` or ``network`` failure says nothing about the work, only that
the vendor could not be reached or could not serve: the run settles ``failed``
(halt ``fail_action``: no ``return_to`` budget spent, no gate closed) and its
ticket gets a trigger after ``agent.transient_backoff``, doubling per retry up to
``agent.transient_backoff_max``.  Retries are counted from the ticket's stored
runs, so a restart forgets none: the unbroken series of its latest runs that
ended on a transient failure (runs a restart aborted are passed over).  Once
``agent.transient_retries`` are spent the run settles ``failed`` saying so.

A stage lost while its Ray cluster could not be reached (``node_lost`` with
``cluster_down``) spends no retry: the outage is the cluster's, it closed the gate,
and the ticket is queued again at once, to be claimed when the gate reopens.  Such
runs are passed over when retries are counted, as aborted ones are.

A rate or usage limit (``after_vendor_limit``) is queued again too, when the gate's
cooldown ends.
"""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.core.state import Daemon
from sloopd.flows.agent_settings import AgentSettings
from sloopd.flows.diagnosed import TRANSIENT_CLASSES
from sloopd.queue import gate
from sloopd.runs.runstate import RunFacts
from sloopd.runs.stop import Stop, halt
from sloopd.store import Store
from sloopd.util.clock import now_ms
from sloopd.util.durations import format_ms

__all__ = [
    "TRANSIENT_CLASSES",
    "after_transient",
    "after_vendor_limit",
    "backoff_ms",
    "requeued",
    "retries_used",
    "spends_none",
]


def retries_used(store: Store, ticket: str, run_id: str) -> int:
    """Transient retries the ticket already had: its latest runs that ended on one."""
    used = 0
    for other, state, classification in store.all("run_outcomes_for_ticket", (ticket,)):
        diagnosis = orjson.loads(classification) if classification else None
        if other == run_id or state == "aborted" or spends_none(diagnosis):
            continue
        if not isinstance(diagnosis, dict) or diagnosis.get("classification") not in (
            TRANSIENT_CLASSES
        ):
            break
        used += 1
    return used


def spends_none(diagnosis: Any) -> bool:
    """Whether a failure spent no transient retry: its stage was lost with the cluster."""
    return isinstance(diagnosis, dict) and diagnosis.get("cluster_down") is True


def backoff_ms(settings: AgentSettings, used: int) -> int:
    """The wait before retry ``used + 1``: the backoff, doubled per retry, capped."""
    return min(settings.transient_backoff_ms << min(used, 32), settings.transient_backoff_max_ms)


def after_transient(
    store: Store,
    settings: AgentSettings,
    facts: RunFacts,
    stage: str,
    attempt: int,
    diagnosis: dict[str, Any],
) -> Stop:
    """The run's end after a transient failure: queued again, or retries spent."""
    evidence = diagnosis.get("evidence") or diagnosis.get("detail")
    cause = f"stage '{stage}' failed on execution {attempt}: {diagnosis['classification']}" + (
        f" ({evidence})" if evidence else ""
    )
    if spends_none(diagnosis):
        # Due now: the gate the outage closed holds it until the cluster is back.
        return halt(
            f"{cause}; queued again for when the Ray cluster is back "
            "(a cluster that cannot be reached spends no transient retry)",
            requeue_at_ms=now_ms(),
        )
    return requeued(store, settings, facts, cause)


def requeued(store: Store, settings: AgentSettings, facts: RunFacts, cause: str) -> Stop:
    """The run's end after the transient failure ``cause`` names: queued again after the
    backoff, or, its retries spent, not."""
    used = retries_used(store, facts.ticket, facts.run_id)
    allowed = settings.transient_retries
    if used >= allowed:
        return halt(
            f"{cause}; not queued again: the ticket's transient retries are spent "
            f"({used} of agent.transient_retries = {allowed})"
        )
    delay = backoff_ms(settings, used)
    return halt(
        f"{cause}; queued again in {format_ms(delay)} (transient retry {used + 1} of {allowed})",
        requeue_at_ms=now_ms() + delay,
    )


def after_vendor_limit(daemon: Daemon, facts: RunFacts, diagnosis: dict[str, Any]) -> Stop:
    """A rate or usage limit: close the gate, settle failed, queue the ticket again.

    No return_to budget is spent and no agent is respawned before the
    deadline: the ticket's next trigger is due when the cooldown ends.
    """
    kind = diagnosis["classification"].replace("_", " ")
    reason = f"{kind} reported by the agent of {facts.run_id}"
    # Capped at agent.max_cooldown (the reason then says so); with no reset named,
    # a probe (sloopd.queue.gate).
    until = gate.cool_down_for_limit(
        daemon, diagnosis.get("reset_at_ms"), reason, diagnosis.get("retry_after_ms")
    )
    return halt(None, requeue_at_ms=until)
