"""The daemon's HTTP API through httpx's ASGI transport over a running service (scripted model,
default sandbox): the token, JSON errors, refusals that queue nothing, the OpenAPI document,
the event stream up to job.finished, status, cancel and reading an archived IRI back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gliding.daemon.api import MAX_BODY_BYTES, build_app, is_loopback
from tests.daemon.daemon_support import TASK, replies, serving, write_replies

pytestmark = pytest.mark.timeout(300)
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HELLO = """\
DA:
  - write_file: {path: hello.txt, content: "Hello, daemon! ✓\\n"}
  - bash: {command: "cp hello.txt trace.txt"}
  - finish: {summary: wrote hello.txt}
"""

Test = Callable[[httpx.AsyncClient, Path], Awaitable[None]]


@asynccontextmanager
async def api(tmp: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(tmp) as service:
        app = await anyio.to_thread.run_sync(build_app, service, TOKEN)  # CPU, off the loop
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


def run(tmp: Path, test: Test) -> None:
    async def main() -> None:
        async with api(tmp) as client:
            await test(client, tmp)

    anyio.run(main)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "hint"}
    return dict(body["error"])


def sse(text: str) -> list[dict[str, Any]]:
    """The data of each event of an SSE body."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].strip() for line in block.split("\n") if line.startswith("data:")]
        if data:
            out.append(json.loads("\n".join(data)))
    return out


def test_every_endpoint_but_health_wants_the_token(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, tmp: Path) -> None:
        health = await client.get("/v1/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"),
                             ("GET", "/v1/jobs/20260101-000000-aaaaaa"),
                             ("GET", "/v1/jobs/20260101-000000-aaaaaa/events"),
                             ("POST", "/v1/jobs/20260101-000000-aaaaaa/cancel"),
                             ("POST", "/v1/jobs/20260101-000000-aaaaaa/steer"),
                             ("GET", "/v1/iri?iri=gliding://job/x"), ("GET", "/v1/openapi.json")):
            missing = await client.request(method, path)
            assert error_of(missing, 401)["code"] == "auth.failed"
            assert missing.headers["www-authenticate"] == "Bearer"
            wrong = await client.request(method, path, headers={
                "Authorization": f"Bearer {TOKEN}x"})
            assert error_of(wrong, 401)["message"] == "wrong token"
            basic = await client.request(method, path, headers={"Authorization": "Basic eDp5"})
            error_of(basic, 401)

    run(tmp_path, test)


