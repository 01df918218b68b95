"""The runner with a scripted model: the CA → DA correction loop, budgets, and the bus traffic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from gliding.config.loader import load_settings
from gliding.config.task import Task
from gliding.core.checks import FileContains
from gliding.core.messages import Message
from gliding.daemon.compose import JobHandle, run_job
from gliding.llm.port import LLMRequest
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call


def make_task(tmp: Path, **changes: Any) -> Task:
    values: dict[str, Any] = {
        "goal": "Create hello.txt and HELLO.txt as the checks say.",
        "workspace": tmp / "ws",
        "model": None,
        "pipeline": ("PA", "DA", "CA", "AA"),
        "turns": {"PA": 2, "DA": 4, "CA": 3, "AA": 2},
        "prompt_tokens": None,
        "cost_usd": None,
        "wall_time_s": None,
        "checks": (FileContains("hello.txt", "Hello, World!"),
                   FileContains("HELLO.txt", "HELLO, WORLD!")),
        "source": tmp / "task.yaml",
    }
    values.update(changes)
    return Task(**values)


def run(task: Task, llm: ScriptedLLM, tmp: Path, on_event: Any = None,
        **settings: Any) -> JobHandle:
    overrides = {"data_dir": str(tmp / "data"), **settings}
    return anyio.run(lambda: run_job(task, load_settings(overrides=overrides, env={}), llm=llm,
                                     on_event=on_event))


def copy_expected_from_evidence(request: LLMRequest) -> Message:
    """A DA that reads CA's evidence and writes exactly the expected text it finds there."""
    text = request.messages[-1].content
    assert "Evidence from CA" in text, text
    line = next(x for x in text.splitlines() if x.strip().startswith("expected text:"))
    expected = line.split("expected text:", 1)[1].strip()
    path = "HELLO.txt" if expected.isupper() else "hello.txt"
    return call("write_file", path=path, content=expected)


def test_correction_loop_carries_the_expected_value_back_to_da(tmp_path: Path) -> None:
    llm = ScriptedLLM({
        "PA": [call("finish", steps=["write hello.txt", "write HELLO.txt"])],
        "DA": [call("write_file", path="hello.txt", content="Hello, World!"),
               call("write_file", path="HELLO.txt", content="Hello, World!"),  # not uppercased
               call("finish", summary="wrote both"),
               copy_expected_from_evidence,
               call("finish", summary="fixed HELLO.txt")],
        "CA": [call("run_checks"), call("finish", notes="HELLO.txt is wrong"),
               call("run_checks"), call("finish", notes="all pass")],
        "AA": [call("finish", decision="done", report="both files verified")],
    })
    handle = run(make_task(tmp_path), llm, tmp_path)
    report = handle.report
    assert report.outcome == "success"
    assert report.corrections == 1 and report.cycles == 1
    assert (tmp_path / "ws" / "HELLO.txt").read_text() == "HELLO, WORLD!"
    assert [r.status for r in report.checks] == ["pass", "pass"]
    assert report.checks_verified_by == "CA"
    # the second DA assignment led with the remedy of the failed check
    da_prompts = [r.messages[-1].content for r in llm.requests if r.meta["role"] == "DA"
                  and r.messages[-1].role == "user"]
    assert da_prompts[-1].startswith('Goal: Write the file HELLO.txt containing the text '
                                     '"HELLO, WORLD!"')


def test_corrections_stop_at_the_bound_and_aa_may_only_escalate_or_retry(tmp_path: Path) -> None:
    never_fixed = [call("write_file", path="hello.txt", content="nope"),
                   call("finish", summary="done")] * 3
    aa_options: list[list[str]] = []

    def aa(request: LLMRequest) -> Message:
        finish = next(t for t in request.tools if t.name == "finish")
        aa_options.append(finish.parameters["properties"]["decision"]["enum"])
        return call("finish", decision="escalate", report="cannot fix")

    llm = ScriptedLLM({
        "PA": [call("finish", steps=["write"])],
        "DA": never_fixed,
        "CA": [call("run_checks"), call("finish", notes="fail")] * 3,
        "AA": [aa],
    })
    task = make_task(tmp_path, checks=(FileContains("hello.txt", "Hello, World!"),))
    report = run(task, llm, tmp_path, **{"scheduler.max_corrections": 2}).report
    assert report.corrections == 2
    assert report.outcome == "escalated"
    assert aa_options == [["another_cycle", "escalate"]]


def test_ca_cannot_finish_before_running_the_checks(tmp_path: Path) -> None:
    seen_tools: list[list[str]] = []

    def ca_first(request: LLMRequest) -> Message:
        seen_tools.append([t.name for t in request.callable_tools or ()])  # callable now
        return call("run_checks")

    llm = ScriptedLLM({
        "DA": [call("write_file", path="hello.txt", content="Hello, World!"),
               call("finish", summary="ok")],
        "CA": [ca_first, call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="ok")],
    })
    task = make_task(tmp_path, pipeline=("DA", "CA", "AA"),
                     checks=(FileContains("hello.txt", "Hello, World!"),))
    report = run(task, llm, tmp_path).report
    assert report.outcome == "success"
    assert "finish" not in seen_tools[0] and "run_checks" in seen_tools[0]


def test_prompt_token_budget_stops_the_job(tmp_path: Path) -> None:
    llm = ScriptedLLM({"PA": [call("finish", steps=["x"])],
                       "DA": [call("list_dir", path=".")] * 10})
    task = make_task(tmp_path, prompt_tokens=300)
    report = run(task, llm, tmp_path).report
    assert report.outcome == "budget_exceeded"
    assert "prompt token budget" in (report.stopped or "")
    assert report.total.prompt_tokens >= 300


