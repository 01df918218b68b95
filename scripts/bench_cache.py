"""Prompt-cache benchmark: capture the exact request bodies Gliding sends and run them through
the provider prompt-cache simulator (``gliding/bench/cache_sim.py``).

    .venv/bin/python scripts/bench_cache.py \\
        --trajectories TRAJECTORIES.jsonl [--trajectories ...] \\
        [--live --runs 3] [--bodies DIR] --out r.json

Replays: every record (``TRAJECTORIES.jsonl``: the format of ``docs/context.md``, "The
benchmark") is replayed through the context engine (shipped defaults, as ``gliding
bench context`` does); before each model call the request a role would send (the engine's
prompt and cache marks, the record's tools, tool_choice required) goes through the hosted
backend (``HostedLLM``, litellm) to a loopback server for ``anthropic/claude-3-5-haiku-latest``
and ``openai/gpt-4o-mini`` (dummy keys), which records the body litellm sent. The naive
append-only request of the same moment (one mark, on its last message) goes the same way.
Calls of a record are ``--interval`` seconds apart, records a day apart (no record reads
another's cache). Steady state leaves out a session's first call and the call right after a
compaction (the engine's stats say when).

Live jobs (``--live``): ``gliding run`` on a one-file job (examples/hello's) and a six-step
bash job through the fake provider (``gliding/testing/fake_provider.py``, scripted replies,
``llm.api_base`` at it), once per provider and run; the six-step job is killed with
``kill -9`` while DA's third command runs and continued with ``gliding resume``; the first
call after the resume is reported on its own. Sessions are found from the bodies (a session's
first prompt is a prefix of its later ones), compactions from a session's prompt that does
not extend the previous one. Timing matters there, so each figure is the median of ``--runs``.

The simulator is deterministic: the replay figures are the same on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio

from gliding.bench.cache import (
    ANTHROPIC_MODEL,
    CALL_INTERVAL_S,
    OPENAI_MODEL,
    RECORD_GAP_S,
    TARGETS,
    TOKENIZER,
    anthropic_body,
    encoder,
    openai_body,
    provider_of,
    replay_requests,
    run_cache_bench,
)
from gliding.bench.cache_sim import (
    ANTHROPIC,
    CLAUDE_35_HAIKU,
    CLAUDE_SONNET_45,
    GPT_4O_MINI,
    AnthropicCache,
    AnthropicParams,
    Call,
    OpenAICache,
    Outcome,
    Reuse,
    anthropic_blocks,
    anthropic_min_tokens,
    openai_blocks,
    report,
)
from gliding.bench.context import exact_counter, load_records
from gliding.bench.stats import emit
from gliding.config.settings import ContextSettings
from gliding.llm.hosted import HostedLLM
from gliding.llm.port import LLMRequest

GLIDING = Path(sys.executable).parent / "gliding"
# the Anthropic bodies are simulated twice: under the model's minimum (Haiku: 2,048 tokens) and
# under Sonnet's and Opus's 1,024 ("anthropic_min1024", priced as Sonnet 4.5)
MIN1024 = "anthropic_min1024"
PRICES = {ANTHROPIC: CLAUDE_35_HAIKU, MIN1024: CLAUDE_SONNET_45, "openai": GPT_4O_MINI}


# ---- a loopback server that records what litellm sends ---------------------------------------
class Capture:
    """Answers every chat request with a short text reply and keeps the body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                owner.bodies.append(body)
                model = json.loads(body).get("model", "m")
                usage = {"input_tokens": 1, "output_tokens": 1}
                if self.path.rstrip("/").endswith("/messages"):
                    reply: dict[str, Any] = {
                        "id": "msg_1", "type": "message", "role": "assistant", "model": model,
                        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                        "stop_sequence": None, "usage": usage}
                else:
                    reply = {"id": "c1", "object": "chat.completion", "created": 0,
                             "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                                          "message": {"role": "assistant",
                                                                      "content": "ok"}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                       "total_tokens": 2}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Capture:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---- replays -----------------------------------------------------------------------------------
