"""Jobs whose hosted model streams (``llm.stream``, on by default), against the fake provider on
127.0.0.1: each turn's reply arrives as ``model.delta`` events, in order, adding up to what the
turn archived, with the usage the final chunk reported; a stream cut mid-way is declared void
(``model.discarded``) and the retry's reply is the turn's; a resumed job replays its turns
without streaming them again; and as a user sees it: ``gliding daemon``, ``gliding submit
--wait`` and ``gliding logs`` show the streamed text, and the events log holds it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.daemon.compose import JobHandle, resume_job, run_job
from gliding.memory.archive.store import Archive
from gliding.testing.fake_provider import FakeProvider, FaultPlan
from tests.cli.cli_support import clean_env, gliding_script, invoke

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

CONTENT = "Hello, streamed world!\nA second line, long enough to come in many pieces.\n"
REPLIES = {"DA": [{"write_file": {"path": "hello.txt", "content": CONTENT}},
                  {"finish": {"summary": "wrote hello.txt"}}]}
TASK = """\
goal: Create hello.txt containing "Hello"
pipeline: [DA]
model: openai/fake-model
checks:
  - file_contains: {path: hello.txt, text: Hello}
"""


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    return tmp_path


@pytest.fixture
def fp() -> Iterator[FakeProvider]:
    with FakeProvider(REPLIES, chunk_chars=4) as provider:
        yield provider


def settings(tmp: Path, fp: FakeProvider) -> Settings:
    return load_settings(env={}, overrides={
        "data_dir": str(tmp / "data"), "llm.api_base": fp.url, "memory.vectors.enabled": False,
        "llm.retry.initial_s": 0.01, "llm.retry.max_s": 0.02})


def run(tmp: Path, fp: FakeProvider) -> tuple[JobHandle, list[JobEvent]]:
    seen: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(load_task(tmp / "task.yaml"), settings(tmp, fp),
                                         on_event=seen.append))
    assert handle.report is not None and handle.report.outcome == "success"
    return handle, seen


def streamed(seen: list[JobEvent], turn: int) -> str:
    return "".join(e.data["text"] for e in seen
                   if e.event == "model.delta" and e.data["turn"] == turn)


def test_each_turn_streams_in_order_and_adds_up_to_its_tool_call(
        tmp: Path, fp: FakeProvider) -> None:
    handle, seen = run(tmp, fp)

    deltas = [e.data for e in seen if e.event == "model.delta"]
    assert deltas and all(d["session"] == "DA" for d in deltas)
    for turn in (1, 2):
        seqs = [d["seq"] for d in deltas if d["turn"] == turn]
        assert seqs == list(range(1, len(seqs) + 1))
    assert {d["tool"] for d in deltas if d["turn"] == 1} == {"write_file"}
    assert json.loads(streamed(seen, 1)) == {"path": "hello.txt", "content": CONTENT}
    assert json.loads(streamed(seen, 2)) == {"summary": "wrote hello.txt"}
    # batched: far fewer events than the provider's chunks of 4 characters
    assert len(deltas) < len(streamed(seen, 1)) // 8
    # each turn's deltas come before its turn event
    names = [(e.event, e.data.get("turn")) for e in seen
             if e.event in ("model.delta", "turn")]
    assert names.index(("turn", 1)) > max(i for i, n in enumerate(names)
                                          if n == ("model.delta", 1))
    assert "model.discarded" not in {e.event for e in seen}
    bodies = [r.json() for r in fp.requests]
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True}
               for b in bodies)
    # exact usage: the provider's own count (4 characters of the request a token), archived
    report = handle.report
    assert report is not None
    prompts = [max(1, len(json.dumps(b["messages"]) + json.dumps("")) // 4) for b in bodies]
    assert report.total.prompt_tokens == sum(prompts)


def test_a_stream_cut_midway_is_void_and_the_retry_is_the_turn(
        tmp: Path, fp: FakeProvider) -> None:
    fp.faults = FaultPlan(rate=1.0, mix={"cut": 1.0})

    def heal(event: JobEvent) -> None:
        if event.event == "model.discarded":
            fp.faults = None  # one cut, then the provider answers whole

    seen: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(load_task(tmp / "task.yaml"), settings(tmp, fp),
                                         on_event=lambda e: (seen.append(e), heal(e))))
    assert handle.report is not None and handle.report.outcome == "success"

    cut = [e.event for e in seen].index("model.discarded")
    assert seen[cut + 1].event == "llm.retry"
    discarded = seen[cut].data
    before = "".join(e.data["text"] for e in seen[:cut] if e.event == "model.delta")
    assert discarded["chars"] == len(before) > 0 and discarded["turn"] == 1
    assert discarded["reason"] == "connection failed"
    after = "".join(e.data["text"] for e in seen[cut:]
                    if e.event == "model.delta" and e.data["turn"] == 1)
    assert json.loads(after) == {"path": "hello.txt", "content": CONTENT}
    assert [r.fault for r in fp.requests] == ["cut", None, None]  # the cut one used no reply


def test_a_resumed_job_replays_its_turns_without_streaming_them(
        tmp: Path, fp: FakeProvider) -> None:
    handle, _ = run(tmp, fp)
    assert handle.report is not None
    job = handle.report.job
    with Archive.open(tmp / "data", job, create=False) as archive:
        archive.set_meta("status", "interrupted")
    asked = len(fp.requests)

    seen: list[JobEvent] = []
    resumed = anyio.run(lambda: resume_job(job, settings(tmp, fp), on_event=seen.append))
    assert resumed.report is not None and resumed.report.outcome == "success"
    assert len(fp.requests) == asked  # nothing asked again
    assert not [e for e in seen if e.event.startswith("model.")]


# --- as a user runs it --------------------------------------------------------------------------


def cli(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(gliding_script()), *args, "--data-dir", "data"], cwd=tmp,
                          text=True, capture_output=True, timeout=120, env=env)


@contextlib.contextmanager
def daemon(tmp: Path, env: dict[str, str]) -> Iterator[None]:
    info = tmp / "data" / "daemon.json"
    with (tmp / "daemon.log").open("wb") as out:
        proc = subprocess.Popen([str(gliding_script()), "daemon", "--data-dir", "data",
                                 "--port", "0"], cwd=tmp, stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / "daemon.log").read_text()
            with contextlib.suppress(OSError, ValueError):
                if json.loads(info.read_text()).get("pid") == proc.pid:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError((tmp / "daemon.log").read_text())
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_gliding_logs_shows_the_streamed_reply_of_a_daemon_job(
        tmp: Path, fp: FakeProvider) -> None:
    env = clean_env({"OPENAI_API_KEY": "dummy", "GLIDING_LLM__API_BASE": fp.url,
                     "GLIDING_MEMORY__VECTORS__ENABLED": "false", "HF_HUB_OFFLINE": "1",
                     "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1"})
    with daemon(tmp, env):
        submitted = cli(tmp, env, "submit", "task.yaml", "--wait")
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.split()[0]
        logs = cli(tmp, env, "logs", job)
        as_json = cli(tmp, env, "logs", job, "--json")

    assert logs.returncode == 0, logs.stderr
    shown = logs.stdout.splitlines()
    streamed_lines = [line for line in shown if "[DA turn 1] ▸ write_file " in line]
    assert streamed_lines, logs.stdout
    assert "Hello, streamed world!" in "".join(streamed_lines)
    assert any("[DA turn 2] ▸ finish " in line for line in shown)
    # the streamed lines come before the turn's own line
    first_turn = next(i for i, line in enumerate(shown) if "[DA turn 1] write_file(" in line)
    assert shown.index(streamed_lines[-1]) < first_turn
    assert submitted.stderr.count("▸ write_file") == len(streamed_lines)  # --wait shows them too
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    text = "".join(r["data"]["text"] for r in records
                   if r["event"] == "model.delta" and r["data"]["turn"] == 1)
    assert json.loads(text)["content"] == CONTENT
    assert all(r.json()["stream"] is True and r.json()["stream_options"] == {
        "include_usage": True} for r in fp.requests)


def test_gliding_run_shows_the_streamed_reply_before_each_turn(
        tmp: Path, fp: FakeProvider) -> None:
    result = invoke(["run", "task.yaml", "--data-dir", "data"], cwd=tmp, env={
        "GLIDING_LLM__API_BASE": fp.url, "GLIDING_MEMORY__VECTORS__ENABLED": "false"})
    assert result.code == 0, result.stderr
    lines = result.stderr.splitlines()
    streamed_at = [i for i, line in enumerate(lines) if "[DA turn 1] ▸ write_file " in line]
    turn_at = next(i for i, line in enumerate(lines) if "[DA turn 1] write_file(" in line)
    assert streamed_at and max(streamed_at) < turn_at
    assert "Hello, streamed world!" in "".join(lines[i] for i in streamed_at)
    assert any("[DA turn 2] ▸ finish " in line for line in lines)
