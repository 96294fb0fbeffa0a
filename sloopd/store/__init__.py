"""The store: the only code that opens database connections.

Owns the SQLite file through apsw (``db``: one writer, read-only readers,
named queries from ``queries.sql``), the exclusive lock (``lock``) and the
schema with its migrations (``migrations``).  Imports nothing else of
``sloopd``: every layer above imports it to read and write.
"""

from sloopd.store.db import NeedsMigration, Store, StoreFault, StoreUnavailable, Transaction
from sloopd.store.lock import LockHeld, StoreLock
from sloopd.store.migrations import SCHEMA_VERSION, StoreTooNew

__all__ = [
    "SCHEMA_VERSION",
    "LockHeld",
    "NeedsMigration",
    "Store",
    "StoreFault",
    "StoreLock",
    "StoreTooNew",
    "StoreUnavailable",
    "Transaction",
]
