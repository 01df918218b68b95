"""load_task: valid task files become Task values; malformed ones a TaskFileError naming field
and line, with the directory left exactly as it was."""

from __future__ import annotations

import dataclasses
import posixpath
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gliding.config.task import Task, load_task
from gliding.config.task_schema import CheckSpec
from gliding.core.checks import CommandSucceeds, FileContains, FileExists
from gliding.errors import TaskFileError
from tests.config.malformed_cases import MALFORMED_TASKS

FULL_TASK = """\
goal: Create hello.txt containing exactly "Hello, World!"
workspace: ws
model: local
pipeline: [PA, DA, CA]
budgets:
  turns: {PA: 2, DA: 8}
  prompt_tokens: 200000
  cost_usd: 1
  wall_time_s: 900
checks:
  - file_exists: hello.txt
  - file_contains: {path: sub/hello.txt, text: "Hello, World!"}
  - command: "test -s hello.txt"
  - command: {run: "grep -q Hello hello.txt", timeout_s: 5}
"""


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def write_task(directory: Path, text: str, name: str = "task.yaml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- valid task files -------------------------------------------------------------------------


def test_full_task_file_becomes_a_task(tmp_path: Path) -> None:
    path = write_task(tmp_path, FULL_TASK)
    before = snapshot(tmp_path)

    task = load_task(path)

    assert task == Task(
        goal='Create hello.txt containing exactly "Hello, World!"',
        workspace=tmp_path.resolve() / "ws",
        model="local",
        pipeline=("PA", "DA", "CA"),
        turns={"PA": 2, "DA": 8},  # CA and AA keep their role files' caps
        prompt_tokens=200000,
        cost_usd=1.0,
        wall_time_s=900.0,
        checks=(
            FileExists("hello.txt"),
            FileContains("sub/hello.txt", "Hello, World!"),
            CommandSucceeds("test -s hello.txt", 60.0),
            CommandSucceeds("grep -q Hello hello.txt", 5.0),
        ),
        source=path.resolve(),
    )
    assert snapshot(tmp_path) == before  # the workspace is not created


def test_goal_alone_gets_every_default(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "goal: say hi\n"))

    assert task.workspace == tmp_path.resolve() / "workspace"
    assert task.model is None
    assert task.pipeline == "auto"
    assert task.turns == {}  # no cap of its own: each role keeps its role file's max_turns
    assert (task.prompt_tokens, task.cost_usd, task.wall_time_s) == (None, None, None)
    assert task.checks == ()


def test_empty_optional_fields_mean_their_defaults(tmp_path: Path) -> None:
    text = "goal: say hi\nworkspace:\nmodel:\npipeline:\nbudgets:\n  turns:\nchecks:\n"
    task = load_task(write_task(tmp_path, text))

    assert task.workspace == tmp_path.resolve() / "workspace"
    assert task.pipeline == "auto"
    assert task.turns == {}
    assert task.checks == ()


def test_one_number_of_turns_sets_every_role(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "goal: x\nbudgets:\n  turns: 4\n"))
    assert task.turns == {"PA": 4, "DA": 4, "CA": 4, "AA": 4}


def test_goal_is_stripped_of_surrounding_blank_space(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "goal: |\n  Write a poem.\n\n"))
    assert task.goal == "Write a poem."


def test_workspace_is_relative_to_the_task_file_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_task(tmp_path / "jobs", "goal: x\nworkspace: ../shared/ws\n")
    monkeypatch.chdir(tmp_path / "elsewhere")

    task = load_task(Path("../jobs/task.yaml"))

    assert task.workspace == tmp_path.resolve() / "shared" / "ws"
    assert task.source == tmp_path.resolve() / "jobs" / "task.yaml"


def test_existing_workspace_directory_is_accepted(tmp_path: Path) -> None:
    workspace = tmp_path / "existing"
    workspace.mkdir()
    task = load_task(write_task(tmp_path, f"goal: x\nworkspace: {workspace}\n"))
    assert task.workspace == workspace.resolve()


def test_task_is_frozen(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "goal: x\n"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.goal = "y"  # type: ignore[misc]


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_bytes(b"\xef\xbb\xbfgoal: x\n")
    assert load_task(path).goal == "x"


def test_merge_keys_work_in_task_files(tmp_path: Path) -> None:
    text = "goal: x\nbudgets:\n  turns:\n    <<: {PA: 1, DA: 2}\n    DA: 5\n"
    assert load_task(write_task(tmp_path, text)).turns == {"PA": 1, "DA": 5}


# --- malformed task files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param(text, expected, id=case_id) for case_id, text, expected in MALFORMED_TASKS],
)
def test_malformed_task_file_is_refused_by_field_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write_task(tmp_path, text)
    before = snapshot(tmp_path)

    with pytest.raises(TaskFileError) as caught:
        load_task(path)

    message = str(caught.value)
    assert str(path) in message
    assert expected in message
    assert "errors.pydantic.dev" not in message
    assert "Traceback" not in message
    assert caught.value.exit_code == 2
    assert snapshot(tmp_path) == before


