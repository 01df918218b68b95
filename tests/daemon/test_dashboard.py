"""The web dashboard's server side through httpx's ASGI transport (no browser): the login page,
the token form and one-time links, the session cookie's flags, CSRF on cookie-authorised
changes, CSP on every response, the Host check, pages free of the token and of anything from
elsewhere, the OpenAPI document covering what the page's script calls, the blackboard endpoint
and the measured ``turn`` events. ``test_dashboard_browser.py`` drives the page in Chromium."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from gliding.daemon.api import build_app
from gliding.daemon.dashboard import CSP, CSRF_HEADER, LINK_S, SESSION_COOKIE, STATIC, Sessions
from gliding.daemon.service import JobService
from tests.daemon.daemon_support import TASK, events_of, replies, serving, write_replies

pytestmark = pytest.mark.timeout(300)
TOKEN = "t0ken-for-dashboard-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # an XML namespace name: never fetched

Test = Callable[[httpx.AsyncClient, JobService, Path], Awaitable[None]]


@asynccontextmanager
async def api(tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, JobService]]:
    async with serving(tmp) as service:
        app = await anyio.to_thread.run_sync(build_app, service, TOKEN)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8765") as client:
            yield client, service


def run(tmp: Path, test: Test) -> None:
    async def main() -> None:
        async with api(tmp) as (client, service):
            await test(client, service, tmp)

    anyio.run(main)


async def log_in(client: httpx.AsyncClient) -> str:
    """Log ``client`` in with the token form; the page's CSRF token."""
    answer = await client.post("/login", data={"token": TOKEN})
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    return csrf_of((await client.get("/")).text)


def csrf_of(page: str) -> str:
    found = re.search(r'<meta name="gliding-csrf" content="([^"]+)">', page)
    assert found, page[:500]
    return found.group(1)


