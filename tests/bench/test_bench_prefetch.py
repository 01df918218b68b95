"""`gliding bench context` per-source figures and prompt dumps; `gliding bench prefetch`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gliding.bench.context import run_bench
from gliding.bench.prefetch import run_prefetch_bench
from tests.bench.test_bench_cli import trajectory, write

GLIDING = str(Path(sys.executable).parent / "gliding")


def test_context_bench_reports_each_source_with_the_fields_of_the_total(tmp_path: Path) -> None:
    a, b = trajectory(12, 60), trajectory(4, 3)
    b["system"] = "other"
    result = run_bench(write(tmp_path, [a, b]))
    gliding = result["strategies"]["gliding"]
    assert set(gliding["by_source"]) == {"synthetic", "other"}
    for source in gliding["by_source"].values():
        for key in ("total_prompt_tokens", "cached_cost", "fact_recall", "vs_naive",
                    "compactions_per_call", "max_compactions_per_call", "working_set_tokens"):
            assert key in source
    parts = sum(s["total_prompt_tokens"] for s in gliding["by_source"].values())
    assert parts == gliding["total_prompt_tokens"]
    assert gliding["compactions"] > 0 and gliding["max_compactions_per_call"] == 1
    rows = {r["task_id"]: r for r in gliding["per_trajectory"]}
    assert rows["t12"]["facts"] == 1 and rows["t12"]["compactions"] > 0


def test_dump_prompts_writes_one_readable_file_per_call(tmp_path: Path) -> None:
    record = trajectory(6, 40)
    run_bench(write(tmp_path, [record]), dump_prompts=tmp_path / "prompts")
    (folder,) = (tmp_path / "prompts").iterdir()
    calls = sorted(folder.iterdir())
    assert len(calls) == sum(1 for s in record["steps"] if s["role"] == "assistant")
    last = calls[-1].read_text()
    assert last.startswith("=== system") and "tokens)" in last
    assert last.rstrip().endswith("edit src/m_3.py handler_3_7")  # the next action, labelled
    assert "=== next action (not in the prompt)" in last


def test_prefetch_bench_compares_three_methods_on_equal_terms(tmp_path: Path) -> None:
    result = run_prefetch_bench(write(tmp_path, [trajectory(20, 60)]))
    methods = result["methods"]
    assert set(methods) == {"none", "lru", "gliding"}
    assert methods["none"]["warmed"] == 0 and methods["none"]["hit_rate"] == 0.0
    assert methods["lru"]["warmed"] <= result["calls"] * result["n"]
    assert methods["gliding"]["warmed"] <= result["calls"] * result["n"]
    for m in methods.values():
        assert 0.0 <= m["hit_rate"] <= 1.0 and 0.0 <= m["precision"] <= 1.0
        assert m["hits"] <= min(m["needed"], m["warmed"]) or m["warmed"] == 0


@pytest.mark.heavy
def test_prefetch_bench_cli_writes_json(tmp_path: Path) -> None:
    path = write(tmp_path, [trajectory(10, 40)])
    out = tmp_path / "p.json"
    done = subprocess.run([GLIDING, "bench", "prefetch", str(path), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(out.read_text())["methods"]) == {"none", "lru", "gliding"}
