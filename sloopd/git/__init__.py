"""Git: the one runner every git call of the daemon goes through, and what is built on it.

``runner`` starts git (a deadline, an output bound, one scrub list of the
repository-locating ``GIT_*`` variables, cancellation that kills hooks too); ``ops``
are the walk's operations on the main repository (rev-parse, ``sync``, the
``ff_only`` merge, worktrees, stale locks); ``checkout`` is a run's isolated
checkout, the sandboxed git in it and the bring-back of its branch;
``checkout_edits`` the daemon's own edits there (commits, resets).  No other module
of ``sloopd`` starts git.  Every error the layer raises is a ``errors.GitError``.

May import: ``sloopd.util`` and ``sloopd.proc`` (the sandbox a checkout's git runs in).
"""
