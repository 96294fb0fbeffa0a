from tests.support.daemon import DaemonProcess


def test_dashboard_answers(daemon: DaemonProcess) -> None:
    data = daemon.client().ok("show")
    assert data["kind"] == "dashboard"
