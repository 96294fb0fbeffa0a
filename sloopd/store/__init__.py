"""The store: the only code that opens database connections.

Owns the SQLite file through apsw (``db``: one writer, read-only readers,
named queries from ``queries.sql``, answered as the named rows of
``rowtypes`` where a query makes a row kind; ``transaction``: the queries of one
write transaction), the exclusive lock (``lock``) and the schema with its
migrations (``migrations``).

May import: nothing of ``sloopd``; the layers above it import it to read and write.
"""

from sloopd.store.db import NeedsMigration, Store, StoreUnavailable, Transaction
from sloopd.store.fault import StoreFault
from sloopd.store.lock import LockHeld, StoreLock
from sloopd.store.migrations import SCHEMA_VERSION, StoreTooNew
from sloopd.store.rowtypes import (
    ClaimableTrigger,
    ClaimFacts,
    GateRow,
    RecentRunRow,
    RunRow,
    RunUsageRow,
    TicketExtra,
    TicketRow,
    TriggerRow,
    UsageRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "ClaimFacts",
    "ClaimableTrigger",
    "GateRow",
    "LockHeld",
    "NeedsMigration",
    "RecentRunRow",
    "RunRow",
    "RunUsageRow",
    "Store",
    "StoreFault",
    "StoreLock",
    "StoreTooNew",
    "StoreUnavailable",
    "TicketExtra",
    "TicketRow",
    "Transaction",
    "TriggerRow",
    "UsageRow",
]
