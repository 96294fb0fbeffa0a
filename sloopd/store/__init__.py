"""The store package: the only code that opens database connections."""

from sloopd.store.db import NeedsMigration, Store, Transaction
from sloopd.store.lock import LockHeld, StoreLock
from sloopd.store.migrations import SCHEMA_VERSION, StoreTooNew

__all__ = [
    "SCHEMA_VERSION",
    "LockHeld",
    "NeedsMigration",
    "Store",
    "StoreLock",
    "StoreTooNew",
    "Transaction",
]
