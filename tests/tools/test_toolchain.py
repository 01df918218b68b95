"""The sandbox's toolchain: what of the host's interpreters and tools a command gets, and what
it never gets.

The pure rule (``mount_refusal``, ``plan``) is tested on paths alone, with hypothesis for the
promise that matters (no credential or configuration directory, no home, no data directory is
ever mounted); ``resolve_toolchain`` against a fake home in tmp (``.ssh/id_rsa`` in it, a
pyenv with shims) and the interpreter running these tests; and the sandbox with real
bubblewrap: ``python -m pytest`` runs in it with the project's venv, with a pyenv interpreter
through its shims, while the home's other files, the data directory and the network stay out.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.config.settings import ToolchainSettings, ToolSettings
from gliding.config.task import Task, load_task_text, task_from_record, task_record
from gliding.errors import TaskFileError, ToolError
from gliding.tools.sandbox import Sandbox, bwrap_problem
from gliding.tools.shell import CommandResult, run_command
from gliding.tools.toolchain import Toolchain, resolve_toolchain
from gliding.tools.toolchain_plan import (
    IN_HOME,
    SECRETS_IN_HOME,
    SYSTEM_DIRS,
    Python,
    Request,
    allowed,
    homes_of,
    mount_refusal,
    plan,
    pyenv_names,
    toolchain_shape,
)

PROBLEM = bwrap_problem()
needs_bwrap = pytest.mark.skipif(
    PROBLEM is not None,
    reason=f"bubblewrap cannot run here ({PROBLEM}); scripts/setup.sh installs it")
HOME = Path("/home/u")
DATA = Path("/srv/proj/.gliding")
WS = Path("/srv/proj/ws")
# the interpreter running these tests: the project's venv (scripts/setup.sh), whose base is an
# installation that may lie under the home directory (pyenv)
VENV = Path(sys.prefix)
IN_VENV = sys.prefix != sys.base_prefix
BASE = Path(os.path.realpath(sys.base_prefix))


def _why(path: str) -> str | None:
    return mount_refusal(Path(path), home=HOME, data_dir=DATA, workspace=WS)


# --- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "reason"), [
    ("/", "the root directory"),
    ("/etc/ssl", "inside /etc"),
    ("/proc/1", "inside /proc"),
    ("/run/docker.sock", "inside /run"),
    ("/home", "shared by everyone"),
    ("/tmp", "shared by everyone"),
    ("/home/u", "the home directory"),
    ("/home/u/.ssh", "~/.ssh"),
    ("/home/u/.ssh/keys", "inside ~/.ssh"),
    ("/home/u/.aws", "~/.aws"),
    ("/home/u/.config/pypoetry", "inside ~/.config"),
    ("/home/u/.local", "holds ~/.local/share/keyrings"),
    ("/home/u/.cargo", "holds ~/.cargo/credentials"),
    ("/home/u/.netrc", "~/.netrc"),
    ("/home/bob/.ssh", "a .ssh directory"),
    ("/opt/tools/.docker/bin", "a .docker directory"),
    ("/srv/proj/.gliding", "the data directory"),
    ("/srv/proj/.gliding/jobs", "inside the data directory"),
    ("/srv/proj", "holds the data directory"),
    ("/srv/other", None),
    ("/home/u/.pyenv/versions/3.11.7", None),
    ("/home/u/.local/bin", None),
    ("/home/u/.local/lib/python3.11", None),
    ("/home/u/.local/share/uv/python/cpython-3.12", None),
    ("/home/u/.cache/pypoetry/virtualenvs/app-x", "inside the home directory ~"),  # no venv
    ("/home/u/miniconda3", "inside the home directory ~"),  # .condarc, pkgs, other envs
    ("/home/u/miniconda3/pkgs", "inside the home directory ~"),
    ("/home/u/miniconda3/envs/app", None),
    ("/home/u/miniconda3/bin", None),
    ("/home/u/.conda/envs/app/lib", None),
    ("/opt/conda", None),
    # F4: below a home only toolchain shapes; any other home is guarded as the user's is
    ("/home/u/.pyenv", "inside the home directory ~"),
    ("/home/u/.pyenv/plugins", "inside the home directory ~"),
    ("/home/u/.bashrc", "inside the home directory ~"),
    ("/home/u/.profile", "inside the home directory ~"),
    ("/home/u/.env", "inside the home directory ~"),
    ("/home/u/.huggingface", "inside the home directory ~"),
    ("/home/u/.kaggle", "inside the home directory ~"),
    ("/home/u/.s3cfg", "inside the home directory ~"),
    ("/home/u/.claude", "inside the home directory ~"),
    ("/home/u/.local/share/other", "inside the home directory ~"),
    ("/home/u/.local/lib/node_modules", "inside the home directory ~"),
    ("/home/u/Documents", "inside the home directory ~"),
    ("/home/u/src/app", "inside the home directory ~"),
    ("/home/bob", "the home directory /home/bob"),
    ("/home/bob/.bashrc", "inside the home directory /home/bob"),
    ("/home/bob/.pyenv", "inside the home directory /home/bob"),
    ("/home/bob/.pyenv/versions/3.12.1", None),
    ("/root", "shared by everyone"),
    ("/root/.boto", "inside the home directory /root"),
    ("/root/.pyenv/versions/3.11.7/bin", None),
    ("/Users/ann/Library", "inside the home directory /Users/ann"),
    ("/var/mail/u", "inside /var/mail"),
    ("/var/spool/cron", "inside /var/spool"),
    ("/var/backups", "inside /var/backups"),
    ("/var/cache/apt", "inside /var/cache"),
    ("relative/bin", "not an absolute path"),
])
def test_what_is_never_mounted(path: str, reason: str | None) -> None:
    why = _why(path)
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why


def test_below_a_home_a_venv_is_mounted_the_home_never_whatever_it_holds() -> None:
    venv = Path("/home/u/.cache/pypoetry/virtualenvs/app-x")
    for path in (venv, venv / "lib/python3.11"):
        assert mount_refusal(path, home=HOME, data_dir=DATA, workspace=WS, venvs=(venv,)) is None
    # a pyvenv.cfg in the home itself (or above it) admits nothing
    assert mount_refusal(HOME, home=HOME, data_dir=None, workspace=None,
                         venvs=(HOME,)) == "the home directory"
    assert "inside the home directory" in (mount_refusal(
        HOME / "Documents", home=HOME, data_dir=None, workspace=None, venvs=(HOME,)) or "")


def test_every_home_of_the_host_is_guarded_and_a_directory_holding_one_refused() -> None:
    carol = Path("/srv/users/carol")
    why = functools.partial(mount_refusal, home=HOME, data_dir=None, workspace=None,
                            homes=(carol, Path("/bin"), Path("/nonexistent")))
    assert why(carol / "notes") == f"inside the home directory {carol}, of which are mounted " \
        + IN_HOME
    assert why(Path("/srv/users")) == f"holds the home directory {carol}"
    assert why(carol / ".pyenv/versions/3.12.1") is None
    assert why(Path("/bin")) is None and why(Path("/usr/sbin")) is None  # system homes: not
    assert homes_of(Path("/srv/x"), None) == (Path("/root"),)


def test_a_conda_base_prefix_mounts_its_bin_lib_and_include_not_its_root() -> None:
    base = Path("/home/u/miniconda3")
    py = Python(base / "bin/python", base, base, "3.11")
    decided = plan(Request(path=(base / "bin",), home=HOME, data_dir=DATA, workspace=WS,
                           pythons=(py,)))
    assert decided.mounts == (base / "bin", base / "include", base / "lib")
    assert decided.refused == ()


def test_a_mount_holding_the_workspace_is_refused_one_inside_it_is_not_needed() -> None:
    assert "holds the workspace" in (mount_refusal(Path("/w"), home=HOME, data_dir=None,
                                                   workspace=Path("/w/ws")) or "")
    decided = plan(Request(path=(WS / "node_modules/.bin",), home=HOME, data_dir=DATA,
                           workspace=WS))
    assert decided.mounts == () and decided.path == (WS / "node_modules/.bin",)


def test_plan_keeps_the_path_order_puts_the_venv_first_and_mounts_only_what_is_not_there() -> None:
    py = Python(Path("/home/u/app/.venv/bin/python"), Path("/home/u/app/.venv"),
                Path("/home/u/.pyenv/versions/3.11.7"), "3.11",
                user_lib=Path("/home/u/.local/lib/python3.11"), user_base=Path("/home/u/.local"))
    decided = plan(Request(
        path=(Path("/home/u/.local/bin"), Path("/home/u/.config/x/bin"), Path("/usr/bin"),
              Path("/home/u/.pyenv/versions/3.11.7/bin"), Path("/home/u"), Path("/usr/bin")),
        home=HOME, data_dir=DATA, workspace=WS, venv=Path("/home/u/app/.venv"), pythons=(py,),
        mounts=(Path("/srv/data"), Path("/home/u/.ssh")), venvs=(Path("/home/u/app/.venv"),)))

    assert decided.path == (Path("/home/u/app/.venv/bin"), Path("/home/u/.local/bin"),
                            Path("/usr/bin"), Path("/home/u/.pyenv/versions/3.11.7/bin"))
    assert decided.mounts == (  # sorted, and none inside another (bin inside its version)
        Path("/home/u/.local/bin"), Path("/home/u/.local/lib/python3.11"),
        Path("/home/u/.pyenv/versions/3.11.7"), Path("/home/u/app/.venv"), Path("/srv/data"))
    assert decided.user_base == Path("/home/u/.local")
    assert [(str(f.path), f.what) for f in decided.refused] == [
        ("/home/u/.config/x/bin", "PATH entry"), ("/home/u", "PATH entry"),
        ("/home/u/.ssh", "mount")]
    assert "inside ~/.config" in str(decided.refused[0])


def test_with_auto_off_path_entries_are_not_mounted_only_kept_where_they_exist_anyway() -> None:
    decided = plan(Request(path=(Path("/opt/x/bin"), Path("/srv/tools/bin"), Path("/usr/bin")),
                           home=HOME, data_dir=DATA, workspace=WS, mount_path=False))
    assert decided.path == (Path("/opt/x/bin"), Path("/usr/bin")) and decided.mounts == ()


_PARTS = st.sampled_from(["u", "home", "srv", "proj", ".gliding", "jobs", "bin", "lib", ".ssh",
                          ".config", ".local", "share", "keyrings", ".cache", "huggingface",
                          ".pyenv", "versions", "3.11", ".aws", "..", "."])
_PATHS = st.lists(_PARTS, max_size=6).map(lambda parts: Path("/", *parts))


@pytest.mark.heavy  # 300 examples
@settings(max_examples=300, deadline=None)
@given(path=st.lists(_PATHS, max_size=6), prefixes=st.lists(_PATHS, max_size=4),
       extra=st.lists(_PATHS, max_size=3), venv=st.none() | _PATHS)
def test_no_plan_ever_mounts_a_secret_the_home_or_the_data_directory(
        path: list[Path], prefixes: list[Path], extra: list[Path], venv: Path | None) -> None:
    home = Path("/home/u")
    pythons = tuple(Python(p / "bin/python", p, p, "3.11", user_lib=p / "lib")
                    for p in prefixes)
    decided = plan(Request(path=tuple(path), home=home, data_dir=DATA, workspace=WS,
                           venv=venv, pythons=pythons, mounts=tuple(extra)))
    for mount in decided.mounts:
        assert mount.is_absolute() and ".." not in mount.parts
        assert not home.is_relative_to(mount)  # neither the home nor a directory holding it
        assert not (mount.is_relative_to(DATA) or DATA.is_relative_to(mount))
        for name in SECRETS_IN_HOME:
            secret = home / name
            assert not (mount.is_relative_to(secret) or secret.is_relative_to(mount)), mount
        assert not {".ssh", ".aws", ".config", ".gliding"} & set(mount.parts)
        for h in homes_of(mount, home):  # below a home, only a toolchain's shape
            assert not mount.is_relative_to(h) or toolchain_shape(mount, h), mount
    shown = set(decided.mounts)
    for entry in decided.path:  # every PATH entry is there: mounted, or the system's
        assert any(entry.is_relative_to(m) for m in shown) or entry.is_relative_to(WS) \
            or any(entry.is_relative_to(d) for d in SYSTEM_DIRS)


@pytest.mark.parametrize(("path", "patterns", "expected"), [
    ("/srv/venvs/app", ["/srv/venvs"], True),
    ("/srv/venvs/app/bin", ["/srv/venvs/*"], True),
    ("/srv/venvs2", ["/srv/venvs"], False),
    ("/srv/other", ["/srv/venvs/*", "/opt/x"], False),
    ("/srv/a/.venv", ["/srv/*/.venv"], True),
    ("/srv/a", [], False),
    # F2: a pattern component stands for exactly one component; '..' is never admitted
    ("/srv/a/b/.venv", ["/srv/*/.venv"], False),
    ("/srv/a/.venv/lib", ["/srv/*/.venv"], True),
    ("/srv/venvs/../../home/u/.ssh", ["/srv/venvs"], False),
    ("/srv/venvs/../../home/u/.ssh", ["/srv/venvs/*"], False),
    ("/srv/venvs/..", ["/srv/venvs/*"], False),
    ("/home/u/.ssh", ["/srv/venvs/*"], False),
    ("/home/u/.ssh", ["/*"], True),  # matched, then refused by mount_refusal
    ("/srv/x", ["/"], False),  # the root admits nothing
    ("/srv/x", ["/srv/.."], False),
    ("relative/x", ["relative"], False),
])
def test_allow_patterns(path: str, patterns: list[str], expected: bool) -> None:
    assert allowed(Path(path), patterns) is expected


def test_pyenv_names_follow_pyenvs_order() -> None:
    assert pyenv_names("3.12.1:3.11.7", "3.10.13", "3.9.18") == ["3.12.1", "3.11.7"]
    assert pyenv_names(None, "# pinned\n3.10.13\n", "3.9.18") == ["3.10.13"]
    assert pyenv_names(None, None, "3.9.18\n3.8.18\n") == ["3.9.18", "3.8.18"]
    assert pyenv_names(None, "\n", None) == ["system"]


# --- resolve_toolchain: the host read ------------------------------------------------------


def _task(tmp: Path, extra: str = "") -> Task:
    (tmp / "ws").mkdir(exist_ok=True)
    return load_task_text(f"goal: fix the tests\nworkspace: ws\n{extra}", "task.yaml", tmp)


@pytest.fixture
def fake_home(tmp_path: Path) -> Path:
    """A home with a key, a cloud credential, a config dir, ~/.local and a pyenv whose shims
    stand for a version linked to the interpreter running the tests."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".aws").mkdir()
    (home / ".config/tool/bin").mkdir(parents=True)
    (home / ".local/bin").mkdir(parents=True)
    root = home / ".pyenv"
    (root / "shims").mkdir(parents=True)
    (root / "bin").mkdir()
    shim = root / "shims/python"
    shim.write_text(f'#!/usr/bin/env bash\nexec "{root}/libexec/pyenv" exec "$0" "$@"\n')
    shim.chmod(0o755)
    version = root / "versions/3.99.0/bin"
    version.mkdir(parents=True)
    (version / "python").symlink_to(os.path.realpath(sys.executable))
    (root / "version").write_text("3.99.0\n")
    return home


