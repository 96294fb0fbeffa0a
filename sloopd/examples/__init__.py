"""Example programs bundled with Sloop; ``agent`` is the one ``make demo`` runs.

Nothing in the daemon imports this package: it only ships with it, so
``python3 -m sloopd.examples.agent`` works wherever Sloop is installed.

May import: nothing of ``sloopd``.
"""
