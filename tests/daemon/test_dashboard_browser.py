"""The web dashboard in a real browser: headless Chromium through Selenium against a real
``gliding daemon`` process on a loopback port, running scripted jobs.

Logging in (the token form, a one-time link from ``gliding dashboard``, used once), a job's
events arriving live without a reload, a job whose goal, tool output and model reply carry
``<script>`` and ``<img onerror>`` staying inert (shown as text), a waiting approval answered
from the page, CSRF refused from the page's own context without its header, the cookie's
flags, and nothing loaded from elsewhere or refused by CSP. Screenshots go to
``$TEST_ARTIFACTS`` (default: the test's tmp_path).

Selenium never downloads a browser or a driver here: the system's ``/usr/bin/chromium`` and
``/usr/bin/chromedriver`` (``scripts/setup.sh`` installs them with apt), ``SE_OFFLINE``. Without
them the tests skip, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.cli.cli_support import clean_env, gliding_script
from tests.daemon.daemon_support import TASK, replies

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 60  # one thing the page should show: seconds on an idle machine
ENV = clean_env({"HF_HUB_OFFLINE": "1", "GLIDING_MEMORY__VECTORS__ENABLED": "false"})
PAYLOAD = '<script>alert(1)</script><img src=x onerror="window.__pwned=1;alert(2)">'
ASKING = TASK.format(workspace="ws") + """\
approvals:
  ask: unmatched
  allow:
    - {tool: bash, command: "echo step-1 >> trace.txt"}
