"""Runs in flight: the driver, stage execution, children, worker sockets and git.

Owns the run driver (``runner``), a run's stored facts and settling
(``records``), executing one stage (``execute``), child process groups
(``children``), worker sockets and credentials (``worker``), the operator
socket's peer check (``peers``) and git operations (``gitops``).  The top
layer below the composition root: it may import every other layer.
"""
