"""The git layer's one error family: every error a git of the daemon's ends in is a ``GitError``.

A caller that means "git failed, for a reason that is no verdict on the run" catches
``GitError``; one that must tell a kind apart catches the kind.  Each kind's message
is a sentence for a person (stage reasons, logs, ``refused`` answers quote it as it
is), worded by the module that raises it.

- ``GitTimeout``, ``GitInterrupted``: a git on the main repository (``git.ops``) killed,
  with its hooks, past its deadline or when the run was stopped.
- ``CheckoutError``: a run's checkout could not be made, read or brought back
  (``git.checkout``, ``git.checkout_edits``, ``git.workspace``).
- ``ScratchError``: ``sync``'s merge or rebase failed for a reason that is no
  conflict (``git.scratch``).
- ``ShippingError``: a bundle for a Ray node could not be made or taken
  (``git.bundles``).
- ``CacheError``: git failed in a node's cache (``git.node_cache``).

``sloopd.remote.room.RoomError`` (a node could not prepare or collect a stage) is one
too.  ``tests/unit/test_git_errors.py`` checks that every error of the layer is.
"""

from __future__ import annotations


class GitError(Exception):
    """Git failed in a way that is no verdict on the run (missing repository, ref, lock…)."""


class GitTimeout(GitError):
    """A git call (or a hook it ran) outlived its deadline and was killed."""


class GitInterrupted(GitError):
    """The caller stopped a git call (an abort, a stopping daemon): it and its hooks
    were killed."""


class CheckoutError(GitError):
    """A checkout operation failed or was refused; the message is a sentence for a person.

    ``said`` is what the failing git printed on standard error (bounded as every daemon
    git's is), for a caller that knows better what part of it matters."""

    def __init__(self, message: str, said: str = "") -> None:
        super().__init__(message)
        self.said = said


class ScratchError(GitError):
    """git failed in the scratch repository for a reason that is no conflict."""


class ShippingError(GitError):
    """A bundle could not be made or taken; the message says why."""


class CacheError(GitError):
    """git failed in the node's cache; the message says what and why."""
