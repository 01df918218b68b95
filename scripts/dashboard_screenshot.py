"""Make the README's dashboard screenshot (docs/dashboard.png) from a real job, the same way
every time.

    .venv/bin/python scripts/dashboard_screenshot.py --out docs/dashboard.png

In a temporary directory it writes a workspace ``project`` holding a generated log of a
service (``app.log``, about 25 KB: a day of requests, a disk filling up, the service dying),
starts a real ``gliding daemon`` on a free loopback port with its own data directory there
(default settings, no embedding model, nothing from the network), and submits a scripted PA →
DA → CA → AA job (``scripted:replies.yaml``): DA reads the whole log, greps it, counts its
levels, lists its free-space readings and timestamps (seven bash commands, most with large
outputs), then writes ``report.md``; CA runs the checks (the report names the cause; the log
really says so); AA accepts. Large tool results leave the prompt as a summary and an IRI, and
the window compacts once, so the chart shows the prompt Gliding built well under the naive
one, with the compaction marked.

Once the job has finished it logs into the dashboard in headless Chromium through a one-time
link (``POST /v1/dashboard/links``), opens the job, waits for its chart, blackboard and
checks, and saves a full-page screenshot (PNG, palette-reduced with Pillow when it is
installed). It prints the chart's summary line, the numbers the README quotes. The daemon is
stopped and the directory removed whether or not that worked.

Selenium uses the system's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``
(``scripts/setup.sh`` installs them) and never downloads anything (``SE_OFFLINE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
START_S = 90  # the daemon listening
JOB_S = 180  # the job finishing
PAGE_S = 60  # one thing the page should show
WINDOW = (1440, 2200)
LOG_LINES = 320
SETTINGS = {  # env of the daemon: no embedding model, nothing from the network
    "HF_HUB_OFFLINE": "1",
    "GLIDING_MEMORY__VECTORS__ENABLED": "false",
}
TASK = {
    "goal": "The service in app.log stopped in the night. Find out from the log why, and "
            "write the cause and the evidence (line numbers) to report.md.",
    "workspace": "project",
    "pipeline": ["PA", "DA", "CA", "AA"],
    "budgets": {"turns": {"PA": 2, "DA": 12, "CA": 2, "AA": 2}},
    "checks": [
        {"file_contains": {"path": "report.md", "text": "No space left on device"}},
        {"command": {"run": "grep -q 'No space left on device' app.log", "timeout_s": 30}},
    ],
}
REPLIES = {
    "PA": [{"finish": {"steps": [
        "Read app.log and see where it stops",
        "Find the errors and what they have in common",
        "Write the cause and its evidence to report.md"]}}],
    "DA": [
        {"bash": {"command": "wc -l app.log && cat app.log"}},
        {"bash": {"command": "grep -n -E 'WARN|ERROR|FATAL' app.log"}},
        {"bash": {"command": "awk '{print $3}' app.log | sort | uniq -c"}},
        {"bash": {"command": "grep -o 'free=[0-9]*MB' app.log | uniq -c"}},
        {"bash": {"command": "cut -d' ' -f1 app.log"}},
        {"bash": {"command": "tail -n 40 app.log"}},
        {"bash": {"command": "grep -n 'No space left' app.log"}},
        {"write_file": {"path": "report.md", "content": (
            "# Why the service stopped\n\n"
            "The disk filled up: free space fell from 8,990 MB to 0 over the night, writes "
            "failed with `No space left on device` (the ERROR lines near the end of "
            "app.log), and the service exited after them.\n")}},
        {"finish": {"summary": "the disk filled up (No space left on device); report.md "
                               "gives the line numbers"}},
    ],
    "CA": [{"run_checks": {}},
           {"finish": {"notes": "report.md names the cause; app.log says so"}}],
    "AA": [{"finish": {"decision": "done",
                       "report": "cause found: the disk filled up; report.md has the evidence"}}],
}


def write_log(path: Path) -> None:
    """About 25 KB of a service's day, the same every time: requests, a disk filling up
    (``free=`` falling), warnings, then the writes failing and the service exiting."""
    lines = []
    for k in range(LOG_LINES):
        at = f"2026-12-03T{k * 270 // 3600:02d}:{k * 270 // 60 % 60:02d}:{k * 270 % 60:02d}Z"
        free = max(0, (LOG_LINES - 10 - k) * 29)
        if not free:
            lines.append(f"{at} app ERROR write /var/cache/app/chunk-{k}.bin failed: "
                         f"[Errno 28] No space left on device (disk free={free}MB)")
        elif free < 1000 and k % 3 == 0:
            lines.append(f"{at} app WARN disk nearly full: free={free}MB on /var/cache")
        else:
            lines.append(f"{at} app INFO GET /api/items/{k * 7919 % 10007} 200 "
                         f"{(k * 37) % 90 + 4}ms disk free={free}MB")
    lines.append("2026-12-03T23:59:30Z app FATAL exiting after 10 failed writes")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class Daemon:
    """``gliding daemon`` on a free loopback port, its data directory ``<root>/data``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "daemon.log"
        gliding = Path(sys.executable).with_name("gliding")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDING_")} | SETTINGS
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(gliding), "daemon", "--data-dir", "data", "--port", "0"], cwd=root,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            info = self._wait_listening()
        except BaseException:
            self._end()
            raise
        self.url = str(info["url"])
        token = (root / "data" / "daemon.token").read_text(encoding="ascii").strip()
        self.http = httpx.Client(base_url=self.url, trust_env=False, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"})

    def _wait_listening(self) -> dict[str, Any]:
        info_file = self.root / "data" / "daemon.json"
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited: {self.log.read_text()}")
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(info_file.read_text())
                if info.get("pid") == self.proc.pid:
                    return dict(info)
            time.sleep(0.1)
        raise RuntimeError(f"no daemon after {START_S} s: {self.log.read_text()}")

    def run_job(self) -> str:
        """Submit the job and wait for it to end; its id. Raises if it did not succeed."""
        (self.root / "replies.yaml").write_text(yaml.safe_dump(REPLIES, sort_keys=False),
                                                encoding="utf-8")
        answer = self.http.post("/v1/jobs", json={
            "task": yaml.safe_dump(TASK, sort_keys=False),
            "model": "scripted:replies.yaml", "base_dir": str(self.root)})
        answer.raise_for_status()
        job = str(answer.json()["job"])
        deadline = time.monotonic() + JOB_S
        while time.monotonic() < deadline:
            status = self.http.get(f"/v1/jobs/{job}").json()
            if status["state"] not in ("queued", "running"):
                if status.get("outcome") != "success":
                    raise RuntimeError(f"job {job} ended {status}")
                return job
            time.sleep(0.5)
        raise RuntimeError(f"job {job} still running after {JOB_S} s")

    def login_link(self) -> str:
        answer = self.http.post("/v1/dashboard/links")
        answer.raise_for_status()
        return self.url + str(answer.json()["path"])

    def stop(self) -> None:
        self.http.close()
        self._end()

    def _end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def browser(tmp: Path) -> Iterator[Any]:
    """Headless Chromium; its profile and other temporary files in ``tmp`` (Chromium leaves
    some behind after quitting)."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps"):
        options.add_argument(arg)
    service = Service(executable_path=str(CHROMEDRIVER), env=os.environ | {"TMPDIR": str(tmp)})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(PAGE_S)
        driver.set_script_timeout(PAGE_S)
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, what: Callable[[], Any], message: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, PAGE_S, poll_frequency=0.2).until(lambda _: what(), message)


def count(driver: Any, selector: str) -> int:
    return int(driver.execute_script(
        "return document.querySelectorAll(arguments[0]).length", selector))


def shoot(daemon: Daemon, job: str, out: Path) -> str:
    """Log in, open ``job``, save the page to ``out``; the chart's summary line."""
    with browser(daemon.root) as driver:
        driver.get(daemon.login_link())
        wait(driver, lambda: count(driver, "#jobs"), "the dashboard after logging in")
        driver.get(f"{daemon.url}/#job={job}")
        wait(driver, lambda: count(driver, "#tokens svg circle.dot.naive"), "the chart")
        wait(driver, lambda: count(driver, "#board svg .node"), "the blackboard graph")
        wait(driver, lambda: count(driver, "#checks .check"), "the checks")
        time.sleep(1.0)  # the graph's layout and the last events settle
        height = int(driver.execute_script(  # the page's, plus the window's own bars
            "return document.documentElement.scrollHeight + outerHeight - innerHeight"))
        driver.set_window_size(WINDOW[0], max(WINDOW[1], height))
        time.sleep(0.5)
        driver.save_screenshot(str(out))
        return str(driver.execute_script(
            "return document.getElementById('tokens-total').textContent"))


def shrink(png: Path) -> None:
    """Reduce the PNG to a 256-colour palette when Pillow is installed: the page is flat
    colours, so the file gets smaller and nothing visible is lost."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        reduced = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    reduced.save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"),
                        help="the PNG to write (default: docs/dashboard.png)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        print(f"{', '.join(missing)} missing: scripts/setup.sh installs them", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="gliding-"))
    daemon: Daemon | None = None
    try:
        (root / "project").mkdir()
        write_log(root / "project" / "app.log")
        daemon = Daemon(root)
        job = daemon.run_job()
        shot = root / "dashboard.png"
        line = shoot(daemon, job, shot)
        shrink(shot)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, args.out)
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.out}: job {job}; {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
