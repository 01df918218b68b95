"""``gliding mcp`` as MCP clients see it: the SDK's own client over stdio against
``python -m gliding.mcp.server`` in a real subprocess, and over streamable HTTP on 127.0.0.1;
in process only what a subprocess cannot arrange (a blackboard another holder keeps); and the
pure helpers the answers go through (UTF-8 pages, size bounds) as properties.

Jobs run on the scripted model (a replies file: ``--model scripted:replies.yaml``), so each is
deterministic and takes well under a second (the slow one sleeps per reply on purpose).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp_types import CallToolResult

from gliding.config.loader import load_settings
from gliding.daemon.reading import utf8_page
from gliding.daemon.runtime import blackboard_path
from gliding.mcp.server import MAX_ANSWER_CHARS, _bounded, build_server
from gliding.mcp.service import Service
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard

# The server's environment: what StdioServerParameters passes (PATH, HOME, ...) and these; no
# developer GLIDING_* variable leaks in. No embedding model: recall is words and graph.
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "GLIDING_MEMORY__VECTORS__ENABLED": "false"}
CONTENT = "Hello, World! ✓ ünïcode\n"  # multi-byte characters for the page boundaries
TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: [PA, DA, CA, AA]
checks:
  - file_exists: hello.txt
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""
REPLIES = """\
PA:
  - finish: {steps: ["Write hello.txt with write_file"]}
DA:
  - write_file: {path: hello.txt, content: "Hello, World! ✓ ünïcode\\n"}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: all checks pass}
AA:
  - finish: {decision: done, report: hello.txt is as asked}
"""
TIMEOUT_S = 100  # for one answer or one job: seconds on an idle machine, far more on a loaded one
TOOLS = {"run_job", "submit_job", "job_status", "list_jobs", "read_iri", "recall",
         "knowledge_query"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The server's working directory: a task file, its replies and a slow variant."""
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    (tmp_path / "slow.yaml").write_text("latency_s: 0.4\n" + REPLIES, encoding="utf-8")
    return tmp_path