def test_malformed_cases_cover_the_required_kinds() -> None:
    ids = {case_id for case_id, _, _ in MALFORMED_TASKS}
    required = {
        "syntax_error", "empty_file", "top_level_list", "missing_goal", "empty_goal",
        "unknown_top_level_field", "unknown_role_in_pipeline", "pipeline_without_da",
        "duplicate_role_in_pipeline", "negative_turns", "unknown_role_in_turns",
        "unknown_check_kind", "file_contains_without_text", "check_path_escaping",
        "absolute_check_path", "workspace_is_a_file", "duplicate_key", "cost_usd_wrong_type",
    }  # fmt: skip
    assert required <= ids
    assert len(ids) == len(MALFORMED_TASKS)  # ids are unique


def test_every_problem_is_reported_at_once_in_line_order(tmp_path: Path) -> None:
    text = "colour: red\ngoal: ''\nbudgets:\n  turns: {QA: 1}\n  cost_usd: -1\n"
    path = write_task(tmp_path, text)

    with pytest.raises(TaskFileError) as caught:
        load_task(path)

    lines = caught.value.message.splitlines()
    assert lines == [
        f"{path}:1: colour: unknown field 'colour' "
        "(fields: goal, workspace, model, pipeline, budgets, checks, network, mcp_servers, "
        "tool_groups, venv, mounts, git_writes, hooks, approvals)",
        f"{path}:2: goal: must not be empty",
        f"{path}:4: budgets.turns.QA: unknown role 'QA' (roles: PA, DA, CA, AA)",
        f"{path}:5: budgets.cost_usd: Input should be greater than or equal to 0, got -1",
    ]
    assert caught.value.hint is not None and "docs/config.md" in caught.value.hint


def test_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(TaskFileError, match=r"nope\.yaml: task file not found"):
        load_task(path)
    assert snapshot(tmp_path) == {}


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(TaskFileError, match=r"task\.yaml: is a directory, not a task file"):
        load_task(tmp_path / "task.yaml")
    assert snapshot(tmp_path) == before


def test_bytes_that_are_not_utf8_are_refused_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_bytes(b"goal: x\nmodel: caf\xe9\n")
    before = snapshot(tmp_path)
    with pytest.raises(TaskFileError, match=r"task\.yaml:2: the task file is not UTF-8 .*0xe9"):
        load_task(path)
    assert snapshot(tmp_path) == before


def test_default_workspace_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "workspace").write_text("not a directory")
    path = write_task(tmp_path, "# a comment\ngoal: x\n")
    with pytest.raises(TaskFileError, match=r"task\.yaml:2: workspace: .*is not a directory"):
        load_task(path)


# --- check paths --------------------------------------------------------------------------------


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "c.txt"]), min_size=1, max_size=8))
def test_check_path_is_refused_exactly_when_it_leads_out(segments: list[str]) -> None:
    path = "/".join(segments)
    normal = posixpath.normpath(path)
    leads_out = normal == ".." or normal.startswith("../")
    try:
        CheckSpec.model_validate({"file_exists": path})
        refused = False
    except ValidationError:
        refused = True
    assert refused == leads_out


@pytest.mark.parametrize("path", ["/etc/passwd", "C:\\x", "\\\\server\\share\\x", "..\\x", ""])
def test_absolute_windows_and_empty_check_paths_are_refused(path: str) -> None:
    with pytest.raises(ValidationError):
        CheckSpec.model_validate({"file_exists": path})


@pytest.mark.parametrize("path", ["hello.txt", "./a/b.txt", "a/../b.txt", "dir/", ".hidden"])
def test_paths_inside_the_workspace_are_kept_as_written(path: str) -> None:
    assert CheckSpec.model_validate({"file_exists": path}).to_check() == FileExists(path)


def test_workspace_in_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    path = write_task(tmp_path, "goal: x\nworkspace: loop/ws\n")
    before = snapshot(tmp_path)
    with pytest.raises(TaskFileError, match=r"task\.yaml:2: workspace: "):
        load_task(path)
    assert snapshot(tmp_path) == before