def test_the_token_form_logs_in_with_a_strict_httponly_cookie(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        first = await client.get("/")
        assert first.status_code == 200 and first.headers["content-type"].startswith("text/html")
        assert 'name="token"' in first.text and "gliding-csrf" not in first.text
        wrong = await client.post("/login", data={"token": TOKEN + "x"})
        assert wrong.status_code == 401 and "Wrong token" in wrong.text
        crowded = await client.post("/login", content="&".join(f"k{i}=v" for i in range(9)),
                                    headers={"content-type": "application/x-www-form-urlencoded"})
        assert crowded.status_code == 401
        assert SESSION_COOKIE not in wrong.headers.get("set-cookie", "")
        good = await client.post("/login", data={"token": TOKEN})
        assert good.status_code == 303
        flags = {part.strip().lower() for part in good.headers["set-cookie"].split(";")}
        assert {"httponly", "samesite=strict", "path=/"} <= flags
        page = await client.get("/")
        assert page.status_code == 200 and csrf_of(page.text)
        assert TOKEN not in page.text and page.headers["cache-control"] == "no-store"
        assert (await client.get("/v1/jobs")).json()["total"] == 0  # the cookie authorises
        out = await client.post("/logout", headers={CSRF_HEADER: csrf_of(page.text)})
        assert out.status_code == 204
        assert "gliding-csrf" not in (await client.get("/")).text
        assert (await client.get("/v1/jobs")).status_code == 401

    run(tmp_path, test)


def test_a_one_time_link_logs_in_once(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        assert (await client.post("/v1/dashboard/links")).status_code == 401
        made = await client.post("/v1/dashboard/links", headers=AUTH)
        assert made.status_code == 201
        path = made.json()["path"]
        assert re.fullmatch(r"/login\?once=[A-Za-z0-9_-]{40,}", path)
        used = await client.get(path)
        assert used.status_code == 303 and SESSION_COOKIE in used.headers["set-cookie"]
        assert csrf_of((await client.get("/")).text)
        client.cookies.clear()
        again = await client.get(path)
        assert again.status_code == 401 and "used already or has expired" in again.text
        assert "set-cookie" not in again.headers
        guessed = await client.get("/login?once=" + "A" * 43)
        assert guessed.status_code == 401

    run(tmp_path, test)


def test_links_expire_and_sessions_end() -> None:
    now = [1000.0]
    sessions = Sessions(lambda: now[0])
    once, expires = sessions.link()
    assert expires == 1000.0 + LINK_S
    now[0] += LINK_S
    assert not sessions.redeem(once)
    session = sessions.open()
    assert sessions.csrf_of(session) is not None and sessions.csrf_of("x") is None
    now[0] += 12 * 3600
    assert sessions.csrf_of(session) is None


def test_a_cookie_session_changes_nothing_without_the_csrf_header(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())

    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        csrf = await log_in(client)
        body = {"task": TASK.format(workspace="ws"), "model": model}
        missing = await client.post("/v1/jobs", json=body)
        assert missing.status_code == 403 and missing.json()["error"]["code"] == "auth.csrf"
        forged = await client.post("/v1/jobs", json=body, headers={CSRF_HEADER: csrf + "x"})
        assert forged.status_code == 403
        assert (await client.post("/logout")).status_code == 403
        assert (await client.get("/v1/jobs")).json()["total"] == 0  # nothing was queued
        taken = await client.post("/v1/jobs", json=body, headers={CSRF_HEADER: csrf})
        assert taken.status_code == 201
        job = taken.json()["job"]
        await events_of(service, job)
        listed = await client.get("/v1/jobs")  # reading needs no header
        assert [j["job"] for j in listed.json()["jobs"]] == [job]
        answered = await client.post(f"/v1/jobs/{job}/approvals/DA-1",
                                     json={"approve": True})
        assert answered.status_code == 403
        client.cookies.clear()
        by_token = await client.post(f"/v1/jobs/{job}/resume", headers=AUTH)  # no CSRF needed
        assert by_token.status_code != 403

    run(tmp_path, test)


def test_every_response_has_the_csp_and_the_host_check_applies(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        await log_in(client)
        for path in ("/", "/login?once=x", "/static/app.js", "/static/app.css",
                     "/static/login.css", "/static/favicon.svg", "/static/nothing",
                     "/v1/health", "/v1/jobs"):
            answer = await client.get(path)
            assert answer.headers["content-security-policy"] == CSP, path
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "same-origin"
        assert (await client.get("/static/index.html")).status_code == 404  # only by name
        assert (await client.get("/static/..%2Fapi.py")).status_code == 404
        rebound = await client.get("/", headers={"Host": "evil.example:8765"})
        assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "request.host"
        cross = await client.post("/login", data={"token": TOKEN},
                                  headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403 and "set-cookie" not in cross.headers
        fetched = await client.post("/login", data={"token": TOKEN},
                                    headers={"Sec-Fetch-Site": "cross-site"})
        assert fetched.status_code == 403
        same = await client.post("/login", data={"token": TOKEN},
                                 headers={"Origin": "http://127.0.0.1:8765"})
        assert same.status_code == 303

    run(tmp_path, test)


def test_the_pages_load_nothing_from_elsewhere_and_run_no_inline_code() -> None:
    for path in sorted(STATIC.iterdir()):
        text = path.read_text(encoding="utf-8").replace(SVG_NAMESPACE, "")
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), path.name
        assert "@import" not in text and "url(" not in text, path.name
        if path.suffix == ".html":
            assert not re.search(r"<script(?![^>]*\bsrc=)", text), path.name
            assert not re.search(r"\son[a-z]+=|\sstyle=|<style", text, re.I), path.name
        if path.suffix == ".js":
            assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write"
                                 r"|\beval\(|new Function", text), path.name


def test_the_openapi_document_covers_what_the_page_calls(tmp_path: Path) -> None:
    script = (STATIC / "app.js").read_text(encoding="utf-8")
    used = {("get", "/v1/jobs", '"/v1/jobs?limit'), ("get", "/v1/jobs/{job}", "jobPath("),
            ("get", "/v1/jobs/{job}/events", "/events?after="),
            ("get", "/v1/jobs/{job}/approvals", "/approvals`"),
            ("post", "/v1/jobs/{job}/approvals/{approval}", "/approvals/${"),
            ("get", "/v1/jobs/{job}/board", "/board${"), ("get", "/v1/iri", "/v1/iri?iri="),
            ("post", "/logout", '"/logout"')}

    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        document = (await client.get("/v1/openapi.json", headers=AUTH)).json()
        for method, path, in_script in used:
            assert in_script in script, in_script
            assert method in document["paths"].get(path, {}), path
        assert "/login" in document["paths"] and "/v1/dashboard/links" in document["paths"]
        schemes = document["components"]["securitySchemes"]
        assert schemes["APIKeyCookie"]["name"] == SESSION_COOKIE

    run(tmp_path, test)


def test_turn_events_measure_the_prompt_and_the_board_is_a_graph(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2))

    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        job = (await client.post("/v1/jobs", headers=AUTH, json={
            "task": TASK.format(workspace="ws"), "model": model})).json()["job"]
        turns = [e["data"] for e in await events_of(service, job) if e["event"] == "turn"]
        assert len(turns) == 3
        for turn in turns:
            assert turn["built_tokens"] > 0 and turn["naive_tokens"] >= turn["built_tokens"]
            assert turn["cached_source"] == "simulated" and turn["compactions"] == 0
            assert turn["cached_tokens"] == 0  # a prompt under 1,024 tokens is never cached
        assert turns[0]["built_tokens"] < turns[-1]["built_tokens"]
        whole = (await client.get(f"/v1/jobs/{job}/board", headers=AUTH)).json()
        graph = f"gliding://job/{job}"
        assert whole["graph"] == graph and whole["node"] is None
        kinds = {n["iri"]: n["type"] for n in whole["nodes"]}
        assert kinds[graph] == "Job" and kinds[f"{graph}/turn/DA/1"] == "Turn"
        assert {"source": f"{graph}/turn/DA/1", "target": graph,
                "property": "partOf"} in whole["edges"]
        around = (await client.get(f"/v1/jobs/{job}/board", headers=AUTH,
                                   params={"node": f"{graph}/turn/DA/1"})).json()
        assert around["node"] == f"{graph}/turn/DA/1" and around["properties"]
        assert all(graph + "/turn/DA/1" in (e["source"], e["target"]) for e in around["edges"])
        missing = await client.get("/v1/jobs/20260101-000000-aaaaaa/board", headers=AUTH)
        assert missing.status_code == 404
        bad = await client.get(f"/v1/jobs/{job}/board", headers=AUTH,
                               params={"node": "not an iri>"})
        assert bad.status_code == 400

    run(tmp_path, test)


def test_a_session_cannot_renew_itself_and_a_new_login_ends_the_old_one(tmp_path: Path) -> None:
    async def test(client: httpx.AsyncClient, service: JobService, tmp: Path) -> None:
        csrf = await log_in(client)
        old = client.cookies.get(SESSION_COOKIE)
        renewed = await client.post("/v1/dashboard/links", headers={CSRF_HEADER: csrf})
        assert renewed.status_code == 401 and "needs the daemon's token" in renewed.text
        assert (await client.post("/v1/dashboard/links", headers=AUTH)).status_code == 201
        await log_in(client)  # again, in the same browser
        assert client.cookies.get(SESSION_COOKIE) != old
        client.cookies.clear()
        stale = await client.get("/v1/jobs", headers={"Cookie": f"{SESSION_COOKIE}={old}"})
        assert stale.status_code == 401

    run(tmp_path, test)


def test_a_500_carries_the_security_headers_too(tmp_path: Path) -> None:
    from gliding.daemon.api import served_app

    async def main() -> None:
        async with serving(tmp_path) as service:
            async def broken(job: str) -> dict:
                raise RuntimeError("a bug")

            service.status = broken  # type: ignore[method-assign]
            app = await anyio.to_thread.run_sync(served_app, service, TOKEN)
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1:8765") as client:
                answer = await client.get("/v1/jobs/20260101-000000-aaaaaa", headers=AUTH)
            assert answer.status_code == 500
            assert answer.headers["content-security-policy"] == CSP
            assert answer.headers["x-content-type-options"] == "nosniff"

    anyio.run(main)
