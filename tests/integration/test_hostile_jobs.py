"""Jobs that go wrong on purpose: the disk fills up, the data directory or workspace is
read-only, two jobs want one workspace, the workspace is a system directory, the model leaves
symlinks to secrets and huge files behind, a library caller reads no events. Each ends as one
clear error (or a clean report) with the right exit code and the job's status recorded, and
nothing is left half-written.

Read-only directories are real ones: the command runs under bubblewrap with the directory
bound read-only (writes fail with EROFS whoever runs the tests, root included).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task
from gliding.daemon import artifacts
from gliding.daemon.compose import JobHandle, resume_job, run_job
from gliding.daemon.jobs import WorkspaceBusy, WorkspaceLock, list_jobs
from gliding.errors import ArchiveError, GlidingError, TaskFileError
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call, text
from gliding.tools.base import ToolGroupManager
from tests.cli.cli_support import clean_env, gliding_script, invoke, tree

TASK = "goal: Write a.txt\npipeline: [DA]\nworkspace: ws\n"
REPLIES = "DA:\n  - write_file: {path: a.txt, content: hello}\n  - finish: {summary: done}\n"


def script() -> ScriptedLLM:
    return ScriptedLLM({"DA": [call("write_file", path="a.txt", content="hello"),
                               call("finish", summary="done")]})


def settings_in(tmp: Path, **overrides: Any) -> Settings:
    return load_settings(env={}, overrides={"data_dir": str(tmp / "data"),
                                            "memory.vectors.enabled": False, **overrides})


def task_in(tmp: Path, text_: str = TASK) -> Task:
    (tmp / "task.yaml").write_text(text_, encoding="utf-8")
    return load_task(tmp / "task.yaml")


def run(task: Task, settings: Settings, llm: Any = None, **kw: Any) -> JobHandle:
    return anyio.run(lambda: run_job(task, settings, llm=llm or script(), **kw))


def only_job(settings: Settings) -> str:
    [info] = list_jobs(settings.data_dir)
    return info.job


def meta(settings: Settings, job: str, key: str) -> Any:
    with Archive.open(settings.data_dir, job, create=False) as archive:
        return archive.get_meta(key)


@pytest.fixture
def disk_full_after(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """``disk_full_after(n)``: every ``Archive.put`` after the n-th raises ENOSPC."""
    put = Archive.put

    def arm(n: int) -> None:
        count = {"puts": 0}

        def full(self: Archive, *args: Any, **kwargs: Any) -> Any:
            count["puts"] += 1
            if count["puts"] > n:
                raise OSError(errno.ENOSPC, "No space left on device")
            return put(self, *args, **kwargs)

        monkeypatch.setattr(Archive, "put", full)

    return arm


# --- the disk fills up -------------------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 2])  # the first journal entry; a tool result
def test_disk_full_is_one_error_and_the_job_is_recorded_as_interrupted(
        tmp_path: Path, disk_full_after: Callable[[int], None], after: int) -> None:
    settings = settings_in(tmp_path)
    disk_full_after(after)

    with pytest.raises(ArchiveError) as exc:  # not an ExceptionGroup
        run(task_in(tmp_path), settings)

    assert exc.value.message == "no space left on the device"
    job = only_job(settings)
    assert f"free some disk space; then gliding resume {job}" in str(exc.value)
    assert meta(settings, job, "status") == "interrupted"
    assert meta(settings, job, "stopped_by") == "no space left on the device"
    [info] = list_jobs(settings.data_dir)
    assert (info.status, info.stopped_by) == ("interrupted", "no space left on the device")


def test_disk_full_from_the_cli_is_one_message_and_exit_1(
        tmp_path: Path, disk_full_after: Callable[[int], None]) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    disk_full_after(1)

    result = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml", "--data-dir", "data",
                     "-q"], cwd=tmp_path, env={"GLIDING_MEMORY__VECTORS__ENABLED": "false"})

    assert result.code == 1, result
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "job.close.failed" not in line]
    assert lines[0] == "error: no space left on the device", result.stderr
    assert lines[1].startswith("  hint: free some disk space; then gliding resume ")
    assert len(lines) == 2, result.stderr
    assert result.stdout == b""


def test_a_failing_cleanup_does_not_mask_the_disk_full_error(
        tmp_path: Path, disk_full_after: Callable[[int], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken_close(self: ToolGroupManager) -> None:
        raise RuntimeError("a second error while closing the tools")

    monkeypatch.setattr(ToolGroupManager, "aclose", broken_close)
    disk_full_after(2)

    with pytest.raises(ArchiveError, match="no space left on the device"):
        run(task_in(tmp_path), settings_in(tmp_path))


def test_a_bug_inside_the_job_is_one_error_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*args: Any, **kwargs: Any) -> None:
        raise KeyError("journal")

    monkeypatch.setattr(Archive, "put", bug)
    settings = settings_in(tmp_path)

    with pytest.raises(GlidingError) as exc:
        run(task_in(tmp_path), settings)

    assert type(exc.value) is GlidingError
    assert exc.value.message == "the job stopped on an internal error: KeyError: 'journal'"
    assert meta(settings, only_job(settings), "status") == "interrupted"


def test_a_job_stopped_by_a_full_disk_resumes_once_there_is_room(
        tmp_path: Path, disk_full_after: Callable[[int], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_in(tmp_path)
    task = task_in(tmp_path)
    disk_full_after(2)
    with pytest.raises(ArchiveError):
        run(task, settings)
    job = only_job(settings)
    monkeypatch.undo()  # room again

    with WorkspaceLock(settings.data_dir, task.workspace, "another"):  # busy: refused as it is
        with pytest.raises(WorkspaceBusy, match="is in use by job another"):
            anyio.run(lambda: resume_job(job, settings, llm=script()))
    assert meta(settings, job, "status") == "interrupted"

    handle = anyio.run(lambda: resume_job(job, settings, llm=script()))

    assert handle.report is not None and handle.report.outcome == "success"
    assert [(i.status, i.stopped_by) for i in list_jobs(settings.data_dir)] == [("success", "")]


# --- read-only directories ---------------------------------------------------------------------


def read_only_run(tmp: Path, read_only: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gliding run task.yaml`` with ``read_only`` bound read-only (the rest as it is)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    command = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(read_only), str(read_only),
               "--chdir", str(tmp), str(gliding_script()), "run", "task.yaml", "--model",
               "scripted:replies.yaml", "--data-dir", "data", "-q", *args]
    env = clean_env({"GLIDING_TOOLS__SANDBOX": "off",  # no bubblewrap inside bubblewrap
                     "GLIDING_MEMORY__VECTORS__ENABLED": "false"})
    proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    if "bwrap:" in proc.stderr:
        pytest.skip(f"bubblewrap cannot run here: {proc.stderr.strip()}")
    return proc


@pytest.mark.heavy
def test_a_read_only_data_dir_is_one_message_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    (tmp_path / "data").mkdir()

    proc = read_only_run(tmp_path, tmp_path / "data")

    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: cannot use the data dir: cannot create "), proc.stderr
    assert error.endswith("/data/workspaces: Read-only file system")
    assert tree(tmp_path) == {"task.yaml", "replies.yaml", "data"}


@pytest.mark.heavy
def test_a_read_only_workspace_is_refused_and_leaves_no_archive(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    (tmp_path / "ws").mkdir()

    proc = read_only_run(tmp_path, tmp_path / "ws")

    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error == f"error: the workspace {tmp_path / 'ws'} is not writable", proc.stderr
    assert not (tmp_path / "data" / "jobs").exists()  # no archive, no job to list


def test_a_workspace_that_cannot_be_created_leaves_no_archive(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    task = task_in(tmp_path, "goal: x\npipeline: [DA]\nworkspace: ro/ws\n")
    settings = settings_in(tmp_path)
    real_mkdir = Path.mkdir

    def refuse(self: Path, *args: Any, **kwargs: Any) -> None:
        if self == task.workspace:
            raise OSError(errno.EROFS, "Read-only file system")
        real_mkdir(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "mkdir", refuse)
        with pytest.raises(GlidingError, match="cannot create workspace .*Read-only"):
            run(task, settings)

    assert list((settings.data_dir / "jobs").iterdir()) == []


# --- one workspace, one job --------------------------------------------------------------------


def test_a_second_job_on_a_busy_workspace_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    task = task_in(tmp_path)
    errors: list[BaseException] = []

    async def main() -> None:
        started = anyio.Event()

        def on_event(event: JobEvent) -> None:
            if event.event == "role.started":
                started.set()

        async def second() -> None:
            await started.wait()
            try:
                await run_job(task, settings, llm=script())
            except WorkspaceBusy as exc:
                errors.append(exc)

        slow = ScriptedLLM({"DA": [call("write_file", path="a.txt", content="first"),
                                   call("finish", summary="done")]}, delay_s=0.5)
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await run_job(task, settings, llm=slow, on_event=on_event)

    anyio.run(main)

    [busy] = errors
    [first] = list_jobs(settings.data_dir)
    assert str(busy).startswith(f"workspace {task.workspace} is in use by job {first.job} "
                                f"(pid {os.getpid()})")
    assert busy.exit_code == 2
    assert first.status == "success"
    assert (task.workspace / "a.txt").read_text() == "first"


def test_gliding_run_on_a_busy_workspace_is_exit_2(tmp_path: Path) -> None:
    task = task_in(tmp_path)
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")

    with WorkspaceLock(tmp_path / "data", task.workspace, "20261202-000000-abcdef"):
        result = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml", "--data-dir",
                         "data", "-q"], cwd=tmp_path)

    assert result.code == 2, result
    assert result.stderr.startswith(f"error: workspace {task.workspace} is in use by job "
                                    "20261202-000000-abcdef"), result
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "jobs").exists()


# --- workspaces no job may have, at run time ---------------------------------------------------


@pytest.mark.parametrize("where", ["data dir", "inside the data dir", "/etc", "/"])
def test_run_job_refuses_a_workspace_no_job_may_have(tmp_path: Path, where: str) -> None:
    settings = settings_in(tmp_path)
    workspace = {"data dir": settings.data_dir, "inside the data dir": settings.data_dir / "jobs",
                 "/etc": Path("/etc"), "/": Path("/")}[where]
    task = Task(goal="x", workspace=workspace, model=None, pipeline=("DA",), turns={},
                prompt_tokens=None, cost_usd=None, wall_time_s=None, checks=(),
                source=tmp_path / "task.yaml")

    with pytest.raises(TaskFileError, match="workspace: ") as exc:
        run(task, settings)

    assert exc.value.exit_code == 2
    assert tree(tmp_path) == set()  # not even the data dir


def test_a_workspace_swapped_for_a_symlink_after_loading_is_refused(tmp_path: Path) -> None:
    task = task_in(tmp_path)  # ws does not exist yet
    (tmp_path / "ws").symlink_to("/etc")

    with pytest.raises(TaskFileError, match="is /etc, a system directory"):
        run(task, settings_in(tmp_path))

    assert not (tmp_path / "data").exists()


# --- artifacts ---------------------------------------------------------------------------------


@pytest.fixture
def leftovers(tmp_path: Path) -> tuple[JobHandle, Settings, Path]:
    """A job whose DA writes four files, then replaces them with a symlink to a secret, a
    directory symlinked out of the workspace, a 20 MB (sparse) file and a FIFO."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:$6$hash", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.txt").write_text("outside the workspace", encoding="utf-8")
    settings = settings_in(tmp_path)
    task = task_in(tmp_path)
    command = (f"rm a.txt && ln -s {secret} a.txt && rm -r sub && ln -s {outside} sub && "
               "truncate -s 20M big.bin && rm fifo && mkfifo fifo && echo ok.txt")
    llm = ScriptedLLM({"DA": [
        call("write_file", path="a.txt", content="a"),
        call("write_file", path="sub/b.txt", content="b"),
        call("write_file", path="big.bin", content="small for now"),
        call("write_file", path="fifo", content="f"),
        call("write_file", path="ok.txt", content="fine"),
        call("bash", command=command),
        call("finish", summary="done")]})
    task = dataclasses.replace(task, turns={"DA": 10})
    return run(task, settings, llm), settings, secret


