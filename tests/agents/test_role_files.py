"""A role is its role file and its constitution: dropping both into a home's folders adds it.

The new role here, RA, reviews the work in the check phase; no module of Gliding names it,
yet task files, settings, reply files, the supervisor, the worker's answers, the board
projection and the crash points all take it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gliding.agents.roles import load_role, load_roles
from gliding.agents.worker import failed_answer
from gliding.bus.messages import ArtifactMsg, Assignment, CheckOutcome, CheckReportMsg
from gliding.config.loader import load_settings
from gliding.config.roles import PHASES, auto_roles, home_dir, registry, role_names
from gliding.config.task import load_task_text
from gliding.core.crashpoints import armed
from gliding.errors import ConfigError, TaskFileError
from gliding.llm.replies import replies_from_data
from gliding.memory.board.projection import frame_query
from gliding.scheduler import policy, supervisor

RA = """\
name: RA
phase: check
projection: [gl:Artifact]
title: Review agent
tool_groups: [read]
max_turns: 2
prompt: |
  You are RA, the Review agent. Read what DA wrote, then call finish.
finish:
  description: Hand the review to the team.
  parameters: {type: object, properties: {notes: {type: string}}, required: [notes]}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with the shipped roles and RA, which GLIDING_HOME points to."""
    for folder in ("roles", "constitutions"):
        shutil.copytree(home_dir() / folder, tmp_path / folder)
    (tmp_path / "roles" / "RA.yaml").write_text(RA)
    (tmp_path / "constitutions" / "RA.yaml").write_text("rules:\n  - Quote the line.\n")
    monkeypatch.setenv("GLIDING_HOME", str(tmp_path))
    return tmp_path


def test_the_registry_lists_the_new_role_and_the_auto_pipelines_keep_theirs(home: Path) -> None:
    assert role_names() == ("PA", "DA", "CA", "RA", "AA")
    assert registry()["RA"].phase == "check"
    assert auto_roles(PHASES) == ("PA", "DA", "CA", "AA")  # RA is not auto: nothing changes
    spec = load_roles()["RA"]
    assert "RA1. Quote the line." in spec.system_prompt() and spec.phase == "check"


def test_task_files_settings_and_reply_files_take_the_new_role(home: Path) -> None:
    task = load_task_text("goal: x\npipeline: [DA, RA]\nbudgets:\n  turns: {RA: 2}\n"
                          "  cost_usd: {RA: 0.5}\ntool_groups: {RA: [read]}\n",
                          "task.yaml", home)
    assert task.pipeline == ("DA", "RA") and task.turns == {"RA": 2}
    assert task.cost_usd == {"RA": 0.5} and task.tool_groups == {"RA": ("read",)}
    assert load_task_text("goal: x\nbudgets: {turns: 3}\n", "t.yaml", home).turns["RA"] == 3
    settings = load_settings(env={"GLIDING_LLM__ROLES": '{"RA": {"max_tokens": 8}}'})
    assert settings.llm.roles["RA"].max_tokens == 8
    assert list(replies_from_data({"RA": [{"text": "ok"}]}, "r.yaml")) == ["RA"]


def test_two_roles_of_one_phase_in_a_pipeline_are_refused(home: Path) -> None:
    with pytest.raises(TaskFileError, match="CA and RA both play check"):
        load_task_text("goal: x\npipeline: [DA, CA, RA]\n", "task.yaml", home)


def test_the_supervisor_asks_the_new_role_for_its_phase_and_takes_its_answer(
        home: Path) -> None:
    choice = policy.PipelineChoice(("DA", "RA"), "explicit", "test")
    state, commands = supervisor.start("j1", "g", choice, ("file a exists",),
                                       max_corrections=0, max_cycles=1)
    [da] = [c for c in commands if isinstance(c, Assignment)]
    common = {"job": "j1", "cycle": da.cycle, "attempt": da.attempt}
    state, commands = supervisor.step(state, ArtifactMsg(**common, role="DA", summary="done"))
    [ra] = [c for c in commands if isinstance(c, Assignment)]
    assert ra.role == "RA"
    outcome = CheckOutcome(check="file a exists", status="pass", evidence="a exists")
    state, commands = supervisor.step(state, CheckReportMsg(
        **common, role="RA", results=[outcome], passed=True, verified_by="RA"))
    assert state.outcome == "success" and state.verified_by == "RA"


def test_the_worker_board_and_crash_points_take_the_new_role(home: Path) -> None:
    a = Assignment(job="j1", role="RA", cycle=1, attempt=0, goal="g", instructions="i")
    assert isinstance(failed_answer(a, "boom"), CheckReportMsg)  # its phase's answer
    assert "gl:Artifact" in frame_query("RA", "gliding://job/j1")
    with armed({"role.start:RA": 1}):
        pass


def test_a_role_file_without_a_phase_is_a_config_error(home: Path) -> None:
    (home / "roles" / "XA.yaml").write_text("name: XA\nprompt: hi\n")
    with pytest.raises(ConfigError, match="XA.yaml: phase must be one of"):
        load_role("DA", home)


@pytest.mark.parametrize(("frame", "message"), [
    ('"just text"', "must be a mapping"),
    ('{"@context": "https://example.org/ctx"}', "is not a vocabulary word"),
    ('{"@type": Fact, "a b": 1}', "is not a vocabulary word"),
    ('{"@type": Fact, derivedFrom: {a: {b: {c: {d: {e: {}}}}}}}', "levels deep"),
    ('{"@type": [Fact, {x: 1}]}', "a list of words"),
])
def test_a_role_s_frame_is_a_mapping_of_words_and_framing_keywords(
        home: Path, frame: str, message: str) -> None:
    line = "projection: [gl:Artifact]\n"
    framed = RA.replace(line, f"{line}frame: {frame}\n")
    (home / "roles" / "RA.yaml").write_text(framed)
    with pytest.raises(ConfigError, match=message):
        registry()


def test_a_frame_word_outside_the_vocabulary_is_refused_where_it_is_used(home: Path) -> None:
    from gliding.memory.board.projection import frame_of

    (home / "roles" / "RA.yaml").write_text(RA.replace(
        "projection: [gl:Artifact]\n", "projection: [gl:Artifact]\nframe: {\"@type\": Facts}\n"))
    with pytest.raises(ConfigError, match="'Facts' is not a node type"):
        frame_of("RA")
    for role in ("PA", "DA", "CA", "AA"):  # the shipped frames name vocabulary words only
        frame_of(role)