class Stream:
    """Feeds captured bodies to one cache per strategy and provider as they come, keeping the
    outcomes (not the bodies) for the report; checks the translator without litellm."""

    def __init__(self, encode: Callable[[str], Any], min_tokens: int, bodies: Path | None) -> None:
        self.caches: dict[tuple[str, str], AnthropicCache | OpenAICache] = {}
        self.reuse: dict[str, Reuse] = {}
        self.calls: dict[str, list[Call]] = {}
        self.outcomes: dict[str, list[Outcome]] = {}
        self.encode = encode
        self.min_tokens = min_tokens
        self.agree = self.checked = 0
        self.mismatch: list[dict[str, Any]] = []
        self.bodies = bodies

    def add(self, strategy: str, call: Call, request: LLMRequest, model: str) -> None:
        reusable = self.reuse.setdefault(strategy, Reuse(self.encode)).feed(call)
        variants = [(call.provider, self.min_tokens)]
        if call.provider == ANTHROPIC:
            variants.append((MIN1024, 1024))
        for provider, floor in variants:
            key = (strategy, provider)
            cache = self.caches.get(key)
            if cache is None:
                cache = (AnthropicCache(self.encode, AnthropicParams(min_tokens=floor))
                         if call.provider == ANTHROPIC else OpenAICache(self.encode))
                self.caches[key] = cache
            self.outcomes.setdefault(strategy, []).append(
                replace(cache.feed(call.body, call.t), reusable=reusable))
            self.calls.setdefault(strategy, []).append(
                Call(provider, {}, call.session, call.t, call.tags, call.label))
        self._check(call, request, model)
        if self.bodies is not None:
            with (self.bodies / f"{strategy}.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps({"provider": call.provider, "session": call.session,
                                      "t": call.t, "tags": sorted(call.tags),
                                      "label": call.label, "body": call.body}) + "\n")

    def _check(self, call: Call, request: LLMRequest, model: str) -> None:
        meta = request.meta
        if call.provider == ANTHROPIC:
            mine = anthropic_body(request.messages, request.tools, model,
                                  list(meta.get("cache_breakpoints") or ()),
                                  cache_tools=bool(meta.get("cache_tools")),
                                  tool_choice=request.tool_choice)
            a = [(b.text, b.ttl) for b in anthropic_blocks(call.body)[0]]
            b = [(x.text, x.ttl) for x in anthropic_blocks(mine)[0]]
        else:
            mine = openai_body(request.messages, request.tools, model, request.tool_choice)
            a = [(x.text, None) for x in openai_blocks(call.body)]
            b = [(x.text, None) for x in openai_blocks(mine)]
        self.checked += 1
        if a == b:
            self.agree += 1
        elif len(self.mismatch) < 3:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                      min(len(a), len(b)))
            self.mismatch.append({"provider": call.provider, "block": at,
                                  "litellm": str(a[at:at + 1])[:300],
                                  "translator": str(b[at:at + 1])[:300]})


async def capture_replays(paths: list[Path], settings: ContextSettings, models: list[str],
                          interval: float, stream: Stream) -> dict[str, Any]:
    counter = exact_counter(settings.tokenizer)
    done: dict[str, Any] = {"records": 0, "model_calls": 0}
    with Capture() as server:
        llms = {m: HostedLLM(m, api_base=server.url, api_key="dummy", timeout_s=60)
                for m in models}
        for p_index, path in enumerate(paths):
            for r_index, record in enumerate(load_records(path)):
                n = p_index * 10_000 + r_index
                label = str(record.get("system") or "unknown")
                print(f"[{path.name} {r_index + 1}] {record.get('task_id')}", file=sys.stderr)
                for replayed in replay_requests(record, settings, counter, job=f"bench-{n}"):
                    t = n * RECORD_GAP_S + replayed.index * interval
                    done["model_calls"] += 1
                    for strategy, request in (("gliding", replayed.request),
                                              ("naive", replayed.naive)):
                        tags = replayed.tags if strategy == "gliding" else (
                            frozenset({"first"}) if replayed.index == 0 else frozenset())
                        for model in models:
                            await llms[model].complete(request)
                            body = json.loads(server.bodies.pop())
                            stream.add(strategy, Call(provider_of(model), body,
                                                      f"{strategy}-{n}", t, tags, label),
                                       request, model)
                done["records"] += 1
    return done


# ---- live jobs ---------------------------------------------------------------------------------
HELLO_TASK = """goal: Create the file hello.txt containing exactly the text "Hello, World!"
workspace: ws
pipeline: [PA, DA, CA, AA]
budgets:
  wall_time_s: 300
checks:
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""
HELLO_REPLIES = {
    "PA": [{"finish": {"steps": ["write hello.txt"]}}],
    "DA": [{"bash": {"command": "printf 'Hello, World!' > hello.txt"}},
           {"finish": {"summary": "wrote hello.txt"}}],
    "CA": [{"run_checks": {}}, {"finish": {"notes": "ok"}}],
    "AA": [{"finish": {"decision": "done", "report": "hello.txt written"}}],
}
STEPS = 6
STEPS_TASK = f"""goal: Append the lines step-1 .. step-{STEPS} to log.txt, one per step
workspace: ws
pipeline: [PA, DA, CA, AA]
budgets:
  turns: {{DA: {STEPS + 4}}}
  wall_time_s: 300
