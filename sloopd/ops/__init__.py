"""Operating the daemon: Prometheus metrics, systemd notifications, webhooks.

Owns the metrics registry and its HTTP endpoint (``metrics``), which read the
daemon through the small ``Observed`` interface, sd_notify (``notify``), and
``[[notify]]`` webhooks: their tables (``webhook_targets``), bodies
(``webhook_body``) and signed, bounded delivery (``webhooks``).
May import: ``wire``, ``store`` and ``util``; never the daemon's state or its
layers above.
"""
