"""The benchmark commands end to end on small synthetic inputs written by the tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gliding.bench.context import run_bench
from gliding.context.tokens import TokenCounter

GLIDING = str(Path(sys.executable).parent / "gliding")


def trajectory(n_steps: int, big: int) -> dict:
    steps = [{"role": "system", "tool_name": None, "content": "You are a coding agent."},
             {"role": "user", "tool_name": None, "content": "Fix the bug in src/app/core.py"}]
    for i in range(n_steps):
        steps.append({"role": "assistant", "tool_name": "bash",
                      "content": f"Let me look at step {i}.", "tool_input": f"cat src/m_{i}.py"})
        body = "\n".join(f"{k}: def handler_{i}_{k}(x): return x" for k in range(big))
        steps.append({"role": "tool", "tool_name": "bash", "content": body})
    steps.append({"role": "assistant", "tool_name": "bash", "content": "Edit handler_3_7 now.",
                  "tool_input": "edit src/m_3.py handler_3_7"})
    return {"task_id": f"t{n_steps}", "system": "synthetic", "steps": steps}


def write(tmp: Path, records: list[dict]) -> Path:
    path = tmp / "traj.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_context_bench_naive_totals_are_the_appended_prompts(tmp_path: Path) -> None:
    record = trajectory(3, 5)
    result = run_bench(write(tmp_path, [record]))
    counter = TokenCounter()
    texts: list[str] = []
    expected = 0
    for step in record["steps"]:
        if step["role"] == "assistant":
            expected += sum(counter.count(t) + 4 for t in texts)
        text = step["content"]
        if step.get("tool_input") and step["tool_input"] not in text:
            text += "\n" + step["tool_input"]
        texts.append(text)
    assert result["strategies"]["naive"]["total_prompt_tokens"] == expected


@pytest.mark.heavy
def test_context_bench_cli_writes_json_and_png(tmp_path: Path) -> None:
    path = write(tmp_path, [trajectory(40, 150), trajectory(5, 3)])
    out = tmp_path / "r.json"
    done = subprocess.run([GLIDING, "bench", "context", str(path), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["trajectories"] == 2
    gliding = result["strategies"]["gliding"]
    naive = result["strategies"]["naive"]
    assert gliding["recoverability"] == 1.0
    assert gliding["total_prompt_tokens"] < naive["total_prompt_tokens"]
    assert gliding["peak_prompt_tokens"] <= 16000 < naive["peak_prompt_tokens"]
    assert set(result["strategies"]) == {"naive", "obs_mask", "compact_recent", "gliding"}
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_context_bench_rejects_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"steps": []}\nnot json\n')
    done = subprocess.run([GLIDING, "bench", "context", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "bad.jsonl:2" in done.stderr


def test_memory_bench_cli_on_a_tiny_conversation(tmp_path: Path) -> None:
    sample = {
        "sample_id": "s0",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Pixel."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! I started pottery."},
            ],
            "session_2_date_time": "2:00 pm on 9 June, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "Pixel broke my vase today."},
                {"speaker": "Bob", "dia_id": "D2:2", "text": "I can make you a new one."},
            ],
        },
        "qa": [{"question": "What is the name of Ann's cat?", "answer": "Pixel",
                "evidence": ["D1:1"], "category": 1},
               {"question": "What did Bob start?", "answer": "pottery",
                "evidence": ["D1:2"], "category": 1}],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    done = subprocess.run([GLIDING, "bench", "memory", str(path), "--conversations", "0",
                           "--budgets", "64,512", "--no-vectors"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["questions"] == 2
    assert result["methods"]["gliding"]["512"]["recall"] == 1.0
    assert set(result["methods"]) >= {"recency", "bm25", "gliding"}