@asynccontextmanager
async def stdio_session(cwd: Path, env: dict[str, str] | None = None
                        ) -> AsyncIterator[Client]:
    """An SDK client on a fresh ``python -m gliding.mcp.server --data-dir data`` in ``cwd``
    (``env`` added to its environment); the server's stderr goes to ``cwd/server.log``."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "gliding.mcp.server", "--data-dir", "data"],
                                   cwd=cwd, env={**SERVER_ENV, **(env or {})})
    with (cwd / "server.log").open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog),
                          read_timeout_seconds=TIMEOUT_S) as c:
            yield c


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a call that succeeded (its text says the same)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return result.content[0].text  # type: ignore[union-attr]


async def read_all(client: Client, iri: str, limit: int) -> tuple[bytes, list[dict[str, Any]]]:
    """Every page of ``iri`` from offset 0, joined back into bytes."""
    pages: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = ok(await client.call_tool("read_iri", {"iri": iri, "offset": offset,
                                                      "limit": limit}))
        pages.append(page)
        offset = page["next_offset"]
    data = b"".join(p["content"].encode("utf-8") if p["encoding"] == "utf-8"
                    else base64.b64decode(p["content"]) for p in pages)
    return data, pages


# --- stdio ------------------------------------------------------------------------------------


@pytest.mark.heavy
def test_stdio_lists_every_tool_with_its_schema_and_hints(workdir: Path) -> None:
    async def main() -> None:
        async with stdio_session(workdir) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for name in ("job_status", "list_jobs", "read_iri", "recall", "knowledge_query"):
                hints = tools[name].annotations
                assert hints is not None and hints.read_only_hint is True, name
            assert tools["read_iri"].input_schema["required"] == ["iri"]
            assert tools["read_iri"].input_schema["properties"]["limit"]["maximum"] == 32_000
            assert {"task_yaml", "task_path", "model"} <= set(
                tools["run_job"].input_schema["properties"])
            assert "\n" not in (tools["run_job"].description or "")

    anyio.run(main)
    assert not (workdir / "data").exists()  # listing writes nothing, opens no blackboard


@pytest.mark.heavy
def test_stdio_run_job_reports_then_status_read_back_recall_and_query(workdir: Path) -> None:
    async def main() -> None:
        seen: list[tuple[float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None
                              ) -> None:
            seen.append((progress, message))

        async with stdio_session(workdir) as client:
            report = ok(await client.call_tool(
                "run_job", {"task_path": "task.yaml", "model": "scripted:replies.yaml"},
                progress_callback=on_progress))
            job = report["job"]
            assert report["outcome"] == "success", report
            assert report["why"] == "every check passed (verified by CA)"
            assert [c["status"] for c in report["checks"]] == ["pass", "pass"]
            assert report["total"]["prompt_tokens"] > 0 < report["total"]["completion_tokens"]
            assert [r["role"] for r in report["roles"]] == ["PA", "DA", "CA", "AA"]
            (artifact,) = report["artifacts"]
            assert artifact == {"path": "hello.txt",
                                "iri": f"gliding://job/{job}/artifact/hello.txt"}
            messages = [m for _, m in seen]
            assert "[CA] all checks passed → accept" in messages, messages
            assert [v for v, _ in seen] == sorted({v for v, _ in seen})  # increasing

            status = ok(await client.call_tool("job_status", {"job": job}))
            assert (status["status"], status["outcome"]) == ("success", "success")
            assert status["running"] is False and status["finished"] is True
            assert status["turns"] == 6
            assert status["turns_by_role"] == {"PA": 1, "DA": 2, "CA": 2, "AA": 1}
            assert status["tokens"]["prompt"] == report["total"]["prompt_tokens"]
            assert status["report"]["job"] == job

            listed = ok(await client.call_tool("list_jobs", {}))
            assert [j["job"] for j in listed["jobs"]] == [job]

            # read_iri: byte-exact, whatever the page size; pages end on character boundaries
            expected = (workdir / "workspace" / "hello.txt").read_bytes()
            assert expected == CONTENT.encode("utf-8")
            for limit in (1, 5, 16, 16_000):
                data, pages = await read_all(client, artifact["iri"], limit)
                assert data == expected, (limit, pages)
                assert all(p["length"] > 0 for p in pages)
                # a character fits a page of 4 bytes: then every page is text
                assert all(p["encoding"] == "utf-8" for p in pages) is (limit >= 4), pages
            first = ok(await client.call_tool("read_iri", {"iri": artifact["iri"]}))
            assert first["sha256"] == hashlib.sha256(expected).hexdigest()
            assert (first["size"], first["next_offset"]) == (len(expected), None)
            inside = CONTENT.encode("utf-8").index("✓".encode()) + 1  # inside a character
            cut = ok(await client.call_tool("read_iri", {"iri": artifact["iri"],
                                                         "offset": inside, "limit": 4}))
            assert cut["encoding"] == "base64"
            assert base64.b64decode(cut["content"]) == expected[inside: inside + 4]
            turn = f"gliding://job/{job}/turn/DA/1"
            data, _ = await read_all(client, turn, 700)
            with Archive.open(workdir / "data", job, create=False) as archive:
                assert data == archive.get(turn).content  # what gliding memory show prints

            # a budget that holds the small job whole: which item a tight one keeps first
            # turns on ties that are not this test's point
            recalled = ok(await client.call_tool("recall", {"query": "hello.txt written",
                                                            "budget_tokens": 4000}))
            assert recalled["items"] > 0 and recalled["tokens"] > 0
            assert f"gliding://job/{job}" in recalled["ids"]
            assert "Create hello.txt" in recalled["text"]

            rows = ok(await client.call_tool("knowledge_query", {"sparql": (
                "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g")}))
            assert rows["form"] == "SELECT"
            assert [r["g"] for r in rows["rows"]] == [f"gliding://job/{job}"]
            triples = rows["rows"][0]["n"]
            assert triples > 0
            artifacts = ok(await client.call_tool("knowledge_query", {
                "sparql": "SELECT ?s WHERE { GRAPH ?g { ?s a gl:Artifact } }", "limit": 5}))
            assert artifacts["rows"] == [{"s": artifact["iri"]}]  # gl: is predeclared
            asked = ok(await client.call_tool("knowledge_query", {
                "sparql": "ASK { GRAPH ?g { ?s ?p ?o } }"}))
            assert asked["rows"] == [{"boolean": True}]

            for update in ("INSERT DATA { GRAPH <gliding://job/x> { <a:b> <a:c> <a:d> } }",
                           "DELETE WHERE { GRAPH ?g { ?s ?p ?o } }",
                           "CLEAR ALL", "DROP ALL", "LOAD <http://example.org/x.ttl>",
                           "SELECT * WHERE { SERVICE <http://example.org/> { ?s ?p ?o } }",
                           "\\u0049NSERT DATA { <a:b> <a:c> <a:d> }"):
                text = error_text(await client.call_tool("knowledge_query", {"sparql": update}))
                assert "refused" in text, (update, text)
            again = ok(await client.call_tool("knowledge_query", {"sparql": (
                "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }")}))
            assert again["rows"] == [{"n": triples}]  # nothing was written or removed

    anyio.run(main)


@pytest.mark.heavy
def test_stdio_submit_job_answers_at_once_and_job_status_follows_it(workdir: Path) -> None:
    async def main() -> None:
        async with stdio_session(workdir) as client:
            submitted = ok(await client.call_tool(
                "submit_job", {"task_path": "task.yaml", "model": "scripted:slow.yaml"}))
            job = submitted["job"]
            assert submitted["status"] == "running"
            # the answer came while the job runs (6 replies of 0.4 s each)
            early = ok(await client.call_tool("job_status", {"job": job}))
            assert (early["status"], early["running"], early["finished"]) == (
                "running", True, False), early
            assert early["turns"] < 6 and early["outcome"] is None and "report" not in early
            # the event loop is free while the job runs: other tools answer meanwhile
            listed = ok(await client.call_tool("list_jobs", {}))
            assert listed["jobs"][0] | {"job": job, "status": "running",
                                        "goal": 'Create hello.txt containing "Hello, World!"',
                                        "model": f"scripted:{workdir / 'slow.yaml'}",
                                        "resumes": 0} == listed["jobs"][0]  # gliding jobs
            other = ok(await client.call_tool("submit_job", {  # a second job, alongside
                "task_yaml": TASK + "workspace: other\n", "model": "scripted:slow.yaml"}))
            seen, together = {early["turns"]}, False
            statuses = {job: early}
            with anyio.fail_after(TIMEOUT_S):
                while not all(s["finished"] for s in statuses.values()) or len(statuses) < 2:
                    await anyio.sleep(0.1)
                    for one in (job, other["job"]):
                        statuses[one] = ok(await client.call_tool("job_status", {"job": one}))
                    seen.add(statuses[job]["turns"])
                    together |= all(s["running"] and s["turns"] > 0
                                    for s in statuses.values())
            for status in statuses.values():
                assert status["status"] == "success", status
                assert status["report"]["outcome"] == "success"
            assert len(seen) > 2, seen  # turns were seen growing
            assert together  # both jobs had turns done while both still ran

    anyio.run(main)
    assert (workdir / "other" / "hello.txt").read_text(encoding="utf-8") == CONTENT


@pytest.mark.heavy
def test_stdio_bad_arguments_are_tool_errors_and_the_server_goes_on(workdir: Path) -> None:
    (workdir / "a-dir").mkdir()
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("read_iri", {"iri": "http://example.org/x"}, "not a Gliding IRI"),
        ("read_iri", {"iri": "gliding://job/20261129-113758-a1b2c3"}, "names a job, not"),
        ("read_iri", {"iri": "gliding://job/../../etc/artifact/passwd"}, "bad job id"),
        ("read_iri", {"iri": "gliding://job/20261129-113758-a1b2c3/artifact/x"},
         "has no archive"),
        ("read_iri", {"iri": "gliding://job/x/artifact/y", "offset": -1}, "offset"),
        ("read_iri", {"iri": "gliding://job/x/artifact/y", "limit": 10**9}, "limit"),
        ("read_iri", {}, "iri"),
        ("job_status", {"job": "20261129-113758-a1b2c3"}, "no job '20261129-113758-a1b2c3'"),
        ("job_status", {"job": "../etc"}, "bad job id"),
        ("run_job", {}, "give exactly one of task_yaml"),
        ("run_job", {"task_yaml": TASK, "task_path": "task.yaml"}, "give exactly one of"),
        ("run_job", {"task_path": "nope.yaml"}, "task file not found"),
        ("run_job", {"task_path": "a-dir"}, "is a directory"),
        ("run_job", {"task_yaml": "goal: [unclosed\n"}, "task_yaml:2:1: invalid YAML"),
        ("submit_job", {"task_yaml": "goal: x\nbudgets: {turns: -1}\n"}, "task_yaml:2"),
        ("submit_job", {"task_yaml": "- a list\n"}, "must be a mapping"),
        ("submit_job", {"task_yaml": "x" * 100_001}, "longer than 100000"),
        ("run_job", {"task_path": "task.yaml", "model": "scripted:"}, "needs its replies file"),
        ("run_job", {"task_path": "task.yaml", "model": "scripted:missing.yaml"},
         "missing.yaml"),
        ("recall", {"query": "anything"}, "no blackboard in"),
        ("knowledge_query", {"sparql": "SELECT * WHERE { ?s ?p ?o }"}, "no blackboard in"),
        ("knowledge_query", {"sparql": "DROP ALL"}, "refused"),
        ("knowledge_query", {"sparql": "SELECT ?s WHERE {", "limit": 0}, "limit"),
        ("no_such_tool", {}, "no_such_tool"),
    ]

    async def main() -> None:
        async with stdio_session(workdir) as client:
            for tool, args, expected in cases:
                text = error_text(await client.call_tool(tool, args))
                assert expected in text, (tool, args, text)
                assert "Traceback" not in text
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            assert ok(await client.call_tool("list_jobs", {}))["count"] == 0

    anyio.run(main)
    log = (workdir / "server.log").read_text(encoding="utf-8")
    assert "Traceback" not in log, log
    assert not (workdir / "data" / "jobs").exists()  # no bad call left a job behind
    assert not (workdir / "workspace").exists()


@pytest.mark.heavy
def test_stdio_a_failed_job_is_a_report_and_one_that_cannot_start_an_error(
        workdir: Path) -> None:
    (workdir / "pa-only.yaml").write_text(REPLIES.split("DA:")[0], encoding="utf-8")

    async def failed() -> dict[str, Any]:
        async with stdio_session(workdir) as client:
            return ok(await client.call_tool(  # DA has no reply: its first model call fails
                "run_job", {"task_path": "task.yaml", "model": "scripted:pa-only.yaml"}))

    async def unstartable() -> tuple[str, dict[str, Any]]:
        async with stdio_session(workdir, {"PATH": str(workdir / "no-bin")}) as client:
            text = error_text(await client.call_tool(  # bubblewrap is not on its PATH
                "submit_job", {"task_path": "task.yaml", "model": "scripted:replies.yaml"}))
            return text, ok(await client.call_tool("list_jobs", {}))

    report = anyio.run(failed)
    assert report["outcome"] == "error" and report["why"].startswith("stopped by an error")
    assert "no reply for DA turn 1" in report["stopped"], report
    shutil.rmtree(workdir / "data")
    text, listed = anyio.run(unstartable)
    assert "the command sandbox cannot run: bwrap is not installed" in text, text
    assert listed["count"] == 0  # as if never submitted
    assert not (workdir / "data" / "jobs").exists()


# --- streamable HTTP --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.heavy
def test_streamable_http_on_localhost_runs_an_inline_task_and_stops_on_sigterm(
        workdir: Path) -> None:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.upper().startswith("GLIDING_")},
           **SERVER_ENV}
    with (workdir / "server.log").open("w", encoding="utf-8") as errlog:
        # through the CLI's `gliding mcp`, which becomes `python -m gliding.mcp.server`
        gliding = str(Path(sys.executable).with_name("gliding"))
        proc = subprocess.Popen([gliding, "mcp", "--data-dir", "data", "--transport", "http",
                                 "--port", str(port)],
                                cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=errlog, stderr=errlog)
        try:
            async def main() -> dict[str, Any]:
                with anyio.fail_after(TIMEOUT_S):
                    while True:  # until it listens
                        try:
                            await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                            break
                        except OSError:
                            assert proc.poll() is None, "the server exited"
                            await anyio.sleep(0.1)
                url = f"http://127.0.0.1:{port}/mcp"
                token = (workdir / "data" / "mcp.token").read_text().strip()
                async with httpx.AsyncClient() as http:  # no token, a wrong one: 401
                    for headers in ({}, {"Authorization": "Bearer nope"}):
                        refused = await http.post(url, headers=headers, json={})
                        assert refused.status_code == 401, refused.text
                        assert "bearer token" in refused.json()["error"]["message"]
                bearer = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                async with bearer, Client(streamable_http_client(url, http_client=bearer)
                                          ) as client:
                    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                    inline = TASK + "workspace: inline-ws\n"
                    job = ok(await client.call_tool("submit_job", {
                        "task_yaml": inline, "model": "scripted:replies.yaml"}))["job"]
                    with anyio.fail_after(TIMEOUT_S):
                        while not (status := ok(await client.call_tool(
                                "job_status", {"job": job})))["finished"]:
                            await anyio.sleep(0.1)
                    return status

            status = anyio.run(main)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    log = (workdir / "server.log").read_text(encoding="utf-8")
    assert status["status"] == "success", (status, log)
    # an inline task's relative workspace is taken from the server's working directory
    assert (workdir / "inline-ws" / "hello.txt").read_text(encoding="utf-8") == CONTENT
    assert code == 0, log
    assert f"gliding mcp: serving at http://127.0.0.1:{port}/mcp (bearer token in" in log
    assert (workdir / "data" / "mcp.token").stat().st_mode & 0o777 == 0o600
    assert "Traceback" not in log, log


@pytest.mark.heavy
@pytest.mark.parametrize("busy", [False, True], ids=["out_of_range", "in_use"])
def test_module_entry_refuses_a_port_it_cannot_use_with_exit_2(workdir: Path,
                                                                busy: bool) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1] if busy else 70000
        proc = subprocess.run([sys.executable, "-m", "gliding.mcp.server", "--data-dir",
                               "data", "--transport", "http", "--port", str(port)],
                              cwd=workdir, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env={**os.environ, **SERVER_ENV})
    assert proc.returncode == 2, proc
    expected = (f"error: cannot listen on 127.0.0.1:{port}: Address already in use" if busy
                else "error: port 70000 is out of range")
    assert proc.stderr.startswith(expected), proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr


# --- in process -------------------------------------------------------------------------------


def test_a_blackboard_held_elsewhere_is_a_tool_error_until_it_is_free(tmp_path: Path) -> None:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data"),
                                                "memory.vectors.enabled": False})
    settings.data_dir.mkdir()
    held = OxigraphBlackboard.open(blackboard_path(settings.data_dir))  # as another holder

    async def main() -> tuple[str, dict[str, Any]]:
        service = Service(settings, base_dir=tmp_path)
        async with service.running():
            async with Client(build_server(service)) as client:
                refused = error_text(await client.call_tool("recall", {"query": "x"}))
                held.close()
                return refused, ok(await client.call_tool("recall", {"query": "x"}))

    try:
        refused, recalled = anyio.run(main)
    finally:
        held.close()
    assert "long-term memory is not available" in refused, refused
    assert "hint: ask again once that process has ended" in refused
    assert recalled == {"query": "x", "items": 0, "tokens": 0, "text": "", "ids": []}


# --- the pure helpers -------------------------------------------------------------------------


@given(st.binary(max_size=64) | st.text(max_size=24).map(lambda t: t.encode("utf-8")),
       st.integers(min_value=1, max_value=9))
def test_utf8_pages_join_back_to_the_bytes_and_never_stall(content: bytes, limit: int) -> None:
    out, offset = b"", 0
    while offset < len(content):
        page = content[offset: offset + limit]
        text = utf8_page(page)
        taken = text.encode("utf-8") if text is not None else page
        assert taken and page.startswith(taken) and len(taken) > len(page) - 4
        out += taken
        offset += len(taken)
    assert out == content
    assert utf8_page(b"") == ""


def test_bounded_answers_halve_their_longest_lists_then_clip_strings() -> None:
    turns = [{"summary": f"turn {i} " + "x" * 100} for i in range(1000)]
    answer = _bounded({"job": "j", "turns": turns, "plan": ["a", "b"]})
    assert len(json.dumps(answer, ensure_ascii=False)) <= MAX_ANSWER_CHARS
    assert answer["plan"] == ["a", "b"] and answer["turns"] == turns[: len(answer["turns"])]
    assert answer["turns_left_out"] == 1000 - len(answer["turns"]) > 0
    long = _bounded({"text": "y" * (MAX_ANSWER_CHARS * 2)})
    assert len(long["text"]) == 600 and long["text"].endswith("…")
    small = {"a": [1, 2], "b": "c"}
    assert _bounded(small) is small
