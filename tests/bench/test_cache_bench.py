"""The cache benchmark's capture side: replayed requests, bodies built without litellm (checked
against the bodies litellm really sends, through the fake provider), captured-body files and
``gliding bench cache``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gliding.bench.cache import (
    anthropic_body,
    dump_calls,
    load_calls,
    openai_body,
    replay_requests,
    run_cache_bench,
    tools_of,
)
from gliding.bench.cache_sim import ANTHROPIC, OPENAI, Call, anthropic_blocks, openai_blocks
from gliding.config.settings import ContextSettings
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Message, ToolCall, ToolSpec
from gliding.llm.hosted import HostedLLM
from gliding.llm.port import LLMRequest
from gliding.testing.fake_provider import FakeProvider

GLIDING = str(Path(sys.executable).parent / "gliding")


def record(n: int = 6) -> dict:
    steps = [{"role": "system", "content": "You are DA, a coding agent."},
             {"role": "user", "content": "Fix the bug in src/app/core.py"}]
    for i in range(n):
        if i % 3 == 2:  # parallel calls, as dev_wide records them
            steps.append({"role": "assistant", "content": f"Two at once {i}.",
                          "tool_name": "grep,read", "tool_input": [{"pattern": "x"},
                                                                   {"path": f"f{i}"}]})
            steps += [{"role": "tool", "tool_name": "grep", "content": f"hit {i}"},
                      {"role": "tool", "tool_name": "read", "content": f"body {i}"}]
        else:
            steps.append({"role": "assistant", "content": f"Look {i}.", "tool_name": "bash",
                          "tool_input": f"cat src/m_{i}.py"})
            steps.append({"role": "tool", "tool_name": "bash",
                          "content": "\n".join(f"line {k} of {i}" for k in range(30))})
    steps.append({"role": "assistant", "content": "Done.", "tool_name": "finish",
                  "tool_input": {"summary": "ok"}})
    return {"task_id": "t", "system": "synthetic", "steps": steps}


def test_replayed_requests_carry_tools_marks_and_matching_call_ids() -> None:
    rec = record()
    tools = tools_of(rec)
    assert [t.name for t in tools] == ["bash", "grep", "read", "finish"]
    assert set(tools[0].parameters["properties"]) == {"input"}
    assert set(tools[3].parameters["properties"]) == {"summary"}
    got = list(replay_requests(rec, ContextSettings(), TokenCounter()))
    assert len(got) == 7 and got[0].tags == {"first"}
    assert all(r.request.tools == tools and r.request.tool_choice == "required" for r in got)
    assert all(r.request.meta["cache_breakpoints"] for r in got)
    last = got[-1].naive.messages
    calls = {c.id for m in last for c in m.tool_calls}
    assert {m.tool_call_id for m in last if m.role == "tool"} <= calls
    assert got[-1].naive.meta["cache_breakpoints"] == [len(last) - 1]


async def _send(url: str, model: str, request: LLMRequest) -> None:
    await HostedLLM(model, api_base=url, api_key="dummy").complete(request)


@pytest.mark.heavy  # litellm's import and six real HTTP calls
def test_bodies_built_without_litellm_are_the_blocks_litellm_sends() -> None:
    messages = (
        Message("system", "You are DA. Rules."), Message("user", "example"),
        Message("assistant", "", (ToolCall("c1", "bash", {"command": "ls"}),)),
        Message("tool", "a\nb", (), "c1", "bash"), Message("user", "the assignment"),
        Message("assistant", "thinking", (ToolCall("c2", "bash", {"command": "cat a"}),)),
        Message("tool", "", (), "c2", "bash"), Message("user", "news"),
        Message("assistant", "plain"), Message("user", "nudge"))
    tools = (ToolSpec("bash", "run", {"type": "object",
                                      "properties": {"command": {"type": "string"}}}),
             ToolSpec("finish", "end"))
    for marks in ([0, 4, 9], [0, 2, 3, 6], [3]):
        for model in ("anthropic/claude-3-5-haiku-latest", "openai/gpt-4o-mini"):
            request = LLMRequest(messages, tools, "required",
                                 meta={"cache_breakpoints": marks, "cache_tools": True})
            with FakeProvider({"DA": [{"text": "ok"}]}) as fp:
                anyio.run(_send, fp.url, model, request)
                sent = fp.requests[-1].json()
            if model.startswith("anthropic"):
                mine = anthropic_body(messages, tools, model, marks, cache_tools=True)
                blocks_sent, root_sent = anthropic_blocks(sent)
                blocks_mine, root_mine = anthropic_blocks(mine)
                assert [(b.text, b.ttl) for b in blocks_sent] == \
                    [(b.text, b.ttl) for b in blocks_mine], marks
                assert root_sent == root_mine
            else:
                assert [b.text for b in openai_blocks(sent)] == \
                    [b.text for b in openai_blocks(openai_body(messages, tools, model))]


def test_calls_round_trip_and_a_fake_provider_recording_reads(tmp_path: Path) -> None:
    calls = [Call(ANTHROPIC, {"model": "claude-x", "messages": []}, "s", 1.0,
                  frozenset({"first"}), "lab"),
             Call(OPENAI, {"model": "gpt", "messages": []}, "o", 2.0)]
    path = tmp_path / "bodies.jsonl"
    dump_calls(path, calls)
    assert load_calls(path) == calls
    recording = tmp_path / "rec.jsonl"
    recording.write_text(json.dumps({"path": "/v1/messages", "body": json.dumps(
        {"model": "claude-x", "messages": []}), "at": 5.0, "fault": None}) + "\n"
        + json.dumps({"path": "/v1/messages", "body": "{}", "at": 6.0, "fault": "429"}) + "\n")
    (call,) = load_calls(recording)
    assert (call.provider, call.t, call.body["model"]) == (ANTHROPIC, 5.0, "claude-x")


@pytest.mark.heavy  # the CLI in a subprocess
def test_bench_cache_cli_simulates_captured_bodies(tmp_path: Path) -> None:
    rec = record(12)
    calls = []
    for r in replay_requests(rec, ContextSettings(), TokenCounter()):
        for model, build in (("anthropic/claude-3-5-haiku-latest", "a"), ("openai/gpt-4o-mini",
                                                                           "o")):
            req = r.request
            body = (anthropic_body(req.messages, req.tools, model,
                                   req.meta["cache_breakpoints"],
                                   cache_tools=bool(req.meta.get("cache_tools")))
                    if build == "a" else openai_body(req.messages, req.tools, model))
            calls.append(Call(ANTHROPIC if build == "a" else OPENAI, body, "", r.index * 10.0))
    path = tmp_path / "bodies.jsonl"
    dump_calls(path, calls)
    out = tmp_path / "r.json"
    done = subprocess.run([GLIDING, "bench", "cache", str(path), "--out", str(out),
                           "--min-tokens", "256"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["tokenizer"] == "cl100k_base" and result["deterministic"]
    anthropic = result["providers"]["anthropic"]
    assert anthropic["all"]["calls"] == 13 and anthropic["excluded_from_steady"]["first_calls"] == 1
    assert anthropic["steady"]["read_share"] > 0.5
    assert result == {**run_cache_bench(load_calls(path), min_tokens=256), "input": str(path)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().splitlines()[0] + "\nnot json\n")
    done = subprocess.run([GLIDING, "bench", "cache", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "bad.jsonl:2" in done.stderr


def test_context_bench_cached_cost_is_the_simulator_on_the_naive_bodies() -> None:
    from gliding.bench.cache import encoder
    from gliding.bench.cache_sim import AnthropicCache, AnthropicParams
    from gliding.bench.context import CacheModel, Naive, replay, steps_of

    rec = record(24)  # prompts up to ~3,800 tokens: over Haiku's 2,048 minimum
    counter = TokenCounter()
    encode = encoder()
    tally, _ = replay(rec, Naive, counter, cache=CacheModel(encode))
    cache = AnthropicCache(encode, AnthropicParams(min_tokens=2048))
    expected, prompt, calls, read = 0.0, [], 0, 0
    for step in steps_of(rec):
        if step.role == "assistant":
            body = anthropic_body(prompt, (), "anthropic/claude-3-5-haiku-latest",
                                  [len(prompt) - 1])
            got = cache.feed(body, calls * 10.0)
            expected += 0.1 * got.cache_read + 1.25 * got.cache_write + got.uncached
            calls, read = calls + 1, read + got.cache_read
        prompt.append(Message(step.role, step.text, name=step.tool if step.role == "tool"
                              else None))  # type: ignore[arg-type]
    assert tally.calls == calls and tally.cached_cost == expected and read > 0
    assert tally.cache_read == read