def _resolve(tmp: Path, home: Path, path: list[str | Path], *, task: Task | None = None,
             settings: ToolSettings | None = None, **env: str) -> Toolchain:
    environ = {"PATH": ":".join(str(p) for p in path), **env}
    return resolve_toolchain(settings or ToolSettings(), task or _task(tmp),
                             data_dir=tmp / "ws/.gliding", environ=environ, home=home)


def test_the_fake_homes_ssh_key_is_never_mounted_and_shims_become_their_version(
        tmp_path: Path, fake_home: Path) -> None:
    chain = _resolve(tmp_path, fake_home, [
        fake_home / ".pyenv/shims", fake_home / ".pyenv/bin", fake_home / ".ssh",
        fake_home / ".config/tool/bin", fake_home, fake_home / ".local/bin", "/usr/bin"],
        PYENV_ROOT=str(fake_home / ".pyenv"))

    version = fake_home / ".pyenv/versions/3.99.0"
    assert chain.path[:3] == (str(version / "bin"), str(fake_home / ".local/bin"), "/usr/bin")
    assert version / "bin" in chain.mounts or version in chain.mounts
    assert fake_home / ".local/bin" in chain.mounts
    for mount in chain.mounts:
        assert not (fake_home / ".ssh").is_relative_to(mount)
        assert not mount.is_relative_to(fake_home / ".ssh")
        assert not mount.is_relative_to(fake_home / ".config")
        assert mount != fake_home / ".pyenv"  # only its versions, never pyenv whole
    refused = {str(f.path): f.why for f in chain.refused}
    assert "~/.ssh" in refused[str(fake_home / ".ssh")]
    assert "~/.config" in refused[str(fake_home / ".config/tool/bin")]
    assert refused[str(fake_home)] == "the home directory"


