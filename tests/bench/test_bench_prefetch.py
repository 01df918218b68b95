"""`gliding bench context` per-source figures and prompt dumps; `gliding bench prefetch`: gaps
per file and system, the ranking against recency, the working set and the warming methods."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gliding.bench.context import run_bench
from gliding.bench.prefetch import run_prefetch_bench, table
from gliding.config.settings import ContextSettings, WindowSettings
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


# the engine saves from the first message, so that a short record has gaps to find
SAVING = ContextSettings(window=WindowSettings(whole_below=0.0))


def table_record(system: str, checks: int) -> dict:
    """A 300-row table read once, then ``checks`` actions that each use one row (and read a
    large unrelated log), then one that uses row 150: a row no preview of the table shows."""
    rows = "\n".join(f"row_{k}.val = {k}" for k in range(300))
    steps = [{"role": "system", "content": "You are an agent."},
             {"role": "user", "content": "Audit the table."},
             {"role": "assistant", "content": "Read it.", "tool_name": "bash",
              "tool_input": "cat table.txt"},
             {"role": "tool", "tool_name": "bash", "content": rows}]
    for i in range(checks):
        steps.append({"role": "assistant", "content": f"Check row_{i}.val.", "tool_name": "bash",
                      "tool_input": f"grep -r row_{i}.val logs"})
        steps.append({"role": "tool", "tool_name": "bash", "content": "\n".join(
            f"log line {k}: noise_{i}_{k}.x ok" for k in range(120))})
    steps.append({"role": "assistant", "content": "Fix it.", "tool_name": "bash",
                  "tool_input": "sed -i s/1/2/ row_150.val"})
    return {"task_id": system, "system": system, "steps": steps}


def test_gaps_are_identifiers_the_prompt_lacks_reported_per_system(tmp_path: Path) -> None:
    path = write(tmp_path, [table_record("alpha", 12), table_record("beta", 4)])

    result = run_prefetch_bench(path, settings=SAVING)

    gaps = result["gaps"]
    # a call with an engine per action but the first; each uses one row of the table
    assert gaps["calls"] == result["calls"] == 13 + 5
    assert result["identifiers_checked"] == gaps["identifiers_checked"] == 18
    assert "tool result" in result["fact_definition"]
    assert set(result["by_system"]) == {"alpha", "beta"}
    assert [s["records"] for s in result["by_system"].values()] == [1, 1]
    assert sum(s["gap_calls"] for s in result["by_system"].values()) == gaps["gap_calls"]
    # the last call of each record lacks row 150; only the table holds a row: one read-back
    assert gaps["gap_calls"] >= 2
    assert gaps["read_backs"] == {"calls": gaps["gap_calls"], "sources": gaps["gap_calls"],
                                  "needed_sources": gaps["gap_calls"]}
    assert gaps["gap_rate"] == round(gaps["gap_calls"] / gaps["calls"], 4)
    # the actions keep using the table: its access history ranks it first; the newest
    # results are logs
    assert gaps["prefetch"] == {"top1": 1.0, "top3": 1.0}
    assert gaps["recency"]["top3"] < 0.5
    assert set(result["methods"]) == {"none", "lru", "gliding"}
    assert result["per_trajectory"][0]["gaps"]["calls"] == 13


def test_an_identifier_the_prompt_shows_is_no_gap(tmp_path: Path) -> None:
    steps = [{"role": "system", "content": "You are an agent."},
             {"role": "user", "content": "Look."},
             {"role": "assistant", "content": "ls", "tool_name": "bash", "tool_input": "ls"},
             {"role": "tool", "tool_name": "bash", "content": "value_id.x = 1"},
             {"role": "assistant", "content": "Use it.", "tool_name": "bash",
              "tool_input": "cat value_id.x"}]
    path = write(tmp_path, [{"task_id": "t", "system": "s", "steps": steps}])

    gaps = run_prefetch_bench(path, settings=SAVING)["gaps"]

    assert gaps["identifiers_checked"] == 1 and gaps["gap_calls"] == 0
    assert gaps["gap_rate"] == 0.0 and gaps["prefetch"]["top3"] is None  # nothing to rank


def test_the_working_set_fills_gaps_after_the_cached_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, [table_record("alpha", 12)])

    ws = run_prefetch_bench(path, settings=SAVING, budget=100)["gaps"]["working_set"]

    assert ws["budget_tokens"] == 100 and ws["blocks"] > 0 and ws["tokens"] > 0
    # every prompt is the prompt without the block, plus the block, with no cache mark on it
    assert ws["prefix_kept"] == 1.0
    assert ws["gap_rate"] < ws["gap_rate_without"] and ws["hit_rate"] > 0
    assert ws["gap_calls_closed"] > 0


def test_the_table_has_a_row_for_the_file_and_each_system(tmp_path: Path) -> None:
    path = write(tmp_path, [table_record("alpha", 3), table_record("beta", 2)])

    text = table(run_prefetch_bench(path, settings=SAVING))

    rows = [line.split()[0] for line in text.splitlines() if line[:5] in ("all  ", "alpha",
                                                                         "beta ")]
    assert rows == ["all", "alpha", "beta"]
    assert "identifiers checked" in text and "gliding" in text


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
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"none", "lru", "gliding"}
    assert "gap_rate" in result["gaps"] and "synthetic" in result["by_system"]
    assert "identifiers checked" in done.stdout
