"""Pictures without the ``plots`` extra: ``gliding bench context`` refuses its PNG before the
benchmark runs, ``gliding memory graph``'s drawing names the extra; both exit 2.
"Not installed" is ``sys.modules["matplotlib"] = None``, what ``find_spec`` and ``import``
report for an absent package."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gliding.cli.picture import draw
from gliding.errors import UsageError
from tests.cli.cli_support import invoke

SAID = "install gliding[plots]"


@pytest.fixture(autouse=True)
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


def test_bench_context_refuses_the_plot_before_it_runs(tmp_path: Path) -> None:
    steps = [{"role": "user", "tool_name": None, "content": "Fix the bug"},
             {"role": "assistant", "tool_name": "bash", "content": "Looking.",
              "tool_input": "ls"}]
    (tmp_path / "traj.jsonl").write_text(json.dumps({"task_id": "t", "steps": steps}) + "\n")

    result = invoke(["bench", "context", "traj.jsonl", "--out", "r.json"], cwd=tmp_path)

    assert result.code == 2, result
    assert SAID in result.stderr and "pip install 'gliding[plots]'" in result.stderr
    assert not (tmp_path / "r.json").exists()  # refused before the benchmark ran


def test_the_memory_graph_picture_names_the_extra(tmp_path: Path) -> None:
    rows = [("gliding://job/j", "name", "a job", False)]
    with pytest.raises(UsageError) as caught:
        draw("gliding://job/j", rows, tmp_path / "g.png")
    assert SAID in caught.value.message and caught.value.exit_code == 2
    assert not (tmp_path / "g.png").exists()