checks:
  - file_exists: log.txt
"""


def steps_replies() -> dict[str, Any]:
    da: list[dict[str, Any]] = [{"bash": {"command": f"echo step-{k} >> log.txt && sleep 0.6"}}
                                for k in range(1, STEPS + 1)]
    return {"PA": [{"finish": {"steps": [f"append step-{k}" for k in range(1, STEPS + 1)]}}],
            "DA": [*da, {"finish": {"summary": "appended every line"}}],
            "CA": [{"run_checks": {}}, {"finish": {"notes": "checked"}}],
            "AA": [{"finish": {"decision": "done", "report": "every line is there"}}]}


def live_job(root: Path, name: str, task: str, replies: dict[str, Any], model: str,
             kill_after_da: int | None, gap: float) -> tuple[list[Call], dict[str, Any]]:
    """One job through the fake provider; with ``kill_after_da``, killed while the command of
    DA's that many-th reply runs, then resumed."""
    from gliding.testing.fake_provider import FakeProvider

    job_root = root / name
    job_root.mkdir(parents=True)
    (job_root / "task.yaml").write_text(task, encoding="utf-8")
    data = job_root / "data"
    info: dict[str, Any] = {"job": name, "model": model, "killed": False}
    with FakeProvider(replies) as fp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "GLIDING_LLM__API_BASE": fp.url,
               "ANTHROPIC_API_KEY": "dummy", "OPENAI_API_KEY": "dummy",
               "GLIDING_MEMORY__VECTORS__ENABLED": "false"}

        def start(*args: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([str(GLIDING), *args, "--data-dir", str(data), "-q",
                                     "--json"], cwd=job_root, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        proc = start("run", "task.yaml", "--model", model)
        resumed_at: int | None = None
        if kill_after_da is not None:
            deadline = time.monotonic() + 120
            while (sum(r.role == "DA" for r in fp.requests) < kill_after_da
                   and proc.poll() is None and time.monotonic() < deadline):
                time.sleep(0.02)
            time.sleep(0.3)  # the command (echo, then sleep 0.6 s) is running
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)  # gliding itself, as a crash would
                proc.wait()
                info["killed"] = True
                jobs = sorted((data / "jobs").glob("*")) if (data / "jobs").is_dir() else []
                resumed_at = len(fp.requests)
                proc = start("resume", jobs[-1].name)
        out, err = proc.communicate(timeout=300)
        info["exit_code"] = proc.returncode
        try:
            info["outcome"] = json.loads(out.decode()).get("outcome")
        except (ValueError, AttributeError):
            info["outcome"] = None
            info["stderr"] = err.decode(errors="replace")[-500:]
        requests = [r for r in fp.requests if r.fault is None]
        info["requests"] = len(requests)
    calls = []
    for i, r in enumerate(requests):
        tags = frozenset({"resume"}) if resumed_at is not None and i == resumed_at else frozenset()
        calls.append(Call(provider_of(model), r.json(), "", gap + r.at, tags, name))
    return calls, info


def _both_minimums(calls: list[Call], encode: Callable[[str], Any]) -> dict[str, Any]:
    """The report on ``calls``, with the Anthropic calls also under the 1,024 minimum."""
    one = run_cache_bench(calls, encode=encode, prices=PRICES)
    low = run_cache_bench(calls, encode=encode, min_tokens=1024,
                          prices={ANTHROPIC: PRICES[MIN1024], "openai": GPT_4O_MINI})
    if ANTHROPIC in low["providers"]:
        one["providers"][MIN1024] = low["providers"][ANTHROPIC]
    return one


def run_live(runs: int, models: list[str], encode: Callable[[str], Any],
             bodies: Path | None) -> dict[str, Any]:
    """``runs`` rounds of the live jobs. ``per_run``: each job with a cache of its own;
    ``back_to_back``: a round's jobs one after the other on one cache per provider, as a
    daemon runs them (a role's second job finds its tools and system prompt cached)."""
    per_run: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for run in range(runs):
        root = Path(tempfile.mkdtemp(prefix="gliding-cache-live-"))
        calls: list[Call] = []
        shared: list[Call] = []
        for k, model in enumerate(models):
            for j, (name, task, replies, kill) in enumerate((
                    ("hello", HELLO_TASK, HELLO_REPLIES, None),
                    ("steps-killed", STEPS_TASK, steps_replies(), 3))):
                print(f"[live run {run + 1}] {name} {model}", file=sys.stderr)
                got, info = live_job(root, f"{name}-{k}", task, replies, model, kill,
                                     ((run * len(models) + k) * 2 + j) * RECORD_GAP_S)
                gap = ((run * len(models) + k) * 2 + j) * RECORD_GAP_S
                calls += [Call(c.provider, c.body, c.session, c.t, c.tags, name) for c in got]
                shared += [Call(c.provider, c.body, c.session, c.t - gap, c.tags, name)
                           for c in got]
                jobs.append({"run": run + 1, **info})
        per_run.append(_both_minimums(calls, encode))
        warm.append(_both_minimums(shared, encode))
        if bodies is not None:
            with (bodies / "live.jsonl").open("a", encoding="utf-8") as out:
                for c in calls:
                    out.write(json.dumps({"provider": c.provider, "t": c.t,
                                          "tags": sorted(c.tags), "label": c.label,
                                          "body": c.body}) + "\n")
    return {"runs": runs, "jobs": jobs, "median": _medians(per_run), "per_run": per_run,
            "back_to_back": {"median": _medians(warm), "per_run": warm}}


def _medians(reports: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for provider in sorted({p for r in reports for p in r["providers"]}):
        figures: dict[str, Any] = {}
        for part in ("all", "steady", "after_resume"):
            shares = [r["providers"][provider][part]["read_share"] for r in reports
                      if part in r["providers"].get(provider, {})]
            if shares:
                figures[f"{part}_read_share"] = statistics.median(shares)
                figures[f"{part}_read_share_runs"] = shares
                figures[f"{part}_ceiling_read_share"] = statistics.median(
                    r["providers"][provider][part]["ceiling_read_share"] for r in reports
                    if part in r["providers"].get(provider, {}))
        out[provider] = figures
    return out


# ---- main --------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=Path, action="append", default=[])
    parser.add_argument("--live", action="store_true", help="Also run live scripted jobs.")
    parser.add_argument("--runs", type=int, default=3, help="Live runs (medians).")
    parser.add_argument("--interval", type=float, default=CALL_INTERVAL_S,
                        help="Seconds between a replayed record's calls.")
    parser.add_argument("--anthropic-model", default=ANTHROPIC_MODEL)
    parser.add_argument("--openai-model", default=OPENAI_MODEL)
    parser.add_argument("--bodies", type=Path, default=None,
                        help="Write the captured bodies here (gliding.jsonl, naive.jsonl).")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    if not opts.trajectories and not opts.live:
        parser.error("give --trajectories PATH and/or --live")
    models = [opts.anthropic_model, opts.openai_model]
    encode = encoder(TOKENIZER)
    min_tokens = anthropic_min_tokens(opts.anthropic_model)
    result: dict[str, Any] = {
        "tokenizer": TOKENIZER, "models": models, "deterministic_replays": True,
        "targets": TARGETS,
        "prices": {p: v.as_dict() for p, v in PRICES.items()},
        "params": {"anthropic": {"min_tokens": min_tokens, "ttl_s": 300, "lookback_blocks": 20,
                                 "max_breakpoints": 4},
                   MIN1024: {"min_tokens": 1024, "the same bodies as": ANTHROPIC},
                   "openai": {"min_tokens": 1024, "increment": 128, "ttl_s": 300},
                   "call_interval_s": opts.interval},
    }
    if opts.bodies is not None:
        opts.bodies.mkdir(parents=True, exist_ok=True)
        for name in ("gliding", "naive", "live"):
            (opts.bodies / f"{name}.jsonl").write_text("", encoding="utf-8")
    if opts.trajectories:
        stream = Stream(encode, min_tokens, opts.bodies)
        started = time.monotonic()
        done = anyio.run(capture_replays, opts.trajectories, ContextSettings(), models,
                         opts.interval, stream)
        result["replays"] = {
            "inputs": [str(p) for p in opts.trajectories], **done,
            "capture_s": round(time.monotonic() - started, 1),
            "translator_agreement": {"checked": stream.checked, "same_blocks": stream.agree,
                                     "examples": stream.mismatch},
            "strategies": {name: report(stream.calls[name], stream.outcomes[name], PRICES)
                           for name in stream.calls},
        }
    if opts.live:
        result["live"] = run_live(opts.runs, models, encode, opts.bodies)
    emit(result, opts.out)


if __name__ == "__main__":
    main()
