"""``sloopctl web`` as a real process, and a real headless browser to look at it.

The gateway is started on port 0 (it picks a free one) and prints its URL once it
listens; ``WebGateway.url`` is that line. The browser is Debian's ``chromium``
driven through ``chromium-driver`` by Selenium (no browser download: Selenium is
given both paths, so its manager never runs).
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
import pytest

from tests.support.daemon import sloopctl_argv, sloopctl_env

if TYPE_CHECKING:
    from tests.support.agents import Bench

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
START_TIMEOUT_S = 20.0
WAIT_S = 20.0  # the longest explicit wait for something to appear on a page


def socket_of(bench: Bench) -> Path:
    """The operator socket of the bench's running daemon, which the gateway is given."""
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    return bench.daemon.socket


def browser_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


# The browser tests' one skip, with its reason (`make test` installs both packages).
needs_browser = pytest.mark.skipif(
    not browser_available(), reason="chromium and chromium-driver are not installed"
)


@dataclass
class WebGateway:
    """A running ``sloopctl web``; ``url`` carries the token, ``base`` does not."""

    proc: subprocess.Popen[str]
    url: str
    token_file: Path
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        cookie: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request to the gateway; with ``cookie``, as a signed-in browser."""
        sent = {"Host": f"127.0.0.1:{self.port}"}
        if cookie:
            sent["Cookie"] = f"sloop_web_{self.port}={self.token}"
        sent.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def session(self) -> dict[str, Any]:
        status, _, body = self.request("GET", "/api/session")
        assert status == 200, body
        data: dict[str, Any] = orjson.loads(body)
        return data


def start_gateway(socket_path: Path, token_file: Path, *args: str) -> WebGateway:
    argv = sloopctl_argv(
        socket_path, "web", "--listen", "127.0.0.1:0", "--token-file", str(token_file), *args
    )
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sloopctl_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http://"):
        proc.kill()
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
        raise AssertionError(f"sloopctl web did not start: {line!r}\n{err}")
    return WebGateway(proc=proc, url=line, token_file=token_file)


@contextmanager
def gateway(socket_path: Path, token_file: Path, *args: str) -> Iterator[WebGateway]:
    running = start_gateway(socket_path, token_file, *args)
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"sloopctl web exited {code}"


@contextmanager
def chromium(width: int = 1000, height: int = 900) -> Iterator[Any]:
    """A headless Chromium (Selenium's ``WebDriver``); closed at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in CI; the page is our own
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    # Chromium leaves its singleton-socket folder (org.chromium.Chromium.*) in TMPDIR
    # when chromedriver ends it: each browser gets a folder of its own, removed after.
    scratch = tempfile.mkdtemp(prefix="sloop-chromium-")
    service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(service=service, options=options)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def wait_for(driver: Any, predicate: Any, timeout: float = WAIT_S) -> Any:
    """Selenium's explicit wait: ``predicate(driver)`` until truthy; its value."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A live page replaces nodes while the wait reads them: a stale one means "not yet".
    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(predicate)


def text_of(driver: Any, css: str) -> str:
    """The visible text of every element matching ``css``, joined (empty when none)."""
    from selenium.webdriver.common.by import By

    return "\n".join(element.text for element in driver.find_elements(By.CSS_SELECTOR, css))


def has_text(css: str, wanted: str) -> Any:
    return lambda driver: wanted in text_of(driver, css)


def screenshot(driver: Any, folder: Path, name: str) -> Path:
    """A PNG of the page as it is now, in the test's temporary folder."""
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > 0
    return path


def console_errors(driver: Any) -> list[str]:
    """What the page's scripts reported as errors (uncaught exceptions, failed loads)."""
    return [str(entry["message"]) for entry in driver.get_log("browser")]


def wait_gone(predicate: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while predicate():
        assert time.monotonic() < deadline, "condition did not clear in time"
        time.sleep(0.05)


class EventStream:
    """A Server-Sent Events subscription read as a browser would (``/sse/...``)."""

    def __init__(self, web: WebGateway, path: str, timeout: float = WAIT_S) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=timeout)
        headers = {
            "Host": f"127.0.0.1:{web.port}",
            "Cookie": f"sloop_web_{web.port}={web.token}",
            "Accept": "text/event-stream",
        }
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def next_event(self) -> tuple[str, Any]:
        """The next event's name and decoded data (comments and ``retry`` skipped)."""
        name, data = "message", None
        while True:
            line = self.response.readline().decode()
            if not line:
                raise EOFError("the gateway ended the stream")
            line = line.rstrip("\n")
            if line == "":
                if data is not None:
                    return name, orjson.loads(data)
                name = "message"
            elif line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]

    def until(self, wanted: Any) -> tuple[str, Any]:
        """Events until ``wanted(name, data)`` holds; that event."""
        while True:
            event = self.next_event()
            if wanted(*event):
                return event

    def close(self) -> None:
        self.conn.close()
