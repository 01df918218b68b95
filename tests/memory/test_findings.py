"""Findings: the lines of a tool result worth remembering become Fact nodes with provenance —
deterministically, without a model — that read back exactly from L0 and that recall shows with
the lines they come from; a ``note`` call states one explicitly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.agents.loop import ToolRecord
from gliding.context.tokens import TokenCounter
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import NS
from gliding.memory.ingest.findings import MAX_FINDINGS, anchors, findings, is_finding
from gliding.memory.ingest.ingestor import Ingestor
from gliding.memory.recall.knowledge import KnowledgeMemory
from gliding.testing.blocking import Blocking

J = "gliding://job/j"
PAGE = """Fleet report
  1\tThe Aurora class ships carry 240 passengers on deck 7.
  2\timport os
  3\tdef load(path):
  4\t    return open(path).read()
  5\t-----------------------------------------
  6\tThe refit of vessel NX-2207 finished on 14 March.
  7\tThe Aurora class ships carry 240 passengers on deck 7.
"""


def test_lines_with_an_anchor_and_words_are_findings_and_code_is_not() -> None:
    found = findings("read_file", PAGE)
    assert [(f.text, f.line_start, f.line_end) for f in found] == [
        ("The Aurora class ships carry 240 passengers on deck 7.", 2, 2),
        ("The refit of vessel NX-2207 finished on 14 March.", 7, 7)]  # the repeat is left out
    assert anchors("order #W0000157 cost 45.20 in v1.2.3, id 3FRNFB") == [
        "#W0000157", "45.20", "v1.2.3", "3FRNFB"]
    for line in ("return load(path, 30)", "x = [1, 2, 3];", "if (n > 10) {", "12 34 56 78",
                 "# coding: utf-8 and 2024", "<div class='a1'>Total 30</div>",
                 "/opt/conda/envs/py39/bin/python", "no anchor in this line at all"):
        assert not is_finding(line), line
    for line in ("FAILED tests/test_calc.py::test_add - assert 20 == 31",
                 "src/app.py:12: TIMEOUT_SECONDS is set to 30 here",
                 "Requirement already satisfied: flake8==4.0.1 in site-packages"):
        assert is_finding(line), line


def test_a_json_result_gives_one_finding_per_record_over_the_lines_it_spans() -> None:
    data = {"reservation_id": "3FRNFB", "cabin": "economy",
            "flights": [{"flight_number": "HAT028", "origin": "MCO", "price": 79},
                        {"flight_number": "HAT277", "origin": "BOS", "price": 64}]}
    found = findings("get_reservation_details", json.dumps(data, indent=2))
    texts = [f.text for f in found]
    assert texts == ["reservation_id=3FRNFB, cabin=economy",
                     "flights[0]: flight_number=HAT028, origin=MCO, price=79",
                     "flights[1]: flight_number=HAT277, origin=BOS, price=64"]
    lines = len(json.dumps(data, indent=2).splitlines())
    assert {(f.line_start, f.line_end) for f in found} == {(1, lines)}
    headed = findings("read_file", "orders.json lines 1-1 of 1\n" + json.dumps(data))
    assert {(f.line_start, f.line_end) for f in headed} == {(2, 2)}


def test_a_long_result_keeps_the_findings_with_most_anchors_in_output_order() -> None:
    lines = [f"item number {n} weighs {n * 3} kilograms" for n in range(10, 200)]
    lines[150] = "status: shipped order W777 box B12 lot L34 code C56 at 99"
    found = findings("bash", "\n".join(lines))
    assert len(found) == MAX_FINDINGS
    assert [f.line_start for f in found] == sorted(f.line_start for f in found)
    assert any(f.line_start == 151 for f in found)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_gives_bounded_findings_that_name_real_lines(text: str) -> None:
    found = findings("bash", text)
    assert len(found) <= MAX_FINDINGS
    count = len(text.splitlines())
    for f in found:
        assert 1 <= f.line_start <= f.line_end <= max(count, 1)
        assert len(f.text) <= 300 and "\n" not in f.text


def setup(tmp: Path, *, reads_lines: bool = False
          ) -> tuple[Any, OxigraphBlackboard, Archive, KnowledgeMemory]:
    """An ingestor writing job j's nodes, and a knowledge memory listening (``reads_lines``:
    it indexes the lines of every result, read back from the archive)."""
    board = OxigraphBlackboard.in_memory()
    archive = Archive.open(tmp, "j")
    store = JobNodeStore(board, archive, "j")
    memory = KnowledgeMemory(board, TokenCounter().count, sources=(
        (lambda iri: archive.get(iri).text()) if reads_lines else None))
    store.listen(memory.observe)
    return Blocking(Ingestor(board, archive, "j", DirectWriter(store))), board, archive, memory


def test_findings_become_facts_that_read_back_exactly_and_recall_shows_with_their_lines(
        tmp_path: Path) -> None:
    ing, board, archive, memory = setup(tmp_path)
    iri = f"{J}/result/DA.1-3-0"
    with archive:
        archive.put(iri, PAGE, kind="result", meta={"tool": "read_file"})
        ing.tool_result(ToolRecord("read_file", {"path": "fleet.md"}, True, PAGE, iri),
                        f"{J}/turn/DA.1/3")
        rows = board.query(f"""PREFIX gl: <{NS}> SELECT ?f ?text ?s ?e ?src WHERE {{
            ?f a gl:Fact ; gl:text ?text ; gl:lineStart ?s ; gl:lineEnd ?e ; gl:source ?src ;
               gl:derivedFrom <{iri}> ; gl:partOf <{iri}> }} ORDER BY ?s""", graph=J)
        assert [(r["f"].iri, r["s"], r["src"]) for r in rows] == [
            (f"{J}/fact/DA.1-3-0/1", 2, "read_file fleet.md"),
            (f"{J}/fact/DA.1-3-0/2", 7, "read_file fleet.md")]
        stored = archive.get(iri).text().splitlines()
        for row in rows:  # the provenance reads back the very line the fact states
            assert row["text"] in " ".join(" ".join(stored[row["s"] - 1: row["e"]]).split())
        packed = memory.recall("When did the refit of the vessel finish?", 200).text
    assert f"[{iri}#L7] read_file fleet.md: The refit of vessel NX-2207 finished on 14 March." \
        in packed.splitlines()


def test_a_note_call_states_a_fact_from_its_turn_and_source(tmp_path: Path) -> None:
    ing, board, archive, memory = setup(tmp_path)
    with archive:
        args = {"text": "The NX-2207 refit is the one that matters", "source": f"{J}/result/x#L7"}
        ing.tool_result(ToolRecord("note", args, True, "noted: The NX-2207 refit",
                                   f"{J}/result/DA.1-4-0"), f"{J}/turn/DA.1/4")
        fact = board.get(f"{J}/fact/DA.1-4-0/0", graph=J)
        assert fact == {"@id": f"{J}/fact/DA.1-4-0/0", "@type": "Fact",
                        "text": "The NX-2207 refit is the one that matters", "partOf": J,
                        "derivedFrom": sorted([f"{J}/result/x", f"{J}/turn/DA.1/4"]),
                        "source": "noted by DA.1"}
        bad = {"text": "a finding with a bad source", "source": "not an iri"}
        ing.tool_result(ToolRecord("note", bad, True, "noted", f"{J}/result/DA.1-5-0"),
                        f"{J}/turn/DA.1/5")
        kept = board.get(f"{J}/fact/DA.1-5-0/0", graph=J)
        assert kept is not None and kept["derivedFrom"] == [f"{J}/turn/DA.1/5"]


def test_recall_shows_the_answer_lines_of_a_result_not_only_its_facts(tmp_path: Path) -> None:
    board = OxigraphBlackboard.in_memory()
    archive = Archive.open(tmp_path, "j")
    store = JobNodeStore(board, archive, "j")
    read: list[str] = []

    def source(iri: str) -> str | None:
        read.append(iri)
        return archive.get(iri).text()

    memory = KnowledgeMemory(board, TokenCounter().count, sources=source)
    store.listen(memory.observe)
    ing = Blocking(Ingestor(board, archive, "j", DirectWriter(store)))
    iri = f"{J}/result/DA.1-5-0"
    page = ("Harbour notes\nBerth 12 takes ships up to 210 metres long.\n"
            + "The tide tables are posted weekly.\n" * 3
            + "The harbour master of the northern pier is Ada Quinn.\n"
            "Ships wait at the outer buoy when the harbour is full.\n")
    with archive:
        archive.put(iri, page, kind="result", meta={"tool": "read_file"})
        ing.tool_result(ToolRecord("read_file", {"path": "harbour.md"}, True, page, iri),
                        f"{J}/turn/DA.1/5")
        packed = memory.recall("who is the harbour master of the northern pier", 400).text
    # no anchor: not a fact, yet the recall holds it, with the line it reads back from
    assert f"[{iri}#L6] read_file harbour.md: The harbour master of the northern pier is " \
        "Ada Quinn." in packed.splitlines()
    assert read == [iri]  # the result was read once for its lines
    assert packed.count("Ada Quinn") == 1


@pytest.mark.parametrize("indent", [None, 2])
def test_recall_keeps_every_record_of_a_json_result_though_they_share_a_line(
        tmp_path: Path, indent: int | None) -> None:
    """The records of a one-line JSON result all read back from line 1: recall tells them
    apart by their text, so the record asked about is not dropped as a repeat of the first."""
    ing, board, archive, memory = setup(tmp_path, reads_lines=True)
    iri = f"{J}/result/DA.1-6-0"
    data = {"reservation_id": "KA7I60", "flights": [
        {"flight_number": f"HAT{n:03d}", "origin": origin, "destination": "CLT",
         "price": 100 + n} for n, origin in ((191, "DTW"), (262, "DEN"), (77, "BOS"))]}
    output = json.dumps(data, indent=indent)
    with archive:
        archive.put(iri, output, kind="result", meta={"tool": "get_reservation_details"})
        ing.tool_result(ToolRecord("get_reservation_details", {"reservation_id": "KA7I60"},
                                   True, output, iri), f"{J}/turn/DA.1/6")
        packed = memory.recall("flight from den to clt price", 400).text
    lines = [line for line in packed.splitlines() if line.startswith(f"[{iri}#L")]
    for flight in ("HAT262", "HAT191", "HAT077"):  # the budget holds them all
        assert any(f"flight_number={flight}" in line for line in lines), packed
    assert len(lines) == len(set(lines))  # a record shown once, as a fact or as a line
    assert sum("flight_number=HAT262" in line for line in packed.splitlines()) == 1


def test_what_a_memory_read_returns_makes_no_facts_and_no_indexed_lines(tmp_path: Path) -> None:
    """A recall (or read_result, kg_search ...) restates what memory holds: facts or indexed
    lines made of it would be copies pointing at the copy, crowding out the lines they quote."""
    ing, board, archive, memory = setup(tmp_path, reads_lines=True)
    quoted = (f"[{J}/result/DA.1-3-0#L7] read_file fleet.md: The refit of vessel NX-2207 "
              "finished on 14 March.\n") * 3
    with archive:
        for n, tool in enumerate(("recall", "read_result", "kg_search"), 1):
            iri = f"{J}/result/DA.2-{n}-0"
            archive.put(iri, quoted, kind="result", meta={"tool": tool})
            ing.tool_result(ToolRecord(tool, {"query": "refit"}, True, quoted, iri),
                            f"{J}/turn/DA.2/{n}")
        memory.ready()
        facts = board.query(f"PREFIX gl: <{NS}> SELECT ?f WHERE {{ ?f a gl:Fact }}", graph=J)
        assert facts == [] and len(memory._line_index) == 0
        iri = f"{J}/result/DA.2-9-0"  # the same text from any other tool is a finding
        archive.put(iri, quoted, kind="result", meta={"tool": "bash"})
        ing.tool_result(ToolRecord("bash", {"command": "cat notes"}, True, quoted, iri),
                        f"{J}/turn/DA.2/9")
        memory.ready()
        facts = board.query(f"PREFIX gl: <{NS}> SELECT ?f WHERE {{ ?f a gl:Fact }}", graph=J)
        assert facts and len(memory._line_index) == 3