def test_pyenv_version_comes_from_the_environment_then_the_workspace(
        tmp_path: Path, fake_home: Path) -> None:
    other = fake_home / ".pyenv/versions/3.98.1/bin"
    other.mkdir(parents=True)
    (other / "python").symlink_to(os.path.realpath(sys.executable))
    shims = [fake_home / ".pyenv/shims", "/usr/bin"]

    assert _resolve(tmp_path, fake_home, shims, PYENV_VERSION="3.98.1").path[0] == str(other)
    (tmp_path / "ws/.python-version").write_text("3.98\n")  # a prefix: the newest 3.98.x
    assert _resolve(tmp_path, fake_home, shims).path[0] == str(other)
    (tmp_path / "ws/.python-version").write_text("../../../.ssh\n")  # never out of versions/
    assert all(".ssh" not in p for p in _resolve(tmp_path, fake_home, shims).path)


@pytest.mark.skipif(not IN_VENV, reason="the tests do not run in a virtual environment")
def test_a_venv_and_its_base_are_mounted_and_named(tmp_path: Path) -> None:
    chain = resolve_toolchain(ToolSettings(), _task(tmp_path), data_dir=tmp_path / "data",
                              environ={"PATH": f"{VENV}/bin:/usr/bin:/bin",
                                       "VIRTUAL_ENV": str(VENV)})
    real = Path(os.path.realpath(VENV))
    assert chain.venv == real and chain.path[0] == str(real / "bin")
    assert any(real.is_relative_to(m) for m in chain.mounts)
    assert any(BASE.is_relative_to(m) for m in chain.mounts) or BASE.is_relative_to("/usr")
    assert chain.describe().startswith(f"toolchain python {sys.version_info[0]}."
                                       f"{sys.version_info[1]} at {BASE}, venv {real}")
    assert chain.env({}, confined=True)["VIRTUAL_ENV"] == str(real)


