"""`context.summaries.model_written`: the model's own one-line summary of a turn."""

from __future__ import annotations

from pathlib import Path

import anyio

from gliding.agents.loop import run_agent
from gliding.testing import ScriptedLLM, call
from tests.agents.test_loop import _env


def test_model_written_summary_is_the_turns_l1_line_and_the_tool_never_sees_it(
        tmp_path: Path) -> None:
    from gliding.config.settings import ContextSettings, SummarySettings, WindowSettings

    (tmp_path / "notes.txt").write_text("hello\n")
    script = [call("read_file", path="notes.txt",
                   summary=f"read notes.txt, pass {k}: it says hello") for k in range(8)]
    llm = ScriptedLLM([*script, call("finish", summary="read it")])
    env = _env(tmp_path, llm, "DA")
    env.max_turns = 9
    env.context = ContextSettings(window=WindowSettings(target_tokens=200, max_messages=4,
                                                        keep_recent=2, max_tokens=4000),
                                  summaries=SummarySettings(budget_tokens=2000))
    result = anyio.run(run_agent, env, "Goal: read notes.txt")
    assert all(r.ok for r in result.tools[:8])  # `summary` was not passed to read_file
    offered = {t.name: t.parameters["properties"] for t in llm.requests[0].tools}
    assert "summary" in offered["read_file"]
    history = "\n".join(m.content for m in llm.requests[-1].messages
                        if m.content.startswith("[Earlier turns"))
    assert "read notes.txt, pass 0: it says hello" in history
    env.archive.archive.close()


def test_model_written_false_offers_no_summary_argument(tmp_path: Path) -> None:
    from gliding.config.settings import ContextSettings, SummarySettings

    llm = ScriptedLLM([call("list_dir", path="."), call("finish", summary="looked")])
    env = _env(tmp_path, llm, "DA")
    env.context = ContextSettings(summaries=SummarySettings(model_written=False))
    anyio.run(run_agent, env, "Goal: look")
    # only DA's finish, whose summary is its own, has one
    assert [t.name for t in llm.requests[0].tools
            if "summary" in (t.parameters.get("properties") or {})] == ["finish"]
    env.archive.archive.close()
