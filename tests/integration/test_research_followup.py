"""A research job and a follow-up, end to end on scripted replies: job 1's DA reads a page that
holds four facts among filler and notes one; job 2 asks about another. The facts became nodes
with provenance on the blackboard, so job 2's PA finds the answer line in its briefing (earlier
jobs) and its DA's first recall returns the line itself with the IRI and lines it reads back
from — not the page's first line."""

from __future__ import annotations

import re
from pathlib import Path

import anyio

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import run_job
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call

FILLER = ("The harbour office keeps its records in the old customs house near the pier, "
          "where visitors may read them on weekdays.")
FACTS = ("The survey ship Meridian carries a crew of 46 sailors.",
         "The refit of vessel NX-2207 finished on 14 March after nine weeks in dock.",
         "Berth 12 takes ships up to 210 metres long.",
         "The fuel contract with Northwind Marine runs until 2031.")
ANSWER = FACTS[1]


def page() -> str:
    lines = ["# Port of Callan: fleet notes", ""]
    for n in range(40):
        lines.append(FILLER)
        if n % 10 == 5:
            lines.append(FACTS[n // 10])
    return "\n".join(lines) + "\n"


def task(tmp: Path, name: str, goal: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"goal: {goal}\nworkspace: ws\npipeline: [PA, DA, CA, AA]\nchecks:\n"
                    "  - file_contains: {path: fleet.md, text: Callan}\n")
    return path


def system_prompt(llm: ScriptedLLM, role: str) -> str:
    request = next(r for r in llm.requests if r.meta.get("role") == role)
    return "\n".join(m.content for m in request.messages if m.role == "system")


def test_a_follow_up_job_finds_the_answer_line_in_its_briefing_and_first_recall(
        tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "fleet.md").write_text(page())
    assert 5000 < len(page()) < 7000
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data"),
                                        "memory.vectors.enabled": False}, env={})
    research = ScriptedLLM({
        "PA": [call("finish", steps=["read fleet.md and note what matters"])],
        "DA": [call("read_file", path="fleet.md"),
               call("note", text="The survey ship Meridian has a crew of 46."),
               call("finish", summary="read the fleet notes")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="fleet notes read")],
    })
    first = anyio.run(lambda: run_job(load_task(task(tmp_path, "research",
                                                     "Read the fleet notes in fleet.md")),
                                      settings, llm=research))
    assert first.report.outcome == "success"

    question = "When did the refit of the vessel finish, and how long was it in dock?"
    followup = ScriptedLLM({
        "PA": [call("finish", steps=["recall what the fleet notes say about the refit"])],
        "DA": [call("recall", query="refit of the vessel finished dock"),
               call("finish", summary="answered")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="answered")],
    })
    second = anyio.run(lambda: run_job(load_task(task(tmp_path, "followup", question)),
                                       settings, llm=followup))
    assert second.report.outcome == "success"

    briefing = system_prompt(followup, "PA")
    assert "Earlier jobs (long-term memory):" in briefing
    assert ANSWER in briefing
    recalled = next(m.content for r in followup.requests if r.meta.get("role") == "DA"
                    for m in r.messages if m.role == "tool" and "refit" in m.content)
    line = next(ln for ln in recalled.splitlines() if ANSWER in ln)
    source = re.search(r"\[(gliding://job/[^\]#]+)#L(\d+)\]", line)
    assert source is not None, line  # the IRI and the line it reads back from
    result_iri, number = source.group(1), int(source.group(2))
    job = result_iri.split("/")[3]
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        assert archive.get(result_iri).text().splitlines()[number - 1].strip() == ANSWER
    assert "# Port of Callan" not in line  # the answer line, not the page's first line
    assert "Meridian has a crew of 46" in recalled or "Meridian" in briefing  # the note, too
