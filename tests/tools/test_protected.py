"""What in a workspace the job's tools may not change (issue 20, items 10 and 11): the data
directory (refused to every file tool, symlinks and '..' followed first) and the git directory
the workspace had when the job started (read-only in the real bubblewrap sandbox and refused to
write_file and edit_file, unless the task says ``git_writes: true``).

Repositories are laid out by hand (a ``.git`` with ``config`` and ``hooks``): the protection
does not need git, and no test depends on a git binary."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import BashSettings, ToolSettings
from gliding.config.task import load_task
from gliding.daemon.compose import job_sandbox
from gliding.errors import ConfinementError
from gliding.tools.base import Tool, ToolContext
from gliding.tools.files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from gliding.tools.protected import git_paths
from gliding.tools.sandbox import Sandbox, bwrap_problem
from gliding.tools.search import GLOB, GREP
from gliding.tools.shell import run_command

PROBLEM = bwrap_problem()
needs_bwrap = pytest.mark.skipif(
    PROBLEM is not None,
    reason=f"bubblewrap cannot run here ({PROBLEM}); scripts/setup.sh installs it")
CONFIG = "[core]\n\trepositoryformatversion = 0\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def repo(at: Path) -> Path:
    """A git directory as `git init` leaves it (what matters here: config and hooks)."""
    git = at / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "objects").mkdir()
    (git / "config").write_text(CONFIG)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    return git


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def ctx_for(ws: Path, *, readonly: tuple[Path, ...] = (), hidden: tuple[Path, ...] = ()
            ) -> ToolContext:
    return ToolContext(ws, ToolSettings(), sandbox=Sandbox.of(
        ToolSettings(), hidden=hidden, readonly=readonly))


async def call(tool: Tool, ctx: ToolContext, **args: Any) -> str:
    result = await tool.run(args, ctx)
    assert isinstance(result, str)
    return result


# --- the git directory: which paths ----------------------------------------------------------


def test_git_paths_of_a_plain_repository_and_of_none(ws: Path) -> None:
    assert git_paths(ws) == ()
    git = repo(ws)
    assert git_paths(ws) == (git,)
    assert sorted(p.name for p in ws.iterdir()) == [".git"]  # nothing was made


def test_git_paths_follow_a_gitdir_file_and_its_commondir_inside_only(ws: Path,
                                                                      tmp_path: Path) -> None:
    common = repo(ws / "main")  # a worktree's .git file names main/.git/worktrees/wt
    gitdir = common / "worktrees" / "wt"
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    (ws / ".git").write_text("gitdir: main/.git/worktrees/wt\n")

    assert git_paths(ws) == (ws / ".git", common)  # the worktree's lies inside main/.git

    (ws / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere'}\n")
    assert git_paths(ws) == (ws / ".git",)  # outside: the sandbox has no such directory


def test_git_paths_follow_a_symlinked_git_and_submodule_checkouts(ws: Path) -> None:
    real = repo(ws / "store")
    (ws / ".git").symlink_to(real)
    (ws / ".gitmodules").write_text('[submodule "lib"]\n\tpath = lib\n\turl = ../lib\n'
                                    '[submodule "x"]\n\tpath = /etc\n')
    (ws / "lib").mkdir()
    (ws / "lib" / ".git").write_text("gitdir: ../store/modules/lib\n")
    (real / "modules" / "lib").mkdir(parents=True)

    assert git_paths(ws) == (real, ws / "lib" / ".git")


@pytest.mark.timeout(10)
def test_git_paths_wait_on_no_fifo_and_take_no_nul(ws: Path) -> None:
    git = repo(ws)
    os.mkfifo(git / "commondir")
    os.mkfifo(ws / ".gitmodules")
    assert git_paths(ws) == (git,)  # a FIFO is not read, so it cannot block a job's start

    (ws / ".gitmodules").unlink()
    (ws / ".gitmodules").write_text("[submodule]\n\tpath = a\x00b\n")
    assert git_paths(ws) == (git,)


# --- the git directory: the file tools --------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-commit", ".git/hooks",
                                  ".git/commondir", ".git/new/dir/file", "link/config",
                                  "sub/../.git/config", ".git"])
async def test_write_file_in_the_git_directory_is_refused(ws: Path, path: str) -> None:
    git = repo(ws)
    (ws / "link").symlink_to(".git")
    (ws / "sub").mkdir()
    ctx = ctx_for(ws, readonly=git_paths(ws))

    with pytest.raises(ConfinementError, match="read-only to this job") as exc:
        await call(WRITE_FILE, ctx, path=path, content="[core]\n\tfsmonitor = touch /tmp/x\n")

    assert "git_writes: true" in (exc.value.hint or "")
    assert (git / "config").read_text() == CONFIG
    assert sorted(p.name for p in (git / "hooks").iterdir()) == ["pre-commit.sample"]
    assert not (git / "new").exists() and not (git / "commondir").exists()


@pytest.mark.anyio
async def test_edit_file_is_refused_and_reading_is_not(ws: Path) -> None:
    git = repo(ws)
    ctx = ctx_for(ws, readonly=git_paths(ws))

    with pytest.raises(ConfinementError, match=r"path '\.git/config' leads into the "
                       r"workspace's git directory \(\.git\), read-only to this job"):
        await call(EDIT_FILE, ctx, path=".git/config", old="[core]", new="[core]\n\tpager=x")

    assert (git / "config").read_text() == CONFIG
    assert "repositoryformatversion" in await call(READ_FILE, ctx, path=".git/config")
    assert "pre-commit.sample" in await call(LIST_DIR, ctx, path=".git/hooks")


@pytest.mark.anyio
async def test_with_git_writes_the_file_tools_change_the_git_directory(ws: Path) -> None:
    git = repo(ws)
    ctx = ctx_for(ws)  # git_writes: true gives the sandbox no readonly paths

    await call(WRITE_FILE, ctx, path=".git/hooks/pre-commit", content="#!/bin/sh\n")
    await call(EDIT_FILE, ctx, path=".git/config", old="[core]", new="[core]\n\tbare = false")

    assert (git / "hooks" / "pre-commit").read_text() == "#!/bin/sh\n"
    assert "bare = false" in (git / "config").read_text()


# --- the data directory: the file tools -------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "args"), [
    (WRITE_FILE, {"path": ".gliding/blackboard/CURRENT", "content": "garbage"}),
    (WRITE_FILE, {"path": ".gliding/jobs/new/x", "content": "x"}),
    (WRITE_FILE, {"path": "data/blackboard/CURRENT", "content": "via a symlink"}),
    (WRITE_FILE, {"path": "src/../.gliding/blackboard/CURRENT", "content": "via .."}),
    (EDIT_FILE, {"path": ".gliding/blackboard/CURRENT", "old": "MANIFEST", "new": "x"}),
    (READ_FILE, {"path": ".gliding/blackboard/CURRENT"}),
    (READ_FILE, {"path": "data/blackboard/CURRENT"}),
    (LIST_DIR, {"path": ".gliding"}),
    (LIST_DIR, {"path": "data/jobs"}),
    (GREP, {"pattern": "MANIFEST", "path": ".gliding"}),
    (GLOB, {"pattern": ".gliding/blackboard"}),
])
async def test_the_data_directory_is_refused_to_every_file_tool(
        ws: Path, tool: Tool, args: dict[str, Any]) -> None:
    data = ws / ".gliding"
    (data / "blackboard").mkdir(parents=True)
    (data / "blackboard" / "CURRENT").write_text("MANIFEST-000005\n")
    (ws / "src").mkdir()
    (ws / "data").symlink_to(data)
    ctx = ctx_for(ws, hidden=(data,))

    with pytest.raises(ConfinementError, match=r"leads into the data directory .*\.gliding"):
        await call(tool, ctx, **args)

    assert (data / "blackboard" / "CURRENT").read_text() == "MANIFEST-000005\n"
    assert not (data / "jobs").exists()


@pytest.mark.anyio
async def test_searches_of_the_whole_workspace_leave_the_data_directory_out(ws: Path) -> None:
    data = ws / ".gliding"
    (data / "jobs").mkdir(parents=True)
    (data / "jobs" / "events.jsonl").write_text("secret-token of another job\n")
    (ws / "notes.txt").write_text("secret-token of this project\n")
    (ws / "link.txt").symlink_to(".gliding/jobs/events.jsonl")
    ctx = ctx_for(ws, hidden=(data,))

    found = await call(GREP, ctx, pattern="secret-token")
    listed = await call(GLOB, ctx, pattern=".*/**")

    assert found == "notes.txt:1:secret-token of this project"
    assert "jobs" not in listed and "events" not in listed


# --- the git directory: the sandbox ----------------------------------------------------------

ATTACKS = {
    "config": "echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config",
    "hook": "mkdir -p .git/hooks && printf '#!/bin/sh\\n' > .git/hooks/pre-commit",
    "commondir": "echo ../evil > .git/commondir",
    "move": "mv .git .git-old && mkdir .git",
    "remove": "rm -rf .git/hooks",
}


async def bash(command: str, ws: Path, box: Sandbox) -> tuple[int | None, str]:
    settings = ToolSettings(bash=BashSettings(timeout_s=20))
    result = await run_command(command, ws, settings, sandbox=box)
    return result.exit_code, result.output


def job_settings(tmp: Path) -> Any:
    return load_settings(env={}, overrides={"data_dir": str(tmp / "data"),
                                            "memory.vectors.enabled": False})


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_a_sandboxed_command_cannot_change_the_git_directory(
        tmp_path: Path, ws: Path, attack: str) -> None:
    git = repo(ws)
    (tmp_path / "task.yaml").write_text("goal: x\nworkspace: ws\n")
    box = await job_sandbox("j1", load_task(tmp_path / "task.yaml"), job_settings(tmp_path),
                            None)
    assert box.readonly == (git,) and "; git directory read-only" in box.describe()

    code, output = await bash(ATTACKS[attack], ws, box)

    assert code != 0 and ("Read-only file system" in output or "busy" in output), output
    assert (git / "config").read_text() == CONFIG
    assert sorted(p.name for p in (git / "hooks").iterdir()) == ["pre-commit.sample"]
    assert sorted(p.name for p in git.iterdir()) == ["HEAD", "config", "hooks", "objects"]
    assert sorted(p.name for p in ws.iterdir()) == [".git"]  # no .git-old, nothing made
    assert (await bash("cat .git/config && echo fine > notes.txt", ws, box))[0] == 0
    assert (ws / "notes.txt").read_text() == "fine\n"  # the rest of the workspace is writable


@needs_bwrap
@pytest.mark.anyio
async def test_a_gitdir_file_is_read_only_too(tmp_path: Path, ws: Path) -> None:
    store = repo(ws / "store")
    (ws / ".git").write_text("gitdir: store/.git\n")
    box = Sandbox.of(ToolSettings(), readonly=git_paths(ws))

    for command in ("echo 'gitdir: evil' > .git", "rm -f .git", "echo x >> store/.git/config"):
        code, output = await bash(command, ws, box)
        assert code != 0, (command, output)

    assert (ws / ".git").read_text() == "gitdir: store/.git\n"
    assert (store / "config").read_text() == CONFIG


@needs_bwrap
@pytest.mark.anyio
async def test_with_git_writes_a_command_changes_hooks_and_config(tmp_path: Path,
                                                                  ws: Path) -> None:
    git = repo(ws)
    (tmp_path / "task.yaml").write_text("goal: x\nworkspace: ws\ngit_writes: true\n")
    task = load_task(tmp_path / "task.yaml")
    assert task.git_writes and dataclasses.replace(task, git_writes=False) != task
    box = await job_sandbox("j1", task, job_settings(tmp_path), None)
    assert box.readonly == ()

    code, output = await bash(f"{ATTACKS['config']} && {ATTACKS['hook']}", ws, box)

    assert code == 0, output
    assert "fsmonitor" in (git / "config").read_text()
    assert (git / "hooks" / "pre-commit").exists()