def test_artifacts_never_follow_symlinks_and_are_capped(
        leftovers: tuple[JobHandle, Settings, Path]) -> None:
    handle, settings, secret = leftovers
    report = handle.report
    assert report is not None and report.outcome == "success", report

    assert [path for path, _ in report.artifacts] == ["ok.txt"]
    skipped = dict(report.skipped_artifacts)
    assert skipped["a.txt"] == f"a symbolic link (to {secret}); links are not followed"
    assert skipped["sub/b.txt"].startswith("lies behind a symbolic link that leads out of")
    assert skipped["big.bin"] == (f"{20 << 20} bytes, larger than the "
                                  f"{artifacts.MAX_ARTIFACT_BYTES} bytes an archived file may have")
    assert skipped["fifo"] == "not a regular file"
    with Archive.open(settings.data_dir, report.job, create=False) as archive:
        contents = [archive.get(item.iri).content for item in archive.list()]
        assert not any(b"root:$6$" in (c or b"") or b"outside the workspace" in (c or b"")
                       for c in contents)
        assert archive.get_meta("status") == "success"


def test_the_report_names_the_files_not_archived(
        leftovers: tuple[JobHandle, Settings, Path]) -> None:
    from gliding.daemon.render import report_dict, report_text

    handle, _, _ = leftovers
    assert handle.report is not None
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    lines = report_text(data).splitlines()

    start = lines.index("Not archived:")
    assert [line.split()[0] for line in lines[start + 1:start + 5]] == [
        "a.txt", "big.bin", "fifo", "sub/b.txt"]
    assert {a["path"] for a in data["skipped_artifacts"]} == {"a.txt", "big.bin", "fifo",
                                                             "sub/b.txt"}