def test_turn_cap_ends_a_role_and_the_job_goes_on(tmp_path: Path) -> None:
    llm = ScriptedLLM({
        "DA": [call("list_dir", path=".")] * 2,  # never finishes: capped at 2 turns
        "CA": [call("run_checks"), call("finish", notes="missing")],
        "AA": [call("finish", decision="escalate", report="nothing written")],
    })
    task = make_task(tmp_path, pipeline=("DA", "CA", "AA"), turns={"PA": 1, "DA": 2, "CA": 2,
                                                                   "AA": 1},
                     checks=(FileContains("hello.txt", "Hello, World!"),))
    report = run(task, llm, tmp_path, **{"scheduler.max_corrections": 0}).report
    da = next(r for r in report.roles if r.role == "DA")
    assert da.turns == 2
    assert report.outcome == "escalated"


def test_a_tool_outside_the_role_is_refused_and_archived(tmp_path: Path) -> None:
    llm = ScriptedLLM({
        "PA": [call("write_file", path="x.txt", content="PA may not write"),
               call("finish", steps=["write hello"])],
        "DA": [call("write_file", path="hello.txt", content="Hello, World!"),
               call("finish", summary="ok")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="ok")],
    })
    task = make_task(tmp_path, checks=(FileContains("hello.txt", "Hello, World!"),))
    handle = run(task, llm, tmp_path)
    assert handle.report.outcome == "success"
    assert not (tmp_path / "ws" / "x.txt").exists()
    job = handle.report.job
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        refused = archive.get(f"gliding://job/{job}/result/PA-1-0")
        assert b"not available to this role" in (refused.content or b"")
        turn = json.loads(archive.get(f"gliding://job/{job}/turn/PA/1").content or b"")
        assert "write_file" not in turn["tools"]
        assert archive.verify() == []
        assert len(archive.calls()) == len(llm.requests)


def test_plain_text_replies_are_nudged_and_counted(tmp_path: Path) -> None:
    from gliding.testing import text

    llm = ScriptedLLM({
        "DA": [text("I will now write the file."),
               call("write_file", path="hello.txt", content="Hello, World!"),
               call("finish", summary="ok")],
    })
    task = make_task(tmp_path, pipeline=("DA",),
                     checks=(FileContains("hello.txt", "Hello, World!"),))
    report = run(task, llm, tmp_path).report
    assert report.outcome == "success"
    assert report.checks_verified_by == "runner"
    assert report.roles[0].turns == 3
    assert "Reply with one tool call" in llm.requests[1].messages[-1].content


def test_wall_time_budget_cancels_a_running_job(tmp_path: Path) -> None:
    llm = ScriptedLLM({"DA": [call("bash", command="sleep 20; touch late.txt"),
                              call("finish", summary="x")]})
    task = make_task(tmp_path, pipeline=("DA",), wall_time_s=1.0, checks=())
    report = run(task, llm, tmp_path).report
    # cancelled while the command ran: what the command does after its sleep had not happened
    assert not (tmp_path / "ws" / "late.txt").exists()
    assert report.outcome == "budget_exceeded"
    assert "wall time" in (report.stopped or "")


def test_turns_tool_results_and_files_land_in_the_job_graph(tmp_path: Path) -> None:
    from gliding.daemon.runtime import blackboard_path
    from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
    from gliding.memory.board.vocabulary import NS

    llm = ScriptedLLM({"DA": [
        call("write_file", path="pkg/calc.py", content="def add(a, b):\n    return a + b\n"),
        call("grep", pattern="def "),
        call("read_file", path="missing.py"),
        call("finish", summary="wrote pkg/calc.py"),
    ]})
    task = make_task(tmp_path, pipeline=("DA",), checks=(FileContains("pkg/calc.py", "def add"),))
    handle = run(task, llm, tmp_path)
    assert handle.report.outcome == "success"
    g = f"gliding://job/{handle.report.job}"
    board = OxigraphBlackboard.open(blackboard_path(tmp_path / "data"))
    try:
        rows = board.query(f"PREFIX gl: <{NS}> SELECT ?s ?t WHERE {{ ?s a ?t }}", graph=g)
        by_type: dict[str, set[str]] = {}
        for r in rows:
            by_type.setdefault(r["t"].iri.rsplit("#", 1)[1], set()).add(r["s"].iri)
        assert by_type["Turn"] == {f"{g}/turn/DA/{n}" for n in (1, 2, 3, 4)}
        assert by_type["ToolResult"] == {f"{g}/result/DA-{n}-0" for n in (1, 2, 3)}
        assert by_type["File"] == {f"{g}/file/pkg%2Fcalc.py", f"{g}/file/missing.py"}
        assert by_type["Symbol"] == {f"{g}/symbol/pkg%2Fcalc.py#add"}
        linked = board.query(f"""PREFIX gl: <{NS}>
            SELECT ?r ?tool ?status ?turn WHERE {{
              ?r a gl:ToolResult ; gl:name ?tool ; gl:status ?status ; gl:derivedFrom ?turn ;
                 gl:mentions <{g}/file/pkg%2Fcalc.py> . ?turn a gl:Turn }} ORDER BY ?r""",
                             graph=g)
        assert [(r["tool"], r["status"], r["turn"].iri) for r in linked] == [
            ("write_file", "ok", f"{g}/turn/DA/1"), ("grep", "ok", f"{g}/turn/DA/2")]
        failed = board.query(f"""PREFIX gl: <{NS}> SELECT ?text WHERE {{
            <{g}/result/DA-3-0> gl:status "error" ; gl:mentions ?e . ?e a gl:Error ;
            gl:text ?text }}""", graph=g)
        assert len(failed) == 1 and "missing.py" in failed[0]["text"]
    finally:
        board.close()
