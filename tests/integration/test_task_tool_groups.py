"""A task file's ``tool_groups`` gives roles more tool groups for that task (``{DA: [web]}``):
the role is offered their tools and calls them; an unknown group is refused before the job
writes anything."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import run_job
from gliding.errors import TaskFileError
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call


def write(tmp_path: Path, groups: str) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(f"goal: Read a page\npipeline: [DA]\ntool_groups: {groups}\n",
                    encoding="utf-8")
    return path


def test_a_role_gets_the_web_group_its_task_gives_it(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "{DA: [web]}"))
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    llm = ScriptedLLM({"DA": [call("web_fetch", url="http://169.254.169.254/latest/"),
                              call("list_dir"),  # DA finishes after a call that worked
                              call("finish", summary="the metadata service is refused")]})

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success"
    offered = [t.name for t in llm.requests[0].tools]
    assert "web_fetch" in offered and "bash" in offered  # the role file's groups stay
    with Archive.open(settings.data_dir, handle.report.job, create=False) as archive:
        text = archive.get(archive.list(kind="result")[0].iri).text()
    assert text.startswith("error: refused to connect to 169.254.169.254: ")


def test_without_tool_groups_no_role_is_offered_web_tools(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("goal: Say done\npipeline: [DA]\n", encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    llm = ScriptedLLM({"DA": [call("list_dir"), call("finish", summary="done")]})

    handle = anyio.run(lambda: run_job(load_task(path), settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success"
    assert "web_fetch" not in [t.name for t in llm.requests[0].tools]


def test_an_unknown_group_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "{DA: [web, admin]}"))
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})

    with pytest.raises(TaskFileError, match=r"tool_groups.DA: unknown tool group 'admin'"):
        anyio.run(lambda: run_job(task, settings, llm=ScriptedLLM({})))
    assert not (tmp_path / "data" / "jobs").exists() or not any(
        (tmp_path / "data" / "jobs").iterdir())


@pytest.mark.parametrize(("groups", "message"), [
    ("{QA: [web]}", "tool_groups: unknown role 'QA'"),
    ("[web]", "tool_groups: must be a mapping of role to a list of tool groups"),
    ("{DA: [1]}", "tool_groups: DA: must be a list of tool group names"),
])
def test_a_malformed_tool_groups_field_is_a_task_file_error(tmp_path: Path, groups: str,
                                                            message: str) -> None:
    with pytest.raises(TaskFileError, match=message):
        load_task(write(tmp_path, groups))
