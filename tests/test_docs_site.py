"""The documentation site builds in strict mode and its pages work in a real browser.

The build is ``make docs``'s (``mkdocs build --strict``): a broken link or anchor, a page left out
of the nav, an API reference that does not resolve or a generated part that fails is an error,
and any warning fails this test too. Then headless Chromium (Debian's ``chromium``, installed by
``make system-deps``) opens the home page, the RLExperiment reference and the benchmarks page
from a local server, driven through the DevTools protocol, and the test fails when a page does
not render, an image (a benchmark plot) does not load, a request fails or leaves 127.0.0.1, or
the console shows an error.
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import plots

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # A small /dev/shm (containers, CI) would crash the renderer.
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]
#: The pages opened, and what each must show once loaded (a CSS selector).
PAGES = {
    "": "article h1",
    "platform/rlexperiment/": "#spec-checkpoint",
    "benchmarks/": "img[src*='img/benchmarks/']",
}
#: Plots the benchmarks page must show, loaded: every plot bench/plots.py draws.
PLOTS = tuple(plots.PLOTS)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it, into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", str(out)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log[-5000:]}"
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, warnings
    print(f"site built in {time.monotonic() - started:.1f} s: {len(list(out.rglob('index.html')))} pages")
    return out


def test_the_site_builds_with_every_page(site: Path) -> None:
    pages = {str(path.parent.relative_to(site)) for path in site.rglob("index.html")}
    assert {".", "benchmarks", "platform/rlexperiment", "migrating", "api/algorithms", "changelog"} <= pages
    for plot in PLOTS:
        assert (site / "img" / "benchmarks" / plot).read_bytes().startswith(b"<?xml")
    reference = (site / "platform" / "rlexperiment" / "index.html").read_text()
    # Generated from the models: a field's docstring, default and CEL rule are all there.
    assert "backoffLimit" in reference and "self == oldSelf" in reference
    api = (site / "api" / "algorithms" / "index.html").read_text()
    assert 'id="rltrainer.algorithms.AlgorithmConfig.training"' in api
    migration = (site / "migrating" / "index.html").read_text()
    assert "num_rollout_workers" in migration and "PPOTrainer" in migration


def test_the_reference_shows_cel_rules_as_written(site: Path) -> None:
    """A CEL rule is a code span in a table cell: its ``||`` shows as ``||``, not as the ``\\|``
    that escapes a pipe outside code spans."""
    from rltrainer_operator.crd import build_schema

    reference = (site / "platform" / "rlexperiment" / "index.html").read_text()
    codes = [html.unescape(code) for code in re.findall(r"<code>(.*?)</code>", reference, flags=re.DOTALL)]
    rules = [rule["rule"] for rule in _cel_rules(build_schema())]
    assert any("||" in rule for rule in rules)
    for rule in rules:
        assert rule in codes, f"the reference does not show the CEL rule {rule!r} as written"
    assert not [code for code in codes if "\\|" in code]


def _cel_rules(node: Any) -> list[dict[str, Any]]:
    """Every ``x-kubernetes-validations`` rule under a schema node."""
    if isinstance(node, dict):
        own = node.get("x-kubernetes-validations", [])
        return [*own, *(rule for value in node.values() for rule in _cel_rules(value))]
    if isinstance(node, list):
        return [rule for value in node for rule in _cel_rules(value)]
    return []


def test_the_site_loads_nothing_from_outside(site: Path) -> None:
    """No web fonts, scripts or styles from a CDN: the site works offline."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        for needle in ("fonts.googleapis", "fonts.gstatic", "cdn.jsdelivr", "unpkg.com", "cdnjs"):
            assert needle not in text, f"{page.relative_to(site)} loads {needle}"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """A static file server for ``folder`` on 127.0.0.1; yields its base URL."""
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    with serve(site) as url:
        yield url


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """A page of a headless Chromium, driven over the DevTools protocol's websocket."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(event.get("method") == method for event in self.events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.events.append(json.loads(self.socket.recv(timeout=remaining)))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    chromium = _chromium()
    if chromium is None:
        pytest.skip("needs Debian's chromium package (tests/system-packages.txt; `make system-deps` as root)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.is_file() or not port_file.read_text().strip():
            assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port within 60 s"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            (page,) = [target for target in json.load(answer) if target["type"] == "page"]
        from websockets.sync.client import connect

        with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            tools = DevTools(socket)
            for domain in ("Page", "Runtime", "Log", "Network"):
                tools.call(f"{domain}.enable")
            yield tools
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _problems(events: list[dict[str, Any]], base: str) -> list[str]:
    """Console errors, uncaught exceptions, failed or outside requests among a page's events."""
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            problems.append(f"console.{params['type']}: {[arg.get('value') for arg in params['args']]}")
        elif method == "Runtime.exceptionThrown":
            problems.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            problems.append(f"console: {params['entry']['text']} ({params['entry'].get('url', '')})")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            problems.append(f"request failed: {params.get('errorText')}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            problems.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith((base, "data:", "blob:", "about:")):
                problems.append(f"a request outside the site: {url}")
    return problems


def open_page(browser: DevTools, base: str, path: str, selector: str) -> tuple[list[str], list[str]]:
    """Load ``base + path``; returns (what is wrong with it, the sources of its loaded images)."""
    browser.events.clear()
    browser.call("Page.navigate", url=base + path)
    browser.wait_for("Page.loadEventFired")
    # Let late work (search index, deferred scripts, image decoding) report its errors too.
    browser.evaluate("new Promise(resolve => setTimeout(resolve, 500))")
    problems = []
    if not browser.evaluate("document.querySelector('article h1')?.textContent ?? null"):
        problems.append("no page heading rendered")
    if not browser.evaluate(f"document.querySelector({json.dumps(selector)}) !== null"):
        problems.append(f"nothing matches {selector}")
    images = browser.evaluate(
        "Promise.all(Array.from(document.images).map(img => img.decode().then(() => true, () => false)"
        ".then(ok => [img.getAttribute('src'), ok && img.naturalWidth > 0])))"
    )
    problems += [f"an image that does not load: {src}" for src, ok in images if not ok]
    return problems + _problems(browser.events, base), [src for src, ok in images if ok]


@pytest.mark.parametrize("path", list(PAGES), ids=[path or "home" for path in PAGES])
def test_page_renders_in_chromium(browser: DevTools, server: str, path: str) -> None:
    problems, images = open_page(browser, server, path, PAGES[path])
    assert not problems, f"{path or 'home'}: {problems}"
    if path == "benchmarks/":
        shown = {src.rsplit("/", 1)[-1] for src in images}
        assert set(PLOTS) <= shown, f"plots missing from the page: {set(PLOTS) - shown}"


def test_the_browser_check_sees_a_broken_page(browser: DevTools, tmp_path: Path) -> None:
    """What the page test looks for, shown failing: a missing image, a console error, an
    uncaught exception, a failed request and no rendered heading."""
    (tmp_path / "index.html").write_text(
        "<html><body><main><p>no article</p></main><img src='img/benchmarks/missing.svg'>"
        "<script>console.error('broken'); undefinedFunction();</script></body></html>"
    )
    with serve(tmp_path) as base:
        problems, _ = open_page(browser, base, "", "article h1")
    text = "\n".join(problems)
    assert "no page heading rendered" in text
    assert "an image that does not load: img/benchmarks/missing.svg" in text
    assert "console.error: ['broken']" in text
    assert "exception:" in text
    assert "HTTP 404" in text


def test_benchmark_results_say_when_where_and_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stored figure carries its date, machine and reproducing command; a line without
    them is refused by name, so a table cannot show a figure of unknown origin."""
    from bench import plots

    assert len(plots.benchmarks()) >= 10
    for name in plots.benchmarks():
        for row in plots.load(name):
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), (name, row)
            assert row["machine"], (name, row)
        table = plots.table(name).splitlines()
        assert table[0].endswith("| date | machine | command |")
        assert len([line for line in table if line.startswith("| ")]) == 1 + len(plots.load(name))
    (tmp_path / "x.jsonl").write_text('{"system": "a", "date": "2026-01-01", "command": "c"}\n')
    monkeypatch.setattr(plots, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="x.jsonl line 1: no machine"):
        plots.load("x")