def test_artifacts_past_the_total_cap_are_skipped(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "MAX_ARTIFACTS_BYTES", 15)
    llm = ScriptedLLM({"DA": [call("write_file", path="one.txt", content="0123456789"),
                              call("write_file", path="two.txt", content="0123456789"),
                              call("finish", summary="done")]})

    handle = run(task_in(tmp_path), settings_in(tmp_path), llm)

    assert handle.report is not None
    assert [p for p, _ in handle.report.artifacts] == ["one.txt"]
    assert dict(handle.report.skipped_artifacts) == {
        "two.txt": "10 bytes: the job's archived files may take 15 bytes in all"}


def test_an_artifact_the_archive_cannot_take_is_skipped_and_the_outcome_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put = Archive.put

    def no_room_for_artifacts(self: Archive, iri: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("kind") == "artifact":
            raise OSError(errno.ENOSPC, "No space left on device")
        return put(self, iri, *args, **kwargs)

    monkeypatch.setattr(Archive, "put", no_room_for_artifacts)
    settings = settings_in(tmp_path)

    handle = run(task_in(tmp_path), settings)

    assert handle.report is not None and handle.report.outcome == "success"
    assert dict(handle.report.skipped_artifacts) == {
        "a.txt": "not archived: [Errno 28] No space left on device"}
    assert meta(settings, handle.report.job, "status") == "success"


# --- a library caller that reads no events -----------------------------------------------------


@pytest.mark.heavy
@pytest.mark.timeout(180)
def test_a_job_of_over_a_thousand_events_without_a_callback_does_not_hang(
        tmp_path: Path) -> None:
    turns = 1100  # one event each, past the event subscription's buffer of 1000
    task = Task(goal="look around", workspace=tmp_path / "ws", model=None, pipeline=("DA",),
                turns={"DA": turns + 1}, prompt_tokens=None, cost_usd=None, wall_time_s=None,
                checks=(), source=tmp_path / "task.yaml")
    llm = ScriptedLLM({"DA": [text("thinking")] * turns + [call("finish", summary="ok")]})

    async def main() -> JobHandle:
        with anyio.fail_after(120):
            return await run_job(task, settings_in(tmp_path), llm=llm)

    handle = anyio.run(main)

    assert handle.report is not None and len(handle.report.turns) == turns + 1

