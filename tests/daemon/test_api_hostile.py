"""The daemon's API under bad input, as an attacker holding the token (or a web page that
re-points its own name at 127.0.0.1) would send it: every bad value is a 4xx answered at once,
nothing is queued, a bug is one bounded log line without any frame's locals, and the ``Host``
header must name this daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from gliding.daemon.api import served_app
from gliding.daemon.hosts import host_name
from gliding.daemon.service import MAX_OFFSET, JobService
from tests.daemon.daemon_support import TASK, replies, serving, write_replies

pytestmark = pytest.mark.timeout(300)
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HANG_S = 30.0  # hang protection only: a refusal takes milliseconds, no speed is tested


@asynccontextmanager
async def api(tmp: Path, base_url: str = "http://127.0.0.1", **daemon: Any
              ) -> AsyncIterator[tuple[httpx.AsyncClient, JobService]]:
    """The app as ``serve`` runs it: an error it let out would be raised here."""
    async with serving(tmp, **daemon) as service:
        app = await anyio.to_thread.run_sync(served_app, service, TOKEN)  # CPU, off the loop
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client, service


def refused(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "hint"} and "Traceback" not in error["message"]
    return dict(error)


async def ask(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
              ) -> httpx.Response:
    """One request with the token; an answer that waits on something (a queue, a job) fails."""
    with anyio.fail_after(HANG_S):
        return await client.request(method, url, headers={**AUTH, **kwargs.pop("headers", {})},
                                    **kwargs)


def test_absurd_numbers_are_400_at_once(tmp_path: Path) -> None:
    """offset=10**30 reached SQLite (OverflowError: a 500 and seconds of traceback)."""
    huge = str(10**30)
    model = write_replies(tmp_path, "r.yaml", replies())

    async def main() -> None:
        async with api(tmp_path) as (client, _service):
            job = (await ask(client, "POST", "/v1/jobs", json={
                "task": TASK.format(workspace="ws"), "model": model,
                "base_dir": str(tmp_path)})).json()["job"]
            for url in (f"/v1/jobs?offset={huge}", "/v1/jobs?offset=1e30",
                        f"/v1/jobs?offset={MAX_OFFSET + 1}",
                        f"/v1/iri?iri=gliding://job/{job}/artifact/x&offset={huge}",
                        f"/v1/jobs/{job}/events?after={huge}"):
                assert refused(await ask(client, "GET", url))["code"] == "usage"
            for last in ("9" * 5000, str(MAX_OFFSET + 1)):
                stream = await ask(client, "GET", f"/v1/jobs/{job}/events?follow=false",
                                   headers={"Last-Event-ID": last})
                assert "Last-Event-ID" in refused(stream)["message"]
            listed = await ask(client, "GET", f"/v1/jobs?offset={MAX_OFFSET}")
            assert listed.json() == {"total": 1, "offset": MAX_OFFSET, "jobs": []}

    anyio.run(main)


def test_a_bug_is_one_bounded_log_line_without_locals(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An error the API does not expect answers 500 at once, and logs one line whose
    traceback is plain text, bounded, and holds no frame's locals."""
    secret = "LOCAL-VALUE-" + "s" * 50

    async def broken(self: JobService, limit: int, offset: int) -> Any:
        mine = secret  # a local of the failing frame: must not reach the log
        raise ValueError("boom\n" + "x" * 1_000_000 + mine[:0])

    monkeypatch.setattr(JobService, "jobs", broken)

    async def main() -> None:
        async with api(tmp_path) as (client, _service):
            with capture_logs() as logs:
                response = await ask(client, "GET", "/v1/jobs")
            error = refused(response, 500)
            assert error["message"] == "internal error: ValueError"
            crashed = [entry for entry in logs if entry["event"] == "daemon.api.crashed"]
            assert len(crashed) == 1 and "exc_info" not in crashed[0]
            text = crashed[0]["exception"]
            assert "Traceback" in text and "ValueError: boom" in text
            assert len(text) < 10_000 and secret not in text and "locals" not in text
            assert crashed[0]["error"] == "ValueError: boom"

    anyio.run(main)


def test_low_daemon_host_header(tmp_path: Path) -> None:
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 sends
    ``Host: evil.example``; the daemon answers it nothing (not even health)."""
    async def main() -> None:
        async with api(tmp_path) as (client, _service):
            for host in ("evil.example", "evil.example:8765", "localhost.evil.example",
                         "127.0.0.1.nip.io"):
                for url in ("/v1/health", "/v1/jobs"):
                    error = refused(await client.get(url, headers={**AUTH, "Host": host}))
                    assert error["code"] == "request.host", host
            for host in ("127.0.0.1:8765", "localhost", "LOCALHOST:1", "[::1]:8765",
                         "10.1.2.3"):
                answer = await client.get("/v1/jobs", headers={**AUTH, "Host": host})
                assert answer.status_code == 200, (host, answer.text)
        async with api(tmp_path / "named", host="gliding.lan") as (client, _service):
            named = await client.get("/v1/jobs", headers={**AUTH, "Host": "gliding.lan:80"})
            assert named.status_code == 200, named.text
            refused(await client.get("/v1/jobs", headers={**AUTH, "Host": "other.lan"}))

    anyio.run(main)
    assert [host_name(h) for h in ("[::1]:80", "Example.ORG.", "h:1", "::1")] == [
        "::1", "example.org", "h", "::1"]


def test_low_bad_submission_is_400(tmp_path: Path) -> None:
    """What used to be queued and fail when it ran is refused at submission, and nothing is
    queued: a workspace in the data directory, a local model that is no GGUF file, a task's
    own MCP server taking a host variable or at a link-local address."""
    model = write_replies(tmp_path, "r.yaml", replies())
    (tmp_path / "not-a-model.gguf").write_text("root:x:0:0:root:/root:/bin/bash\n")

    async def main() -> None:
        async with api(tmp_path) as (client, service):
            data = service.data_dir
            cases = [
                ({"task": TASK.format(workspace=data / "jobs"), "model": model},
                 "inside the data directory"),
                ({"task": TASK.format(workspace=data), "model": model},
                 "inside the data directory"),
                ({"task": TASK.format(workspace="ws"), "model": "local:/etc/passwd"},
                 "/etc/passwd is not a GGUF file"),
                ({"task": TASK.format(workspace="ws"),
                  "model": f"local:{tmp_path / 'not-a-model.gguf'}"}, "is not a GGUF file"),
                ({"task": TASK.format(workspace="ws"), "model": "local:/nonexistent/m.gguf"},
                 "does not exist"),
                ({"task": TASK.format(workspace="ws"), "model": "local:/tmp"},
                 "is not a regular file"),
                ({"task": TASK.format(workspace="ws") + "model: local:/etc/passwd\n"},
                 "is not a GGUF file"),
                ({"task": TASK.format(workspace="ws") + "mcp_servers:\n  s:\n"
                  "    command: /bin/true\n    pass_env: [GLIDING_DAEMON_TOKEN]\n",
                  "model": model}, "GLIDING_DAEMON_TOKEN may not be passed"),
                ({"task": TASK.format(workspace="ws") + "mcp_servers:\n  s:\n"
                  "    url: http://169.254.169.254/mcp\n", "model": model},
                 "169.254.169.254 is a link-local"),
            ]
            for body, expected in cases:
                error = refused(await ask(client, "POST", "/v1/jobs",
                                          json={**body, "base_dir": str(tmp_path)}))
                assert expected in error["message"], (body, error)
                assert "root:x" not in error["message"]
            listed = await ask(client, "GET", "/v1/jobs")
            assert listed.json()["total"] == 0

    anyio.run(main)