def test_python_is_linked_to_python3_where_only_python3_exists(tmp_path: Path) -> None:
    bin_dir = tmp_path / "only3"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    chain = _resolve(tmp_path, tmp_path / "nohome", [bin_dir])
    assert chain.links == (("/run/gliding/bin/python", str(bin_dir / "python3")),)
    assert chain.path[-1] == "/run/gliding/bin"


def test_auto_off_mounts_nothing_of_the_path(tmp_path: Path, fake_home: Path) -> None:
    off = ToolSettings(toolchain=ToolchainSettings(auto=False))
    (fake_home / ".local/bin/python3").symlink_to(os.path.realpath(sys.executable))
    chain = _resolve(tmp_path, fake_home, [fake_home / ".local/bin", "/usr/bin"],
                     settings=off, VIRTUAL_ENV=str(VENV))
    assert chain.mounts == () and chain.venv is None and chain.path[0] == "/usr/bin"


# --- the task's venv: and mounts: on a host that allows them, or not -----------------------


def _venv(where: Path) -> Path:
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text(f"home = {BASE}/bin\n")
    (where / "bin/python").symlink_to(os.path.realpath(sys.executable))
    return where


def test_a_task_venv_is_refused_on_a_host_that_does_not_allow_it(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venvs/app")
    task = _task(tmp_path, f"venv: {venv}\n")
    with pytest.raises(TaskFileError) as refused:
        _resolve(tmp_path, tmp_path / "nohome", ["/usr/bin"], task=task)
    assert "venv: " in refused.value.message and "is not allowed on this host" in \
        refused.value.message and "tools.toolchain.allow" in (refused.value.hint or "")

    allowing = ToolSettings(toolchain=ToolchainSettings(allow=(f"{tmp_path}/venvs/*",)))
    chain = _resolve(tmp_path, tmp_path / "nohome", ["/usr/bin"], task=task, settings=allowing)
    assert chain.venv == venv and chain.path[0] == str(venv / "bin") and venv in chain.mounts


def test_a_task_mount_is_refused_unless_allowed_and_never_a_secret(
        tmp_path: Path, fake_home: Path) -> None:
    data = tmp_path / "shared-data"
    data.mkdir()
    task = _task(tmp_path, f"mounts: [{data}]\n")
    with pytest.raises(TaskFileError, match=r"mounts\[0\]: .* is not allowed on this host"):
        _resolve(tmp_path, fake_home, ["/usr/bin"], task=task)
    allowing = ToolSettings(toolchain=ToolchainSettings(allow=(str(tmp_path),)))
    assert data in _resolve(tmp_path, fake_home, ["/usr/bin"], task=task,
                            settings=allowing).mounts

    secret = _task(tmp_path, f"mounts: [{fake_home}/.ssh]\n")
    with pytest.raises(TaskFileError, match="never mounted: .*~/.ssh"):
        _resolve(tmp_path, fake_home, ["/usr/bin"], task=secret, settings=allowing)
    with pytest.raises(TaskFileError, match="does not exist on this host"):
        _resolve(tmp_path, fake_home, ["/usr/bin"], settings=allowing,
                 task=_task(tmp_path, f"mounts: [{tmp_path}/gone]\n"))
    with pytest.raises(TaskFileError, match="not a virtual environment"):
        _resolve(tmp_path, fake_home, ["/usr/bin"], settings=allowing,
                 task=_task(tmp_path, f"venv: {data}\n"))


def test_a_task_record_with_dot_dot_or_a_relative_path_is_refused(tmp_path: Path) -> None:
    """F2: a broker's or worker's record is not normalized by a task file's loader."""
    record = task_record(_task(tmp_path))
    for key, value in (("mounts", ["/srv/allowed/../../home/u/Documents"]),
                       ("mounts", ["relative/dir"]), ("venv", "/srv/venvs/../../home/u")):
        with pytest.raises(TaskFileError, match="not an absolute path without '..'"):
            task_from_record({**record, key: value})
    task = task_from_record({**record, "mounts": ["/srv//allowed/./x/"]})
    assert task.mounts == (Path("/srv/allowed/x"),)


def test_a_task_path_is_allowed_by_its_real_path_only(tmp_path: Path) -> None:
    """F3: a symlink below an allowed directory does not carry its target in; an allow entry
    that is a symlink admits what it leads to."""
    outside = tmp_path / "outside/notes"
    outside.mkdir(parents=True)
    allowed_dir = tmp_path / "allowed"
    (allowed_dir / "real").mkdir(parents=True)
    (allowed_dir / "link").symlink_to(outside)
    allowing = ToolSettings(toolchain=ToolchainSettings(allow=(f"{allowed_dir}/*",)))
    with pytest.raises(TaskFileError, match=r"\(that is .*outside/notes\) is not allowed"):
        _resolve(tmp_path, tmp_path / "nohome", ["/usr/bin"], settings=allowing,
                 task=_task(tmp_path, f"mounts: [{allowed_dir}/link]\n"))
    (tmp_path / "alias").symlink_to(allowed_dir)
    via_alias = ToolSettings(toolchain=ToolchainSettings(allow=(f"{tmp_path}/alias/*",)))
    chain = _resolve(tmp_path, tmp_path / "nohome", ["/usr/bin"], settings=via_alias,
                     task=_task(tmp_path, f"mounts: [{allowed_dir}/real]\n"))
    assert allowed_dir / "real" in chain.mounts


def test_a_task_mount_under_a_home_is_refused_unless_a_toolchain(
        tmp_path: Path, fake_home: Path) -> None:
    """F4: allowing the home admits only its toolchain directories."""
    (fake_home / "Documents").mkdir()
    (fake_home / ".bashrc").write_text("export TOKEN=x\n")
    allowing = ToolSettings(toolchain=ToolchainSettings(allow=(str(fake_home),)))
    for name in ("Documents", ".bashrc", ".pyenv"):
        with pytest.raises(TaskFileError, match="never mounted: inside the home directory ~"):
            _resolve(tmp_path, fake_home, ["/usr/bin"], settings=allowing,
                     task=_task(tmp_path, f"mounts: [{fake_home / name}]\n"))
    venv = _venv(fake_home / "src/app/.venv")
    chain = _resolve(tmp_path, fake_home, ["/usr/bin"], settings=allowing,
                     task=_task(tmp_path, f"venv: {venv}\n"))
    assert venv in chain.mounts and chain.venv == venv


def _marker_python(where: Path, marker: Path, prints: str) -> Path:
    """A ``python`` that records that it ran, and prints ``prints`` as its probe's answer."""
    where.mkdir(parents=True, exist_ok=True)
    script = where / "python"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\necho '{prints}'\n")
    script.chmod(0o755)
    return script


def test_nothing_in_the_workspace_is_run_on_the_host_only_a_venvs_base_outside(
        tmp_path: Path) -> None:
    """F1: a workspace venv (a past job's commands could write it) is read as text; only the
    base its pyvenv.cfg names is asked, where that lies outside the workspace."""
    ws = tmp_path / "ws"
    marker = tmp_path / "ran-on-host"
    venv = ws / ".venv"
    (venv / "lib/python3.11/site-packages").mkdir(parents=True)
    (venv / "lib/python3.11/site-packages/zz.pth").write_text(
        f"import os; open('{marker}', 'a').write('pth')\n")
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to(os.path.realpath(sys.executable))
    _marker_python(ws / "bin", marker, "[]")
    version = f"{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}"
    (venv / "pyvenv.cfg").write_text(f"home = {BASE}/bin\nversion = {version}\n")
    task = _task(tmp_path)

    for environ in ({"VIRTUAL_ENV": str(venv)}, {}):  # activated, or only on PATH (auto off)
        for conf in (ToolSettings(), ToolSettings(toolchain=ToolchainSettings(auto=False))):
            chain = _resolve(tmp_path, tmp_path / "nohome",
                             [venv / "bin", ws / "bin", "/usr/bin"], task=task, settings=conf,
                             **environ)
            assert not marker.exists()
            if not BASE.is_relative_to("/usr"):
                assert BASE in chain.mounts, chain
            assert f"at {BASE}" in (chain.python or ""), chain

    # a pyvenv.cfg whose home is in the workspace (a fake stdlib there): nothing is asked
    (ws / "fake/bin").mkdir(parents=True)
    (ws / "fake/bin/python3").symlink_to(os.path.realpath(sys.executable))
    (venv / "pyvenv.cfg").write_text(f"home = {ws}/fake/bin\nversion = {version}\n")
    chain = _resolve(tmp_path, tmp_path / "nohome", [venv / "bin", "/usr/bin"], task=task,
                     VIRTUAL_ENV=str(venv))
    assert not marker.exists() and chain.mounts == ()
    # nor a venv outside the workspace whose pyvenv.cfg points into it
    outside = tmp_path / "outside-venv"
    (outside / "bin").mkdir(parents=True)
    (outside / "bin/python").symlink_to(os.path.realpath(sys.executable))
    (outside / "pyvenv.cfg").write_text(f"home = {ws}/fake/bin\n")
    _resolve(tmp_path, tmp_path / "nohome", [outside / "bin", "/usr/bin"], task=task)
    assert not marker.exists()
    # nor one whose pyvenv.cfg has a relative home (read against whichever cwd)
    relative = tmp_path / "relative-venv"
    _marker_python(relative / "bin", marker, "[]")
    (relative / "pyvenv.cfg").write_text("home = ws/fake/bin\n")
    _resolve(tmp_path, tmp_path / "nohome", [relative / "bin", "/usr/bin"], task=task)
    assert not marker.exists()


def test_a_probe_that_names_a_prefix_without_an_installation_is_not_believed(
        tmp_path: Path, fake_home: Path) -> None:
    """F5: an interpreter that answers ``prefix: ~/.pyenv`` (or the home) mounts nothing."""
    marker = tmp_path / "asked"
    for claimed in (fake_home / ".pyenv", fake_home):
        bin_dir = tmp_path / f"tools-{claimed.name}/bin"
        _marker_python(bin_dir, marker, json.dumps(
            [str(claimed)] * 3 + ["3.11", str(fake_home), str(fake_home / ".ssh/x")]))
        chain = _resolve(tmp_path, fake_home, [bin_dir, "/usr/bin"])
        assert marker.exists()  # outside the workspace: the host's own, asked
        marker.unlink()
        assert all(not m.is_relative_to(fake_home) for m in chain.mounts), chain.mounts
        assert chain.python == f"python at {bin_dir / 'python'}"


def test_a_mount_swapped_for_a_symlink_after_the_check_stops_the_command(
        tmp_path: Path, fake_home: Path) -> None:
    """F6: bubblewrap follows symlinks when it mounts; the sandbox checks again first."""
    shared = tmp_path / "allowed/shared"
    shared.mkdir(parents=True)
    allowing = ToolSettings(toolchain=ToolchainSettings(allow=(f"{tmp_path}/allowed/*",)))
    chain = _resolve(tmp_path, fake_home, ["/usr/bin"], settings=allowing,
                     task=_task(tmp_path, f"mounts: [{shared}]\n"))
    box = Sandbox.of(allowing, toolchain=chain)
    assert shared in chain.mounts and box.argv("true", tmp_path / "ws")
    shared.rmdir()
    shared.symlink_to(fake_home)
    with pytest.raises(ToolError, match=f"toolchain path {shared} changed"):
        box.argv("cat .ssh/id_rsa", tmp_path / "ws")
    shared.unlink()  # gone: --ro-bind-try leaves it out
    assert box.argv("true", tmp_path / "ws")


# --- with real bubblewrap ------------------------------------------------------------------


def _run(command: str, ws: Path, box: Sandbox, timeout_s: float = 60) -> CommandResult:
    return anyio.run(lambda: run_command(command, ws, ToolSettings(), sandbox=box,
                                         timeout_s=timeout_s))


def _boxed(tmp: Path, environ: dict[str, str], *, task: Task | None = None,
           settings: ToolSettings | None = None, network: bool = False) -> Sandbox:
    task = task or _task(tmp)
    conf = settings or ToolSettings()
    chain = resolve_toolchain(conf, task, data_dir=task.workspace / ".gliding", environ=environ)
    return Sandbox.of(conf, network=network, hidden=(task.workspace / ".gliding",),
                      toolchain=chain)


def _project(ws: Path) -> None:
    (ws / "x").mkdir(parents=True, exist_ok=True)
    (ws / "x/calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws / "x/test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")


@needs_bwrap
@pytest.mark.heavy  # starts pytest in the sandbox
@pytest.mark.skipif(not IN_VENV, reason="the tests do not run in a virtual environment")
def test_pytest_runs_in_the_sandbox_from_the_activated_venv(tmp_path: Path) -> None:
    box = _boxed(tmp_path, {"PATH": f"{VENV}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(VENV)})
    ws = tmp_path / "ws"
    _project(ws)

    done = _run("cd x && python -m pytest -q -p no:cacheprovider && pytest --version && "
                "pip --version && echo VE=$VIRTUAL_ENV", ws, box)

    assert done.exit_code == 0, done.output
    assert "1 passed" in done.output and f"VE={os.path.realpath(VENV)}" in done.output


@needs_bwrap
def test_a_pyenv_python_through_its_shims_and_only_its_version_of_the_home(
        tmp_path: Path) -> None:
    root = BASE.parent.parent
    if BASE.parent.name != "versions" or not (root / "shims/python").exists():
        pytest.skip(f"the tests' Python ({BASE}) is not a pyenv version with shims")
    box = _boxed(tmp_path, {"PATH": f"{root}/shims:{root}/bin:/usr/bin:/bin",
                            "PYENV_ROOT": str(root), "PYENV_VERSION": BASE.name})
    ws = tmp_path / "ws"

    done = _run("python -c 'import sys; print(sys.prefix)'; python3 -V; "
                f"ls -A {root}; ls -A {root.parent} | tr '\\n' ' '", ws, box)

    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[0] == str(BASE)
    assert lines[1].startswith(f"Python {BASE.name[:4]}")
    assert lines[2] == "versions"  # of pyenv only versions/, and of that only this version
    assert lines[3].split() == [root.name]  # of the home only the way to it
    assert f"toolchain python {sys.version_info[0]}.{sys.version_info[1]} at {BASE}" in \
        box.describe()


@needs_bwrap
@pytest.mark.skipif(not IN_VENV, reason="the tests do not run in a virtual environment")
def test_a_venv_whose_base_is_under_home_shows_no_secret_and_no_data(tmp_path: Path) -> None:
    home = Path(os.path.realpath(Path.home()))
    box = _boxed(tmp_path, {"PATH": f"{VENV}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(VENV)})
    ws = tmp_path / "ws"
    (ws / ".gliding/jobs").mkdir(parents=True)
    (ws / ".gliding/jobs/archive.sqlite3").write_text("archive")

    done = _run(f"python -c 'import pytest, sys; print(sys.base_prefix)'; "
                f"ls -A .gliding | wc -l; ls -A {home}/.ssh {home}/.config 2>&1 | wc -l; "
                f"find {home} -maxdepth 2 | sort | head -20", ws, box)

    lines = done.output.splitlines()
    assert lines[0] == str(BASE)
    assert lines[1] == "0"  # the data directory is an empty tmpfs in the sandbox
    assert lines[2] == "2"  # two "No such file or directory" lines
    for seen in lines[3:]:  # what of the home there is leads to a mounted prefix
        assert any(Path(seen) == m or m.is_relative_to(seen) or Path(seen).is_relative_to(m)
                   for m in box.toolchain.mounts), seen


@needs_bwrap
@pytest.mark.skipif(not IN_VENV, reason="the tests do not run in a virtual environment")
def test_the_network_stays_off_with_a_toolchain(tmp_path: Path) -> None:
    box = _boxed(tmp_path, {"PATH": f"{VENV}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(VENV)})
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        done = _run(f"python -c 'import socket; socket.create_connection((\"127.0.0.1\", "
                    f"{port}), timeout=3)' 2>&1 | tail -1", tmp_path / "ws", box)
    assert "Connection refused" in done.output or "unreachable" in done.output


@needs_bwrap
def test_the_toolchain_is_read_only(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    tool = tools / "bin/hello-tool"
    tool.write_text("#!/bin/sh\necho hello from the toolchain\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    box = _boxed(tmp_path, {"PATH": f"{tools}/bin:/usr/bin:/bin"})

    done = _run(f"hello-tool; echo x > {tools}/bin/new 2>&1 || echo refused", tmp_path / "ws",
                box)

    first, error, last = done.output.splitlines()
    assert (first, last) == ("hello from the toolchain", "refused")
    assert error.endswith(f"{tools}/bin/new: Read-only file system")
    assert not (tools / "bin/new").exists()


def test_a_job_says_what_of_its_toolchain_was_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gliding.bus.messages import JobEvent
    from gliding.config.settings import Settings
    from gliding.daemon.compose import job_sandbox
    from gliding.daemon.render import progress_line

    creds = tmp_path / "other/.aws/bin"
    creds.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{creds}:/usr/bin:/bin")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    events: list[JobEvent] = []
    settings = Settings(data_dir=tmp_path / "data", tools=ToolSettings(sandbox="off"))
    anyio.run(lambda: job_sandbox("j1", _task(tmp_path), settings, events.append))
    assert [e.event for e in events] == ["job.sandbox"]  # unconfined: nothing is mounted

    if PROBLEM is None:
        events.clear()
        box = anyio.run(lambda: job_sandbox("j1", _task(tmp_path), Settings(
            data_dir=tmp_path / "data"), events.append))
        lines = [progress_line(e) for e in events]
        assert lines[0] == f"job j1: {box.describe()}" and "; toolchain python" in lines[0]
        assert lines[1] == (f"job j1: toolchain: not mounted {creds} (PATH entry): inside a .aws "
                            "directory, which holds credentials, configuration or Gliding's data")
        assert str(creds) not in box.toolchain.path
