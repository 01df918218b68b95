"""The agent step loop: an explicit state machine that drives one role through one assignment.

    PROMPT ──ready──► AWAIT_MODEL ──tool_calls──► ACT ──done──► PROMPT
      │                  │ ──text──► PROMPT (nudged to use a tool)
      │                  │ ──finish──► FINISHED
      │                  └ ──error──► FAILED
      ├──turn_cap──► TURN_CAP
      └──budget────► BUDGET
    ACT ──finish──► FINISHED

Every turn is archived in L0 in full (prompt and reply) under ``gliding://job/<job>/turn/<role>/<n>``,
every tool result under ``gliding://job/<job>/result/<role>-<n>-<i>``, every call goes to the
ledger, and a one-line summary per turn is kept for the report and for later context.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from gliding.agents.roles import RoleSpec
from gliding.bus.messages import JobEvent
from gliding.bus.port import Bus
from gliding.config.settings import ContextSettings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Completion, Message, ToolCall
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.llm.port import LLM, LLMRequest
from gliding.memory.archive import Archive, CallRecord
from gliding.tools.base import ToolContext, Toolset


class State(Enum):
    PROMPT = "prompt"
    AWAIT_MODEL = "await_model"
    ACT = "act"
    FINISHED = "finished"
    TURN_CAP = "turn_cap"
    BUDGET = "budget"
    FAILED = "failed"


TRANSITIONS: dict[tuple[State, str], State] = {
    (State.PROMPT, "ready"): State.AWAIT_MODEL,
    (State.PROMPT, "turn_cap"): State.TURN_CAP,
    (State.PROMPT, "budget"): State.BUDGET,
    (State.AWAIT_MODEL, "tool_calls"): State.ACT,
    (State.AWAIT_MODEL, "text"): State.PROMPT,
    (State.AWAIT_MODEL, "finish"): State.FINISHED,
    (State.AWAIT_MODEL, "error"): State.FAILED,
    (State.ACT, "done"): State.PROMPT,
    (State.ACT, "finish"): State.FINISHED,
}
TERMINAL = frozenset({State.FINISHED, State.TURN_CAP, State.BUDGET, State.FAILED})

log = structlog.get_logger("gliding.agent")

NUDGE = "Reply with one tool call. When your part is done, call finish."
LINE_CHARS = 160  # a turn summary and a progress line, at most


def transition(state: State, event: str) -> State:
    """The next state; an event the table does not allow is a programming error."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise ValueError(f"no transition from {state.value} on {event!r}") from None


@dataclass(frozen=True)
class ToolRecord:
    name: str
    arguments: dict[str, Any]
    ok: bool
    output: str
    iri: str
    turn_iri: str = ""  # the L0 turn that made the call


@dataclass(frozen=True)
class TurnSummary:
    role: str
    turn: int
    summary: str
    iri: str


@dataclass(frozen=True)
class AgentResult:
    role: str
    status: str  # a terminal State's value
    finish: dict[str, Any]
    turns: int
    summaries: tuple[TurnSummary, ...]
    tools: tuple[ToolRecord, ...]
    error: str | None = None
    prompt_tokens: int = 0  # Σ cl100k tokens of the prompts the context engine built
    baseline_tokens: int = 0  # Σ of the same prompts had every message been appended as is
    compactions: int = 0
    archived_results: int = 0


@dataclass
class AgentEnv:
    """What one agent run needs; built by the scheduler, the only place that picks backends."""

    job: str
    role: RoleSpec
    llm: LLM
    toolset: Toolset
    tool_ctx: ToolContext
    archive: Archive
    budget: BudgetTracker
    bus: Bus
    now: Callable[[], float]
    max_turns: int
    context: ContextSettings
    counter: TokenCounter
    extra_system: str = ""