def test_bad_submissions_are_json_errors_and_queue_nothing(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())

    async def test(client: httpx.AsyncClient, tmp: Path) -> None:
        bad = await client.post("/v1/jobs", headers=AUTH, json={
            "task": "goal: x\nbudgets: {turns: -1}\n", "name": "t.yaml", "model": model})
        error = error_of(bad, 400)
        assert error["code"] == "task.invalid"
        assert error["message"].startswith("t.yaml:2: budgets.turns")
        no_task = await client.post("/v1/jobs", headers=AUTH, json={"name": "t.yaml"})
        assert "task" in error_of(no_task, 422)["message"]
        extra = await client.post("/v1/jobs", headers=AUTH, json={"task": "goal: x", "x": 1})
        error_of(extra, 422)
        not_json = await client.post("/v1/jobs", headers={**AUTH, "content-type":
                                                          "application/json"}, content=b"{")
        error_of(not_json, 422)
        huge = await client.post("/v1/jobs", headers=AUTH,
                                 json={"task": "x" * (MAX_BODY_BYTES + 1)})
        assert error_of(huge, 413)["code"] == "request.too_large"

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for _ in range(MAX_BODY_BYTES // 16_000 + 2):
                yield b"x" * 16_000

        chunked = await client.post("/v1/jobs", headers={**AUTH, "content-type":
                                                        "application/json"}, content=chunks())
        assert error_of(chunked, 413)["code"] == "request.too_large"
        listed = await client.get("/v1/jobs", headers=AUTH)
        assert listed.json() == {"total": 0, "offset": 0, "jobs": []}
        assert error_of(await client.get("/v1/jobs/20260101-000000-aaaaaa", headers=AUTH),
                        404)["code"] == "not_found"
        assert error_of(await client.get("/v1/jobs/bad%20id", headers=AUTH), 400)["code"] == \
            "iri.invalid"
        error_of(await client.get("/v1/nothing", headers=AUTH), 404)

    run(tmp_path, test)
    assert not (tmp_path / "workspace").exists()


def test_a_steer_needs_a_message_a_known_job_and_a_running_one(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, tmp: Path) -> None:
        path = "/v1/jobs/20260101-000000-aaaaaa/steer"
        for body in ({}, {"message": ""}, {"message": "x" * 4001}, {"message": 3}):
            error_of(await client.post(path, json=body, headers=AUTH), 422)
        missing = await client.post(path, json={"message": "go"}, headers=AUTH)
        assert error_of(missing, 404)["code"]
        model = write_replies(tmp, "r.yaml", replies())
        job = (await client.post("/v1/jobs", json={"task": TASK.format(workspace="ws"),
                                                   "model": model, "base_dir": str(tmp)},
                                 headers=AUTH)).json()["job"]
        while (await client.get(f"/v1/jobs/{job}", headers=AUTH)).json()["state"] in (
                "queued", "running"):
            await anyio.sleep(0.05)
        done = await client.post(f"/v1/jobs/{job}/steer", json={"message": "go"}, headers=AUTH)
        assert "only a running or paused job" in error_of(done, 409)["message"]

    run(tmp_path, test)


def test_the_openapi_document_has_every_path(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, tmp: Path) -> None:
        doc = (await client.get("/v1/openapi.json", headers=AUTH)).json()
        assert set(doc["paths"]) == {"/v1/health", "/v1/jobs", "/v1/jobs/{job}",
                                     "/v1/jobs/{job}/events", "/v1/jobs/{job}/cancel",
                                     "/v1/jobs/{job}/resume", "/v1/jobs/{job}/steer", "/v1/iri",
                                     "/v1/jobs/{job}/approvals", "/v1/jobs/{job}/fork",
                                     "/v1/jobs/{job}/interrupt",
                                     "/v1/jobs/{job}/approvals/{approval}",
                                     "/v1/schedules", "/v1/schedules/{name}",
                                     "/v1/jobs/{job}/board", "/v1/dashboard/links",
                                     "/login", "/logout"}
        submit = doc["paths"]["/v1/jobs"]["post"]
        assert submit["responses"]["201"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Submitted"}
        assert "ErrorOut" in doc["components"]["schemas"]
        assert "HTTPBearer" in doc["components"]["securitySchemes"]

    run(tmp_path, test)


def test_a_job_from_submit_to_its_events_status_and_artifact(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "hello.yaml", HELLO)

    async def test(client: httpx.AsyncClient, tmp: Path) -> None:
        submitted = await client.post("/v1/jobs", headers=AUTH, json={
            "task": TASK.format(workspace="ws"), "name": "task.yaml", "model": model,
            "base_dir": str(tmp)})
        assert submitted.status_code == 201, submitted.text
        job = submitted.json()["job"]
        assert submitted.json() == {"job": job, "state": "queued"}

        stream = await client.get(f"/v1/jobs/{job}/events", headers=AUTH)
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = sse(stream.text)
        assert events[0]["event"] == "job.queued" and events[-1]["event"] == "job.finished"
        assert events[-1]["data"] == {"outcome": "success"}
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert "turn" in [e["event"] for e in events]

        later = await client.get(f"/v1/jobs/{job}/events", headers={**AUTH,
                                                                    "Last-Event-ID": "2"},
                                 params={"follow": "false"})
        assert sse(later.text) == events[2:]

        for _ in range(500):  # the state follows job.finished a moment later
            status = (await client.get(f"/v1/jobs/{job}", headers=AUTH)).json()
            if status["state"] == "finished":
                break
            await anyio.sleep(0.02)
        assert (status["state"], status["outcome"], status["runs"]) == ("finished", "success", 1)
        assert status["progress"]["turns_by_role"] == {"DA": 3}
        assert status["progress"]["tokens"]["prompt"] > 0
        assert status["workspace"] == str(tmp / "ws")

        listed = (await client.get("/v1/jobs", headers=AUTH)).json()
        assert [j["job"] for j in listed["jobs"]] == [job] and listed["total"] == 1

        iri = f"gliding://job/{job}/artifact/hello.txt"
        page = (await client.get("/v1/iri", headers=AUTH, params={"iri": iri})).json()
        assert (page["content"], page["encoding"]) == ("Hello, daemon! ✓\n", "utf-8")
        part = (await client.get("/v1/iri", headers=AUTH,
                                 params={"iri": iri, "offset": 7, "limit": 7})).json()
        assert (part["content"], part["next_offset"]) == ("daemon!", 14)
        bad = await client.get("/v1/iri", headers=AUTH, params={"iri": "http://x"})
        assert "not a Gliding IRI" in error_of(bad, 400)["message"]
        unknown = await client.get("/v1/iri", headers=AUTH, params={
            "iri": f"gliding://job/{job}/artifact/nope.txt"})
        error_of(unknown, 404)

        again = await client.post(f"/v1/jobs/{job}/cancel", headers=AUTH)
        assert error_of(again, 409)["code"] == "job.state"
        resumed = await client.post(f"/v1/jobs/{job}/resume", headers=AUTH)
        error_of(resumed, 409)

    run(tmp_path, test)


def test_only_loopback_hosts_count_as_local() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.1.2.3"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2", "example.org"))
