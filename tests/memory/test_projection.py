"""L3 projection: every role's frame matches data the live path wrote, the briefing fits its
budget, views are cached and dropped when a node they used changes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.roles import role_names
from gliding.config.task import load_task
from gliding.context.tokens import TokenCounter
from gliding.daemon.compose import run_job
from gliding.daemon.runtime import blackboard_path
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.projection import Projector, frame_query
from gliding.memory.board.vocabulary import VocabularyError
from gliding.testing import ScriptedLLM, call

TASK = """goal: Create hello.txt and HELLO.txt
pipeline: [PA, DA, CA, AA]
checks:
  - file_contains: {path: hello.txt, text: Hello}
  - file_contains: {path: HELLO.txt, text: HELLO}
"""
COUNT = TokenCounter().count


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A job run through the real runtime with a scripted team: one check fails."""
    tmp = tmp_path_factory.mktemp("job")
    (tmp / "task.yaml").write_text(TASK)
    llm = ScriptedLLM({
        "PA": [call("finish", steps=["write hello.txt", "write HELLO.txt"])],
        "DA": [call("write_file", path="hello.txt", content="Hello"),
               call("finish", summary="only one file")],
        "CA": [call("run_checks"), call("finish", notes="HELLO.txt missing")],
        "AA": [call("finish", decision="escalate", report="HELLO.txt is missing")],
    })
    settings = load_settings(overrides={"data_dir": str(tmp / "data"),
                                        "scheduler.max_corrections": 0,
                                        "scheduler.max_cycles": 1}, env={})
    handle = anyio.run(lambda: run_job(load_task(tmp / "task.yaml"), settings, llm=llm))
    return tmp / "data", handle.report.job


@pytest.mark.parametrize("role", role_names())
def test_every_frame_matches_data_the_live_path_wrote(live: tuple[Path, str], role: str) -> None:
    data, job = live
    board = OxigraphBlackboard.open(blackboard_path(data))
    try:
        triples = board.construct(frame_query(role, f"gliding://job/{job}"))
        assert triples, f"the {role} frame matched nothing"
        text = Projector(board, COUNT).briefing(role, f"gliding://job/{job}", 400)
        assert text and COUNT(text) <= 400
    finally:
        board.close()


def test_da_sees_the_failed_check_and_the_artifacts(live: tuple[Path, str]) -> None:
    data, job = live
    board = OxigraphBlackboard.open(blackboard_path(data))
    try:
        text = Projector(board, COUNT).briefing("DA", f"gliding://job/{job}", 1000)
    finally:
        board.close()
    assert "status=fail" in text and "HELLO.txt" in text
    assert "Artifact <" in text and "path=hello.txt" in text


def test_views_are_cached_and_invalidated_by_a_write(live: tuple[Path, str]) -> None:
    data, job = live
    board = OxigraphBlackboard.open(blackboard_path(data))
    try:
        projector = Projector(board, COUNT)
        graph = f"gliding://job/{job}"
        first = projector.briefing("CA", graph, 1000)
        assert projector.briefing("CA", graph, 1000) == first and projector.hits == 1
        step = f"{graph}/plan/1/step/1"
        assert projector.invalidate(f"{graph}/unrelated") == 0
        assert projector.invalidate(f"{graph}/unrelated", "Person") == 0
        assert projector.invalidate(step) == 1
        board.put({"@id": step, "@type": "Step", "text": "write hello.txt", "status": "done",
                   "partOf": f"{graph}/plan/1"}, graph=graph)
        assert "status=done" in projector.briefing("CA", graph, 1000)
        assert projector.misses == 2
    finally:
        board.close()


def test_a_tight_budget_cuts_whole_lines() -> None:
    board = OxigraphBlackboard.in_memory()
    graph = "gliding://job/j"
    for i in range(30):
        board.put({"@id": f"{graph}/plan/1/step/{i}", "@type": "Step", "text": f"step {i} " * 5,
                   "partOf": f"{graph}/plan/1"}, graph=graph)
    text = Projector(board, COUNT).briefing("CA", graph, 100)
    assert 0 < COUNT(text) <= 100
    assert all(line.startswith("Step <") for line in text.splitlines())


def test_frames_always_have_a_limit_and_refuse_hostile_graphs() -> None:
    assert "LIMIT 200" in frame_query("DA", "gliding://job/j")
    with pytest.raises(VocabularyError):
        frame_query("DA", "gliding://job/j> } ; DROP ALL ; <x")


def test_ingestion_invalidates_the_views_that_used_a_node(tmp_path: Path) -> None:
    from gliding.memory.archive.store import Archive
    from gliding.memory.board.nodes import DirectWriter, JobNodeStore
    from gliding.memory.ingest.ingestor import Ingestor
    from gliding.testing.blocking import Blocking

    board = OxigraphBlackboard.in_memory()
    projector = Projector(board, COUNT)
    with Archive.open(tmp_path, "j") as archive:
        store = JobNodeStore(board, archive, "j")
        store.listen(projector.written)  # as the composition root wires it
        ingestor = Blocking(Ingestor(board, archive, "j", DirectWriter(store)))
        ingestor.job_node("goal")
        ingestor.plan(1, ["first", "second"], None)
        before = projector.briefing("CA", "gliding://job/j", 500)
        assert "first" in before
        ingestor.plan(1, ["first, revised", "second"], None)
        after = projector.briefing("CA", "gliding://job/j", 500)
        assert "first, revised" in after and projector.misses == 2


