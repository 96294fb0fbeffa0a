"""Operating the daemon: Prometheus metrics and systemd notifications.

Owns the metrics registry and its HTTP endpoint (``metrics``), which read the
daemon through the small ``Observed`` interface, and sd_notify (``notify``).
May import ``wire``, ``store`` and ``util``; never the daemon's state or its
layers above.
"""