async def run_agent(env: AgentEnv, assignment: str) -> AgentResult:
    """Drive one role until it finishes, hits its turn cap or budget, or the model fails."""
    role = env.role
    reads_back = "read_result" in env.toolset.names
    system = "\n\n".join(x for x in (role.system_prompt(),
                                      memory_note(env.context) if reads_back else "",
                                      env.extra_system) if x)
    engine = ContextEngine(env.context, env.counter,
                           [Message("system", system), *role.examples,
                            Message("user", assignment)])
    tool_ctx = dataclasses.replace(env.tool_ctx, extra={
        **env.tool_ctx.extra,
        "recall": lambda query: _recall_text(engine, query),
    })
    work_tools = env.toolset.specs()
    state, turns, finish = State.PROMPT, 0, {}
    summaries: list[TurnSummary] = []
    records: list[ToolRecord] = []
    error: str | None = None
    seen_calls: set[str] = set()
    completion: Completion | None = None
    while state not in TERMINAL:
        if state is State.PROMPT:
            if turns >= env.max_turns:
                state = transition(state, "turn_cap")
                continue
            if (reason := env.budget.exhausted(env.now())) is not None:
                error = reason
                state = transition(state, "budget")
                continue
            state = transition(state, "ready")
        elif state is State.AWAIT_MODEL:
            turns += 1
            n = env.budget.count_turn(role.name)
            ran = [r.name for r in records if r.ok]
            may_finish = not work_tools or (
                all(t in ran for t in role.finish_requires)
                and len(ran) >= role.finish_min_calls)
            tools = [*work_tools, role.finish] if may_finish else work_tools
            prompt = engine.prompt(assignment)
            request = LLMRequest(messages=tuple(prompt), tools=tuple(tools),
                                 tool_choice="required",
                                 meta={"role": role.name, "turn": n,
                                       "cache_breakpoints": engine.breakpoints(prompt)})
            try:
                completion = await env.llm.complete(request)
            except GlidingError as exc:
                error = f"model call failed: {exc.message}"
                log.warning("llm.call.failed", job=env.job, role=role.name, turn=n,
                            error=exc.message)
                state = transition(state, "error")
                continue
            iri = str(turn_iri(env.job, role.name, n))
            _archive_turn(env, iri, n, request, completion)
            env.budget.record(role.name, completion.usage)
            calls = completion.message.tool_calls[:1]  # one call a turn keeps small models on rails
            reply = Message("assistant", completion.message.content, calls)
            engine.add(reply, iri=iri)
            if not calls:
                summaries.append(TurnSummary(role.name, n,
                                             one_line(reply.content or "(empty)", LINE_CHARS),
                                             iri))
                engine.add(Message("user", NUDGE), iri=iri)
                await _progress(env, n, completion, "text", summaries[-1].summary)
                state = transition(state, "text")
                continue
            call = calls[0]
            if call.name == "finish":
                problem = _check_finish(role, call)
                if problem is None:
                    finish = dict(call.arguments)
                    summaries.append(TurnSummary(role.name, n, _describe(call, "finished"), iri))
                    await _progress(env, n, completion, "finish", summaries[-1].summary)
                    state = transition(state, "finish")
                    continue
                engine.add(Message("tool", f"error: {problem}", (), call.id, "finish"), iri=iri)
                summaries.append(TurnSummary(role.name, n, _describe(call, problem), iri))
                await _progress(env, n, completion, "finish", summaries[-1].summary)
                state = transition(state, "text")
                continue
            state = transition(state, "tool_calls")
        elif state is State.ACT:
            assert completion is not None
            call = completion.message.tool_calls[0]
            n = env.budget.turns[role.name]
            outcome = await env.toolset.call(call.name, call.arguments, tool_ctx)
            if not outcome.ok:
                log.info("tool.call.failed", job=env.job, role=role.name, turn=n,
                         tool=call.name, error=_first_line(outcome.output))
            key = call.name + call.arguments_json()
            output = outcome.output
            if outcome.ok and key in seen_calls:
                output += "\nYou already made this exact call. If your part is done, call finish."
            seen_calls.add(key)
            res_iri = str(result_iri(env.job, f"{role.name}-{n}-0"))
            env.archive.put(res_iri, output, kind="result",
                            meta={"tool": call.name, "arguments": call.arguments,
                                  "ok": outcome.ok, "role": role.name, "turn": n})
            records.append(ToolRecord(call.name, call.arguments, outcome.ok, output, res_iri,
                                      str(turn_iri(env.job, role.name, n))))
            engine.add(Message("tool", output, (), call.id, call.name), iri=res_iri, tool=call.name)
            summaries.append(TurnSummary(role.name, n, _describe(call, _first_line(output)),
                                         str(turn_iri(env.job, role.name, n))))
            await _progress(env, n, completion, call.name, summaries[-1].summary)
            state = transition(state, "done")
    log.info("agent.stopped", job=env.job, role=role.name, state=state.value, turns=turns)
    stats = engine.stats
    return AgentResult(role.name, state.value, finish, turns, tuple(summaries), tuple(records),
                       error, stats.prompt_tokens, stats.baseline_tokens, stats.compactions,
                       stats.archived_results)


