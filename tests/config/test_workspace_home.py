"""Workspaces in the home directory (issue 20, item 7): the home itself, a directory holding it
and every top-level dot-directory of a home (credentials and configuration) are refused,
symlinks followed, unless the host sets ``tools.allow_home_dot_workspaces`` (which never
admits the home itself). ``compose.refuse_workspace`` is what every front end applies before
anything is written; tests/integration/test_workspace_edges.py runs the front ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.config.workspace_rule import home_dot_dir, workspace_refusal
from gliding.daemon.compose import refuse_workspace
from gliding.errors import TaskFileError

DOT_DIRS = (".ssh", ".gnupg", ".aws", ".config/gcloud", ".kube", ".docker", ".netrc",
            ".local/share/keyrings", ".password-store", ".azure", ".gcloud", ".cache/x")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home" / "user"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def settings(tmp: Path, *, allow: bool = False) -> Settings:
    return load_settings(env={}, overrides={"data_dir": str(tmp / "data"),
                                            "tools.allow_home_dot_workspaces": allow})


def task_at(tmp: Path, workspace: str | Path) -> Path:
    path = tmp / "task.yaml"
    path.write_text(f"goal: x\nworkspace: '{workspace}'\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("dot", DOT_DIRS)
def test_a_workspace_in_a_home_dot_directory_is_refused(tmp_path: Path, home: Path,
                                                        dot: str) -> None:
    (home / ".ssh").mkdir(mode=0o700)
    task = load_task(task_at(tmp_path, f"~/{dot}/ws"))  # loading reads; the host decides

    with pytest.raises(TaskFileError) as exc:
        refuse_workspace(task, settings(tmp_path))

    top = dot.split("/")[0]
    assert f"is {home / dot / 'ws'}, inside {home / top}, a dot-directory of a home " \
        "directory" in exc.value.message
    assert "tools.allow_home_dot_workspaces: true" in (exc.value.hint or "")
    assert exc.value.exit_code == 2
    assert not (home / dot).exists() or dot == ".ssh"  # nothing was made
    assert list((home / ".ssh").iterdir()) == []


@pytest.mark.parametrize("made", ["before the task is read", "after"])
def test_a_symlink_to_a_home_dot_directory_is_refused(tmp_path: Path, home: Path,
                                                      made: str) -> None:
    (home / ".ssh").mkdir()
    if made == "after":
        task = load_task(task_at(tmp_path, "ws"))
        (tmp_path / "ws").symlink_to(home / ".ssh")
    else:
        (tmp_path / "ws").symlink_to(home / ".ssh")
        task = load_task(task_at(tmp_path, "ws"))

    with pytest.raises(TaskFileError) as exc:
        refuse_workspace(task, settings(tmp_path))

    assert f" is {home}/.ssh, inside {home}/.ssh, a dot-directory" in exc.value.message
    assert list((home / ".ssh").iterdir()) == []


@pytest.mark.parametrize(("where", "reason"), [
    ("home", "the home directory"),
    ("parent", "a directory that holds the home directory"),
])
def test_the_home_and_a_directory_holding_it_are_refused_even_when_dot_dirs_are_allowed(
        tmp_path: Path, home: Path, where: str, reason: str) -> None:
    workspace = home if where == "home" else home.parent
    with pytest.raises(TaskFileError, match=reason):  # already when the task file is read
        load_task(task_at(tmp_path, workspace))
    assert workspace_refusal(workspace, home=home, allow_home_dot_dirs=True) == (
        reason if where == "home" else f"{reason} {home}")


def test_the_setting_allows_a_dot_directory_and_a_project_needs_none(tmp_path: Path,
                                                                     home: Path) -> None:
    dotted = load_task(task_at(tmp_path, "~/.config/myapp-dev"))
    project = load_task(task_at(tmp_path, "~/projects/x"))

    assert refuse_workspace(dotted, settings(tmp_path, allow=True)) == home / ".config/myapp-dev"
    assert refuse_workspace(project, settings(tmp_path)) == home / "projects" / "x"
    assert not (home / ".config").exists() and not (home / "projects").exists()


def test_dot_directories_of_every_home_are_guarded_not_only_the_users() -> None:
    mine = Path("/home/me")
    assert home_dot_dir(Path("/home/bob/.ssh"), (mine,)) == Path("/home/bob/.ssh")
    assert home_dot_dir(Path("/Users/bob/.aws/x"), (mine,)) == Path("/Users/bob/.aws")
    assert home_dot_dir(Path("/root/.kube/x"), (mine,)) == Path("/root/.kube")
    assert home_dot_dir(Path("/home/me/.config"), (mine,)) == Path("/home/me/.config")
    assert home_dot_dir(Path("/srv/me/.config"), (Path("/srv/me"),)) == Path("/srv/me/.config")
    assert home_dot_dir(Path("/home/me/src/.hidden"), (mine,)) is None  # below a project
    assert home_dot_dir(Path("/home/me/projects"), (mine,)) is None
    assert workspace_refusal(Path("/home/bob/.ssh"), home=mine) == (
        "inside /home/bob/.ssh, a dot-directory of a home directory (credentials and "
        "configuration live there)")
    assert workspace_refusal(Path("/home/bob/.ssh"), home=mine,
                             allow_home_dot_dirs=True) is None
