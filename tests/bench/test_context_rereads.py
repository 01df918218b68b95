"""``gliding bench context`` counts post-compaction re-reads per strategy: recorded calls that
repeat an earlier call (same tool, same arguments as canonical JSON) whose result the prompt
built for the call no longer holds whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gliding.bench.context import Masked, Naive, replay, run_bench
from gliding.context.tokens import TokenCounter

COUNTER = TokenCounter()
NOTES = "notes.txt: the release is tagged v2.4.1 on branch release/2.4\n"
CONFIG = "config.yaml: retries 3, timeout_s 30\n"


def record() -> dict[str, Any]:
    def ask(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_name": tool, "tool_input": arguments}

    return {"task_id": "t1", "system": "test", "steps": [
        {"role": "system", "content": "You read files."},
        {"role": "user", "content": "Which tag is the release?"},
        ask("read_file", {"path": "notes.txt", "limit": 10}),
        {"role": "tool", "tool_name": "read_file", "content": NOTES},
        ask("read_file", {"path": "config.yaml"}),
        {"role": "tool", "tool_name": "read_file", "content": CONFIG},
        ask("read_file", {"limit": 10, "path": "notes.txt"}),  # the same call, keys reordered
        {"role": "tool", "tool_name": "read_file", "content": NOTES},
        ask("read_file", {"path": "notes.txt", "limit": 20}),  # another call
        {"role": "tool", "tool_name": "read_file", "content": NOTES},
        {"role": "assistant", "content": "v2.4.1"},
    ]}


def test_a_repeat_of_a_call_whose_result_left_the_prompt_is_a_reread() -> None:
    masked, _ = replay(record(), lambda: Masked("m", 1, "[omitted]"), COUNTER)
    naive, _ = replay(record(), Naive, COUNTER)

    assert masked.rereads == 1  # notes.txt's first result was masked when it was asked again
    assert naive.rereads == 0  # still whole in the prompt: no need to ask again
    assert masked.as_dict()["post_compaction_rereads"] == 1


def test_the_report_has_them_per_strategy_and_per_trajectory(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record()) + "\n", encoding="utf-8")

    out = run_bench(path)

    for name, entry in out["strategies"].items():
        assert entry["post_compaction_rereads"] == entry["per_trajectory"][0][
            "post_compaction_rereads"], name
        assert entry["by_source"]["test"]["post_compaction_rereads"] == entry[
            "post_compaction_rereads"]
    assert out["strategies"]["naive"]["post_compaction_rereads"] == 0
    assert out["strategies"]["obs_mask"]["post_compaction_rereads"] == 0  # keeps 10 results
    for key in ("fact_recall", "total_prompt_tokens", "cached_cost", "recoverability"):
        assert key in out["strategies"]["gliding"]  # the old keys stay
        assert key in out["strategies"]["gliding"]["by_source"]["test"]