def memory_note(settings: ContextSettings) -> str:
    """What the system prompt says about archived results: the numbers the code uses."""
    r = settings.tool_result_iri
    return (f"Memory: a tool result over {r.threshold} bytes is archived and shown as a summary "
            f"of at most {r.preview_size} bytes with its IRI. Read it back with "
            "read_result(iri, offset, limit) or grep_result(iri, pattern); recall(query) finds "
            "earlier turns that left the prompt and what earlier jobs recorded.")


def _recall_text(engine: ContextEngine, query: str) -> str:
    found = engine.recall(query)
    if not found:
        return ""  # the recall tool says when nothing at all was found
    return "\n".join(f"#{e.turn} {e.role}: {e.summary} <{e.iri}>" for e in found)


def _archive_turn(env: AgentEnv, iri: str, n: int, request: LLMRequest, c: Completion) -> None:
    body = {
        "role": env.role.name,
        "turn": n,
        "model": c.model,
        "prompt": [m.to_openai() for m in request.messages],
        "tools": [t.name for t in request.tools],
        "reply": c.message.to_openai(),
        "raw": c.raw,
        "usage": {"prompt_tokens": c.usage.prompt_tokens,
                  "completion_tokens": c.usage.completion_tokens,
                  "cached_tokens": c.usage.cached_tokens, "cost_usd": c.usage.cost_usd},
        "latency_s": round(c.latency_s, 4),
    }
    env.archive.put(iri, json.dumps(body, ensure_ascii=False, indent=1), kind="turn",
                    media_type="application/json", meta={"role": env.role.name, "turn": n})
    env.archive.record_call(CallRecord(
        job=env.job, role=env.role.name, turn=n, model=c.model,
        prompt_tokens=c.usage.prompt_tokens, completion_tokens=c.usage.completion_tokens,
        cached_tokens=c.usage.cached_tokens, latency_s=c.latency_s, cost_usd=c.usage.cost_usd,
        created_at=env.now(), turn_iri=iri,
    ))


async def _progress(env: AgentEnv, n: int, c: Completion, action: str, summary: str) -> None:
    spent = env.budget.usage
    await env.bus.publish(f"job/{env.job}/events", JobEvent(job=env.job, event="turn", data={
        "role": env.role.name, "turn": n, "action": action, "summary": summary,
        "prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens,
        "job_prompt_tokens": spent.prompt_tokens, "job_cost_usd": spent.cost_usd,
    }))


def _check_finish(role: RoleSpec, call: ToolCall) -> str | None:
    schema = role.finish.parameters
    missing = [k for k in schema.get("required", []) if k not in call.arguments]
    if missing:
        return f"finish needs: {', '.join(missing)}"
    for key, prop in schema.get("properties", {}).items():
        if "enum" in prop and key in call.arguments and call.arguments[key] not in prop["enum"]:
            return f"finish.{key} must be one of {', '.join(map(str, prop['enum']))}"
    return None


def _describe(call: ToolCall, outcome: str) -> str:
    args = ", ".join(f"{k}={one_line(json.dumps(v, ensure_ascii=False), 40)}"
                     for k, v in call.arguments.items())
    return one_line(f"{call.name}({args}) → {outcome}", LINE_CHARS)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no output)"