def test_the_runtime_hands_each_role_its_briefing(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    llm = ScriptedLLM({
        "PA": [call("finish", steps=["write hello.txt", "write HELLO.txt"])],
        "DA": [call("write_file", path="hello.txt", content="Hello"),
               call("finish", summary="one written"),
               call("write_file", path="HELLO.txt", content="HELLO"),
               call("finish", summary="both written")],
        "CA": [call("run_checks"), call("finish", notes="HELLO.txt missing"),
               call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="ok")],
    })
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data")}, env={})
    handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings, llm=llm))
    assert handle.report.outcome == "success"
    systems: dict[str, list[str]] = {}
    for r in llm.requests:
        systems.setdefault(r.meta["role"], []).append(r.messages[0].content)
    assert "Blackboard" not in systems["PA"][0]  # nothing recorded before the plan
    assert "Blackboard" not in systems["DA"][0]  # first attempt: no check report yet
    correction = systems["DA"][-1]
    assert "Blackboard (what the team recorded so far)" in correction
    assert "status=fail" in correction and "HELLO.txt" in correction
    assert "write HELLO.txt" in systems["CA"][0] and "Step <" in systems["AA"][0]


def test_ca_is_briefed_with_each_plan_step_done_once_da_finished_the_plan(
        tmp_path: Path) -> None:
    """One DA session works the whole plan (the explicit pipeline): its finishing turn marks
    every step of the newest plan done, and CA's briefing shows it (before, the steps said
    ``status=todo`` after DA had finished them)."""
    (tmp_path / "task.yaml").write_text(TASK)
    llm = ScriptedLLM({
        "PA": [call("finish", steps=["write hello.txt", "write HELLO.txt"])],
        "DA": [call("write_file", path="hello.txt", content="Hello"),
               call("write_file", path="HELLO.txt", content="HELLO"),
               call("finish", summary="both written")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="ok")],
    })
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data")}, env={})
    handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings, llm=llm))
    assert handle.report.outcome == "success"

    ca = next(r for r in llm.requests if r.meta["role"] == "CA").messages[0].content
    steps = [x for x in ca.splitlines() if x.startswith("Step <")]
    assert len(steps) == 2
    assert all("status=done" in line and "doneBy" not in line for line in steps)


def test_a_new_node_of_a_framed_type_invalidates_an_empty_view() -> None:
    board = OxigraphBlackboard.in_memory()
    graph = "gliding://job/j"
    projector = Projector(board, COUNT)
    assert projector.briefing("DA", graph, 300) == ""
    iri = f"{graph}/check/1.0/1"
    board.put({"@id": iri, "@type": "CheckReport", "status": "fail", "about": [graph],
               "partOf": graph}, graph=graph)
    assert projector.invalidate(iri, "CheckReport") == 1
    assert "status=fail" in projector.briefing("DA", graph, 300)


def test_a_role_is_briefed_with_the_facts_around_its_task_shaped_by_its_frame(
        tmp_path: Path) -> None:
    from gliding.agents.loop import ToolRecord
    from gliding.memory.archive.store import Archive
    from gliding.memory.board.nodes import DirectWriter, JobNodeStore
    from gliding.memory.ingest.ingestor import Ingestor
    from gliding.testing.blocking import Blocking

    board = OxigraphBlackboard.in_memory()
    job = "gliding://job/j"
    page = ("Fleet notes\nThe refit of vessel NX-2207 finished on 14 March.\n"
            "Berth 12 takes ships up to 210 metres long.\n")
    with Archive.open(tmp_path, "j") as archive:
        store = JobNodeStore(board, archive, "j")
        projector = Projector(board, COUNT)
        store.listen(projector.written)
        ing = Blocking(Ingestor(board, archive, "j", DirectWriter(store)))
        ing.tool_result(ToolRecord("read_file", {"path": "fleet.md"}, True, page,
                                   f"{job}/result/DA.1-1-0"), f"{job}/turn/DA.1/1")
        focus = "Find when the refit of NX-2207 finished"
        da = projector.around("DA", job, focus, 300)
        assert da.splitlines() == [
            f"- The refit of vessel NX-2207 finished on 14 March. (read_file fleet.md, "
            f"{job}/result/DA.1-1-0#L2)"]
        assert projector.around("AA", job, focus, 300) == ""  # AA's role file has no frame
        assert projector.around("DA", job, "nothing of the sort here", 300) == ""
        assert projector.around("DA", job, focus, 300) == da and projector.hits == 1
        ing.tool_result(ToolRecord("bash", {"command": "grep refit log.txt"}, True,
                                   "log.txt: the refit of NX-2207 cost 4100 credits",
                                   f"{job}/result/DA.1-2-0"), f"{job}/turn/DA.1/2")
        again = projector.around("DA", job, focus, 300)  # a new fact dropped the cached view
        assert len(again.splitlines()) == 2 and "4100 credits" in again
        tight = projector.around("DA", job, focus, COUNT(again.splitlines()[0]) + 1)
        assert len(tight.splitlines()) == 1


def test_framing_never_loads_a_document() -> None:
    from pyld import jsonld

    from gliding.memory.board.projection import frame_nodes

    nodes = [{"@id": "gliding://job/j/fact/a/1", "@type": ["https://gliding.dev/ns/v1#Fact"]}]
    with pytest.raises(jsonld.JsonLdError) as caught:
        frame_nodes(nodes, {"@context": "https://example.org/context.jsonld", "@type": "Fact"})
    causes, error = [], caught.value
    while error is not None:  # pyld wraps the loader's error: our refusal is at the bottom
        causes.append(str(error))
        error = getattr(error, "cause", None) or error.__cause__
    assert "a briefing never loads a remote document" in causes[-1]
