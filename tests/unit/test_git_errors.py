"""Every error the git layer raises is a ``GitError`` (issue 35): one family to catch.

Found, not listed: an error class a module of ``sloopd/git`` (or a node's room, whose
errors are its git's) defines later is checked too.  The subclass names and the
messages stay: a caller that must tell a kind apart still can.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sloopd.git
from sloopd.git import bundles, checkout, node_cache, ops, scratch
from sloopd.git.errors import (
    CacheError,
    CheckoutError,
    GitError,
    GitInterrupted,
    GitTimeout,
    ScratchError,
    ShippingError,
)
from sloopd.remote import room

MODULES = [
    *(f"sloopd.git.{m.name}" for m in pkgutil.iter_modules(sloopd.git.__path__)),
    "sloopd.remote.room",
]


def _errors_defined_in(name: str) -> list[type[BaseException]]:
    module = importlib.import_module(name)
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__.startswith(("sloopd.git", "sloopd.remote.room"))
    ]


@pytest.mark.parametrize("name", MODULES)
def test_every_error_of_the_git_layer_is_a_git_error(name: str) -> None:
    for error in _errors_defined_in(name):
        assert issubclass(error, GitError), f"{name}.{error.__name__} is no GitError"


def test_the_family_is_found_where_callers_name_it() -> None:
    kinds = {
        ops.GitError: GitError,
        ops.GitTimeout: GitTimeout,
        ops.GitInterrupted: GitInterrupted,
        checkout.CheckoutError: CheckoutError,
        scratch.ScratchError: ScratchError,
        bundles.ShippingError: ShippingError,
        node_cache.CacheError: CacheError,
    }
    for named, kind in kinds.items():
        assert named is kind
    assert issubclass(room.RoomError, GitError)
    found = {e for name in MODULES for e in _errors_defined_in(name)}
    assert set(kinds.values()) | {room.RoomError} <= found


def test_a_checkout_error_keeps_what_git_said() -> None:
    error = CheckoutError("fetching b from /c failed: fatal: no.", "fatal: no\n")
    assert str(error) == "fetching b from /c failed: fatal: no."
    assert error.said == "fatal: no\n"
    assert CheckoutError("refused.").said == ""