"""


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if not missing:
        return
    why = (f"{', '.join(missing)} missing: scripts/setup.sh installs them (apt-get install "
           "chromium chromium-driver; pip install -e '.[dev]')")
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the dashboard's browser: {why}")
    pytest.skip(why)


class Daemon:
    """A ``gliding daemon`` process on a free loopback port, data directory ``tmp/data``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / "daemon.log"
        info_file = tmp / "data" / "daemon.json"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(gliding_script()), "daemon", "--data-dir", "data", "--port", "0"],
                cwd=tmp, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"no daemon: {self.log.read_text()}"
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(info_file.read_text())
                if info.get("pid") == self.proc.pid:
                    break
            time.sleep(0.05)
        self.url: str = info["url"]
        self.token = (tmp / "data" / "daemon.token").read_text(encoding="ascii").strip()
        self.http = httpx.Client(base_url=self.url, trust_env=False, timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"})

    def submit(self, task: str, reply_text: str, name: str = "r.yaml") -> str:
        (self.tmp / name).write_text(reply_text, encoding="utf-8")
        answer = self.http.post("/v1/jobs", json={"task": task, "model": f"scripted:{name}",
                                                  "base_dir": str(self.tmp)})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["job"])

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    _require_browser()
    started = Daemon(tmp_path)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("TEST_ARTIFACTS") or tmp_path) / "dashboard"
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def browser(daemon: Daemon, artifacts: Path, request: pytest.FixtureRequest,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1800", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)),
                              options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        driver.set_script_timeout(WAIT_S)
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.save_screenshot(str(artifacts / f"{request.node.name}-last.png"))
        driver.quit()


def wait(driver: Any, what: Callable[[], Any], message: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(lambda _: what(), message)


def by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def log_in(driver: Any, daemon: Daemon) -> None:
    driver.get(daemon.url + "/")
    by_css(driver, "#token")[0].send_keys(daemon.token)
    by_css(driver, "#login")[0].click()
    wait(driver, lambda: by_css(driver, "#jobs"), "the dashboard after logging in")


def text(driver: Any, selector: str, attribute: str = "textContent") -> str:
    """An attribute of the first element ``selector`` finds, read in one script: the page
    redraws its lists, so a Selenium element found a moment ago may be gone."""
    found = driver.execute_script(
        f"const e = document.querySelector(arguments[0]); return e ? e.{attribute} : ''",
        selector)
    return str(found or "")


def events_of(driver: Any) -> list[str]:
    return [str(e) for e in driver.execute_script(
        "return [...document.querySelectorAll('#events li')].map(li => li.dataset.event)")]


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert  # noqa: B018 - asking is the check
    except NoAlertPresentException:
        return True
    return False


def csp_violations(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser")
            if "Content Security Policy" in e["message"] or "Refused to" in e["message"]]


def test_the_token_form_logs_in_and_the_page_keeps_the_token_out(
        daemon: Daemon, browser: Any, artifacts: Path) -> None:
    browser.get(daemon.url + "/")
    assert by_css(browser, "#token") and not by_css(browser, "#jobs")
    browser.save_screenshot(str(artifacts / "login.png"))
    by_css(browser, "#token")[0].send_keys("not-the-token")
    by_css(browser, "#login")[0].click()
    wait(browser, lambda: "Wrong token" in browser.page_source, "the wrong token refused")
    log_in(browser, daemon)
    assert daemon.token not in browser.page_source
    [cookie] = browser.get_cookies()
    assert cookie["name"] == "gliding_session" and cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: not for scripts
    sources = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert sources and all(s.startswith(daemon.url + "/") for s in sources), sources
    assert csp_violations(browser) == []
    by_css(browser, "#logout")[0].click()
    wait(browser, lambda: by_css(browser, "#token"), "the login form after logging out")


def test_a_one_time_link_from_the_cli_works_once(daemon: Daemon, browser: Any) -> None:
    printed = subprocess.run([str(gliding_script()), "dashboard", "--data-dir", "data"],
                             cwd=daemon.tmp, env=ENV, capture_output=True, text=True,
                             timeout=60)
    assert printed.returncode == 0, printed.stderr
    link = printed.stdout.strip()
    assert link.startswith(daemon.url + "/login?once=")
    browser.get(link)
    wait(browser, lambda: by_css(browser, "#jobs"), "the dashboard through the link")
    assert browser.current_url == daemon.url + "/"  # the secret left the address bar
    browser.delete_all_cookies()
    browser.get(link)
    wait(browser, lambda: "used already or has expired" in browser.page_source,
         "a used link refused")
    assert not by_css(browser, "#jobs")


def test_a_job_is_watched_live_without_a_reload(daemon: Daemon, browser: Any,
                                                artifacts: Path) -> None:
    log_in(browser, daemon)
    browser.execute_script("window.__sameDocument = true")
    job = daemon.submit(TASK.format(workspace="ws"), replies(steps=3, sleep_s=2.0))
    row = f"tr.job[data-job='{job}']"
    wait(browser, lambda: by_css(browser, row), "the job in the list")
    by_css(browser, row)[0].click()
    wait(browser, lambda: "turn" in events_of(browser), "a turn event")
    assert "job.finished" not in events_of(browser)  # it is running: the events came live
    wait(browser, lambda: "job.finished" in events_of(browser), "job.finished")
    assert browser.execute_script("return window.__sameDocument") is True  # never reloaded
    seen = events_of(browser)
    assert seen.count("turn") == 4 and seen.index("job.started") < seen.index("job.finished")
    wait(browser, lambda: "finished" in text(browser, "#pipeline li", "className"),
         "DA finished in the pipeline")
    assert "DA" in text(browser, "#pipeline li") and "job's process" in text(browser,
                                                                           "#pipeline li")
    assert len(by_css(browser, "#tokens svg circle.dot.built")) == 4
    assert len(by_css(browser, "#tokens svg circle.dot.naive")) == 4
    wait(browser, lambda: by_css(browser, "#board svg .node"), "the blackboard graph")
    wait(browser, lambda: "finished: success" in text(browser, row), "the list's state")
    assert "free (scripted)" in text(browser, row + " td.cost")
    browser.save_screenshot(str(artifacts / "job-live.png"))
    assert csp_violations(browser) == []


def test_hostile_text_from_a_job_stays_inert(daemon: Daemon, browser: Any,
                                             artifacts: Path) -> None:
    task = yaml.safe_dump({"goal": f"Show {PAYLOAD}", "workspace": "ws", "pipeline": ["DA"],
                           "checks": [{"file_exists": "evil.html"}]})
    script = yaml.safe_dump({"DA": [
        {"write_file": {"path": "evil.html", "content": PAYLOAD + "\n"}},
        {"bash": {"command": "cat evil.html"}},
        {"finish": {"summary": PAYLOAD}}]})
    job = daemon.submit(task, script, "evil.yaml")
    log_in(browser, daemon)
    browser.get(f"{daemon.url}/#job={job}")
    wait(browser, lambda: "job.finished" in events_of(browser), "job.finished")
    by_css(browser, "#iri")[0].clear()
    by_css(browser, "#iri")[0].send_keys(f"gliding://job/{job}/result/DA-2-0")
    by_css(browser, "#iri-form button")[0].click()
    wait(browser, lambda: PAYLOAD in text(browser, "#iri-content"), "the tool result read back")
    wait(browser, lambda: PAYLOAD in text(browser, f"tr.job[data-job='{job}']", "title"),
         "the goal in the list")
    time.sleep(0.5)  # an injected handler would have run by now (an image error is quick)
    assert no_alert(browser)
    assert browser.execute_script("return window.__pwned === undefined") is True
    assert by_css(browser, "#events img, #iri-content img, #jobs img, img[onerror]") == []
    scripts = browser.execute_script(
        "return [...document.scripts].map(s => s.getAttribute('src'))")
    assert scripts == ["/static/app.js"]
    # shown, literally: the events' summaries (clipped), the goal, the tool result
    assert "<script>alert(1)</script><img src=x on" in text(browser, "#events")
    assert text(browser, f"tr.job[data-job='{job}'] .goal-text") == f"Show {PAYLOAD}"
    assert text(browser, "#iri-content").splitlines()[-1] == PAYLOAD
    browser.save_screenshot(str(artifacts / "hostile-inert.png"))


def test_an_approval_is_answered_from_the_page_and_csrf_is_refused(
        daemon: Daemon, browser: Any, artifacts: Path) -> None:
    job = daemon.submit(ASKING, replies(steps=2))
    log_in(browser, daemon)
    browser.get(f"{daemon.url}/#job={job}")
    wait(browser, lambda: by_css(browser, ".approval"), "the waiting approval")
    waiting = text(browser, ".approval")
    assert "bash" in waiting and "echo step-2 >> trace.txt" in waiting
    digest = daemon.http.get(f"/v1/jobs/{job}/approvals").json()["approvals"][0]["digest"]
    assert f"sha256 {digest}" in waiting
    refused = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('/v1/jobs/{job}/approvals/DA-2', {{method: 'POST', headers: "
        "{'Content-Type': 'application/json'}, body: JSON.stringify({approve: true})})"
        ".then(r => r.json().then(b => done([r.status, b.error.code])))")
    assert refused == [403, "auth.csrf"]
    assert daemon.http.get(f"/v1/jobs/{job}/approvals").json()["approvals"][0]["answer"] is None
    browser.save_screenshot(str(artifacts / "approval-waiting.png"))
    by_css(browser, ".approval input")[0].send_keys("fine, go on")
    by_css(browser, ".approval button.approve")[0].click()
    wait(browser, lambda: "job.finished" in events_of(browser), "job.finished")
    wait(browser, lambda: "bash approved by person" in text(browser, "#approvals"),
         "the answer shown")
    [answered] = daemon.http.get(f"/v1/jobs/{job}/approvals").json()["approvals"]
    assert answered["answer"]["approved"] is True and answered["answer"]["note"] == "fine, go on"
    assert daemon.http.get(f"/v1/jobs/{job}").json()["outcome"] == "success"
    assert csp_violations(browser) == []
