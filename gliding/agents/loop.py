"""The agent step loop: an explicit state machine that drives one role through one assignment.

    PROMPT ──ready──► AWAIT_MODEL ──tool_calls──► ACT ──done──► PROMPT
      │                  │ ──text──► PROMPT (nudged to use a tool)
      │                  │ ──finish──► FINISHED
      │                  │ ──stalled──► COMPACTION_STALLED
      │                  └ ──error──► FAILED
      ├──turn_cap──► TURN_CAP
      └──budget────► BUDGET
    ACT ──finish──► FINISHED
    ACT ──loop────► LOOP_DETECTED

Every turn is archived in L0 in full (prompt and reply) under
``gliding://job/<job>/turn/<session>/<n>`` together with its ledger row, every tool result under
``gliding://job/<job>/result/<session>-<n>-0``, and each is announced on ``job/<job>/archived``
for ingestion. The session is the role's name (``DA``), or for a DA working on one plan step of
the exploratory pipeline ``DA.<cycle>.<step>`` (``core.iri.step_session``): sessions of one role
run at the same time without sharing a turn number, a result, an intent or a begin mark.
Spending is the role's: budgets are checked and charged per role (``DA``), by every session.
Writes go through the archive port (``memory.archive.port``), never on the event loop. While
the model thinks, the sources the context engine predicts the next step will read are warmed
into the port's read cache.

Resuming is replay: a turn already archived is not asked of the model again (its archived reply
is used and it costs nothing new), and a tool call whose result is archived is not run again
(its archived output is used). A call that may not be repeated (``Tool.idempotent`` false, e.g.
bash) is preceded by an ``intent`` entry. An intent found without its result was cut off by a crash:
if the tool marks when it begins (bash creates ``<job dir>/began/<call>`` before running the
command) and no mark is there, the call never began and runs now; otherwise the model is told
it was interrupted instead of the command running twice.

The session's tool list is declared once (``offer.py``) and its system prompt is archived when
it begins, as is each board message between turns, so every request of the session carries the
same bytes of tools and system, and a resumed session rebuilds exactly the requests the killed
one sent: the provider's prompt cache keeps hitting (docs/context.md, "Cache-aware assembly").

A call whose arguments pass the engine's ``argument_cap`` is not run: they are archived whole
(``gliding://job/<job>/arguments/<session>-<n>``), the prompt keeps a stub naming that IRI, and
the model gets a tool error: a huge argument costs one turn, not every later prompt.

Two guards (``guards.py``) stop a session that only spends, and with it the job (its status
becomes the job's outcome, ``scheduler.policy``), each with a ``guard.tripped`` event: the same
tool call ``loop_limit`` times in a row (``scheduler.loop_limit``) is LOOP_DETECTED, that call
not run (the last repeat allowed was answered with a warning); a prompt whose compaction stalled
(``ContextEngine.stalled``) is COMPACTION_STALLED, before the model is asked. Both are decided
by what replay rebuilds (the session's tool records and its engine, turn by turn), so a resumed
session trips at the same turn as the killed one would have, never on calls it only replays.
A call that repeats an earlier one whose result the prompt no longer holds whole (compacted
into the history block, routed or cut) is counted as a re-read (``AgentResult.rereads``).

A model call is told what the job's wall time budget leaves, and its retries and fallbacks
(``llm/resilient.py``) become job events (``llm.retry``, ``llm.fallback``), as does its reply
while it streams (``model.delta``, batched by ``streaming.py``; ``model.discarded`` when a call
that streamed failed mid-way). A replayed turn streams nothing. When no model
answers at all (``ProviderUnavailable``) the error is not the role's: it leaves the loop, the
job stops ``interrupted`` and ``gliding resume`` replays what was archived.

The module is past 600 lines because the state machine is one function over shared session
state (engine, records, budget, replay position): its pure parts already live beside it
(``offer.py``, ``guards.py``), and splitting the transitions would scatter that state.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import structlog

from gliding.agents import guards
from gliding.agents.approvals import Approvals, Verdict
from gliding.agents.hooks import Hooks
from gliding.agents.offer import declare, own_summaries, resolve, take_summary, tool_search
from gliding.agents.roles import RoleSpec
from gliding.agents.steer import PREFIX as STEER_PREFIX
from gliding.agents.steer import Steering
from gliding.agents.streaming import TurnStream
from gliding.agents.tracing import NO_TRACES, Tracer, provider_of
from gliding.bus import topics
from gliding.bus.messages import ArchivedMsg, JobEvent
from gliding.bus.port import Bus
from gliding.config.settings import ContextSettings
from gliding.context.engine import STALL_CALLS, ContextEngine
from gliding.context.prompt_meter import PromptMeter, PromptWeight
from gliding.context.router import route_call
from gliding.context.tokens import TokenCounter
from gliding.core import events
from gliding.core.budget import BudgetTracker
from gliding.core.iri import record_iri, result_iri, turn_iri
from gliding.core.messages import Completion, Message, ToolCall, Usage
from gliding.core.text import error_line, one_line
from gliding.errors import GlidingError, ProviderUnavailable
from gliding.llm.port import LLM, LLMRequest, ProviderNotice, free_backend
from gliding.memory.archive.port import ArchivePort
from gliding.memory.archive.records import CallRecord
from gliding.tools.base import ToolContext, ToolOutcome, Toolset
from gliding.tools.shell import stop_orphan
from gliding.tools.snapshot import mark as workspace_mark


class State(Enum):
    PROMPT = "prompt"
    AWAIT_MODEL = "await_model"
    ACT = "act"
    FINISHED = "finished"
    TURN_CAP = "turn_cap"
    BUDGET = "budget"
    LOOP_DETECTED = "loop_detected"
    COMPACTION_STALLED = "compaction_stalled"
    FAILED = "failed"


TRANSITIONS: dict[tuple[State, str], State] = {
    (State.PROMPT, "ready"): State.AWAIT_MODEL,
    (State.PROMPT, "turn_cap"): State.TURN_CAP,
    (State.PROMPT, "budget"): State.BUDGET,
    (State.AWAIT_MODEL, "tool_calls"): State.ACT,
    (State.AWAIT_MODEL, "text"): State.PROMPT,
    (State.AWAIT_MODEL, "finish"): State.FINISHED,
    (State.AWAIT_MODEL, "error"): State.FAILED,
    (State.AWAIT_MODEL, "stalled"): State.COMPACTION_STALLED,
    (State.ACT, "done"): State.PROMPT,
    (State.ACT, "finish"): State.FINISHED,
    (State.ACT, "loop"): State.LOOP_DETECTED,
}
TERMINAL = frozenset({State.FINISHED, State.TURN_CAP, State.BUDGET, State.LOOP_DETECTED,
                      State.COMPACTION_STALLED, State.FAILED})

log = structlog.get_logger("gliding.agent")

NUDGE = "Reply with one tool call. When your part is done, call finish."
LINE_CHARS = 160  # a turn summary and a progress line, at most
STEER_SHOWN = 200  # of a steer message, in its event
# a tool result longer than this is added to the context on a worker thread: counting, routing
# and indexing 200 KB takes a few hundred ms of CPU that would stop every job's event loop
OFF_LOOP_CHARS = 32_000
INTERRUPTED = ("error: interrupted: the job stopped while this call ran, so whether it took "
               "effect is unknown. Look at the workspace before repeating it.")


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
    data: dict[str, Any] = field(default_factory=dict)  # what the tool kept besides its text


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
    usage: Usage = Usage()  # what this run's model calls cost (replayed turns included)
    schema_tokens: int = 0  # cl100k tokens of the tool schemas the last prompt carried
    replayed_turns: int = 0
    rereads: int = 0  # calls repeating one whose result the prompt no longer held whole


@dataclass
class AgentEnv:
    """What one agent run needs; built by the agent worker."""

    job: str
    role: RoleSpec
    llm: LLM
    toolset: Toolset
    tool_ctx: ToolContext
    archive: ArchivePort
    budget: BudgetTracker
    bus: Bus
    now: Callable[[], float]
    max_turns: int
    context: ContextSettings
    counter: TokenCounter
    extra_system: str = ""
    turn_base: int = 0  # turns the session used before this assignment (numbers its IRIs)
    session: str = ""  # the session's name in IRIs ("": the role's name)
    on_demand: Mapping[str, Toolset] = field(default_factory=dict)  # loadable by tool_search
    began_dir: Path | None = None  # where tools that mark their begin leave the mark
    data_dir: Path | None = None  # left out of workspace fingerprints when inside the workspace
    # what the team recorded since the last turn ("" when nothing): asked before each turn
    board_update: Callable[[], Awaitable[str]] | None = None
    hooks: Hooks | None = None  # commands before and after each tool call (agents/hooks.py)
    steering: Steering | None = None  # a person's messages to the job (agents/steer.py)
    approvals: Approvals | None = None  # calls that wait for a person's yes (approvals.py)
    # after a tool call ran: (its step, the workspace's mark) -> a snapshot for forks, when the
    # mark moved (daemon/fork.py; the job's own process only)
    snapshots: Callable[[str, str], Awaitable[None]] | None = None
    tracer: Tracer = NO_TRACES  # the job's spans (agents/tracing.py)
    # the same call this many times in a row stops the session (loop_detected); 0: no limit
    # (the worker passes scheduler.loop_limit)
    loop_limit: int = 0


class _Session:
    """``SessionRecall`` over the context engine's L1 chain."""

    def __init__(self, engine: ContextEngine) -> None:
        self.engine = engine

    def recall(self, query: str) -> str:
        found = self.engine.recall(query)
        return "\n".join(f"#{e.turn} {e.role}: {e.summary} <{e.iri}>" for e in found)


async def run_agent(env: AgentEnv, assignment: str) -> AgentResult:
    """Drive one role until it finishes, hits its turn cap or budget, or the model fails."""
    role = env.role
    toolset = env.toolset
    reads_back = "read_result" in toolset.names
    name = env.session or role.name
    system = await _system_prompt(env, name, "\n\n".join(
        x for x in (role.system_prompt(), memory_note(env.context) if reads_back else "",
                    env.extra_system) if x))
    engine = ContextEngine(env.context, env.counter,
                           [Message("system", system), *role.examples,
                            Message("user", assignment)])
    meter = PromptMeter(env.counter)  # built vs naive vs cached, for the turn events
    shown: dict[str, str] = {}  # steer IRI -> text, appended to this session's prompt
    tool_ctx = dataclasses.replace(env.tool_ctx, session=_Session(engine))  # sandbox kept
    env.budget.turns[name] = env.turn_base
    state, turns, finish = State.PROMPT, 0, {}
    summaries: list[TurnSummary] = []
    records: list[ToolRecord] = []
    error: str | None = None
    results_of: dict[str, str] = {}  # guards.call_key -> the IRI of its latest result
    rereads = 0
    calls: tuple[ToolCall, ...] = ()
    completion: Completion | None = None
    usage, replayed = Usage(), 0
    # every tool the session will offer, declared once: the same bytes on every turn (offer.py)
    offer = declare(toolset.specs(), role.finish, on_demand=tuple(env.on_demand),
                    summaries=env.context.summaries.model_written)
    own_summary = own_summaries([*toolset.specs(), role.finish, *(
        t.spec() for group in env.on_demand.values() for t in group.tools)])
    schema_tokens = env.counter.count(json.dumps([t.to_openai() for t in offer.tools]))
    while state not in TERMINAL:
        if state is State.PROMPT:
            if turns >= env.max_turns:
                state = transition(state, "turn_cap")
                continue
            next_iri = str(turn_iri(env.job, name, env.budget.turns[name] + 1))
            if ((reason := env.budget.exhausted(env.now(), role.name)) is not None
                    and await env.archive.find(next_iri) is None):  # a replay was paid for
                error = reason
                state = transition(state, "budget")
                continue
            state = transition(state, "ready")
        elif state is State.AWAIT_MODEL:
            turns += 1
            n = env.budget.count_turn(name)
            if turns > 1 and env.board_update is not None:
                news = await _news(env, name, n, env.board_update)
                if news:  # between the last turn and this one, as a user message
                    engine.add(Message("user", news), iri=str(turn_iri(env.job, name, n - 1)))
            ran = [r.name for r in records if r.ok]
            may_finish = not env.toolset.tools or (
                all(t in ran for t in role.finish_requires)
                and len(ran) >= role.finish_min_calls)
            loaded = [t.spec() for t in toolset.tools if env.toolset.get(t.name) is None]
            iri = str(turn_iri(env.job, name, n))
            replaying = ((env.steering is not None or env.hooks is not None)
                         and await env.archive.find(iri) is not None)
            # a replayed turn's reply is archived: it shows only the steers it was answered
            # with; a new one waits for the next call the model really answers
            steered = (await _steer(env, engine, name, n, shown, replay=replaying)
                       if env.steering is not None else [])
            # a replayed turn's compaction ran its hooks the first time
            hooked = env.hooks is not None and engine.due() and not replaying
            if hooked and env.hooks is not None:
                await env.hooks.compaction("before_compaction", role=role.name, session=name,
                                           turn=n, compactions=engine.stats.compactions)
            done = engine.stats.compactions
            prompt = engine.prompt()  # the assignment is its focus: the prefix's task
            meter.measure(prompt, engine.stats)
            if hooked and env.hooks is not None and engine.stats.compactions > done:
                await env.hooks.compaction("after_compaction", role=role.name, session=name,
                                           turn=n, compactions=engine.stats.compactions,
                                           prompt_tokens=engine.stats.last_prompt_tokens)
            if engine.stalled:
                error = guards.stall_error(engine.stalls, env.context.window, STALL_CALLS)
                await _guard(env, n, State.COMPACTION_STALLED, error)
                state = transition(state, "stalled")
                continue
            marks = engine.cache_marks(prompt, tools=bool(offer.tools))
            request = LLMRequest(messages=tuple(prompt), tools=offer.tools,
                                 tool_choice="required",
                                 callable_tools=offer.callable_now(may_finish=may_finish,
                                                                   loaded=loaded),
                                 meta={"role": role.name, "turn": n, "session": name,
                                       "cache_breakpoints": list(marks.messages),
                                       "cache_tools": marks.tools})
            warm = [w.iri for w in engine.warmed] if env.context.prefetch.enabled else []
            try:
                with env.tracer.span(f"chat {env.llm.name}", {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": provider_of(env.llm.name),
                        "gen_ai.request.model": env.llm.name, "gliding.turn": n}) as span:
                    completion, was_archived = await _complete_warming(env, iri, n, request,
                                                                       warm)
                    span.set_attributes(_usage_attributes(completion, was_archived))
                if steered:
                    await _claim(env, name, n, steered)
            except ProviderUnavailable:
                raise  # not the role's failure: the job stops interrupted, resumable
            except GlidingError as exc:
                error = error_line(f"model call failed: {exc.message}")
                log.warning("llm.call.failed", job=env.job, role=role.name, turn=n,
                            error=error_line(exc.message))
                state = transition(state, "error")
                continue
            replayed += was_archived
            usage = usage + completion.usage
            calls = completion.message.tool_calls[:1]  # one call a turn keeps small models on rails
            own: str | None = None
            oversize: str | None = None  # why the call's arguments are refused
            if calls:
                stubbed, oversize = await _bounded_arguments(env, name, n, calls[0],
                                                             engine.argument_cap)
                calls = (stubbed,)
            if calls and env.context.summaries.model_written and oversize is None:
                taken, own = take_summary(calls[0], own_summary)
                calls = (taken,)
            reply = Message("assistant", completion.message.content, calls)
            engine.add(reply, iri=iri, summary=own)
            if not calls:
                summary = one_line(reply.content or "(empty)", LINE_CHARS)
                summaries.append(TurnSummary(role.name, n, summary, iri))
                engine.add(Message("user", NUDGE), iri=iri)
                await _announce(env, n, iri, "turn", summary)
                await _progress(env, n, completion, "text", summary, meter.last)
                state = transition(state, "text")
                continue
            call = calls[0]
            if call.name == "finish":
                problem = oversize or (_check_finish(role, call) if may_finish else (
                    "finish is not available yet: " + _finish_needs(role, ran)))
                summary = _describe(call, "finished" if problem is None else problem)
                summaries.append(TurnSummary(role.name, n, summary, iri))
                await _announce(env, n, iri, "turn", summary)
                await _progress(env, n, completion, "finish", summary, meter.last)
                if problem is None:
                    finish = dict(call.arguments)
                    state = transition(state, "finish")
                else:
                    engine.add(Message("tool", f"error: {problem}", (), call.id, "finish"),
                               iri=iri)
                    state = transition(state, "text")
                continue
            state = transition(state, "tool_calls")
        elif state is State.ACT:
            assert completion is not None
            # the call as the engine recorded it (without the loop's summary argument); a
            # call_tool(name, arguments) runs, is archived and is described as that tool
            resolved = resolve(calls[0], toolset, env.on_demand)
            call = calls[0] if oversize else resolved.call
            n = env.budget.turns[name]
            t_iri = str(turn_iri(env.job, name, n))
            res_iri = str(result_iri(env.job, f"{name}-{n}-0"))
            key = guards.call_key(call.name, call.arguments)
            # this call's place in a row of the same call
            row = guards.in_a_row([(r.name, r.arguments) for r in records], key) + 1
            if env.loop_limit and row >= env.loop_limit:
                error = guards.loop_error(call.name, call.arguments, row)
                summary = _describe(call, f"not run: the same call {row} times in a row")
                summaries.append(TurnSummary(role.name, n, summary, t_iri))
                await _announce(env, n, t_iri, "turn", summary)
                await _progress(env, n, completion, call.name, summary, meter.last)
                await _guard(env, n, State.LOOP_DETECTED, error)
                state = transition(state, "loop")
                continue
            earlier = results_of.get(key)
            rereads += earlier is not None and not engine.holds_whole(earlier)
            with env.tracer.span(f"execute_tool {call.name}", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": calls[0].id, "gliding.turn": n}) as span:
                outcome, toolset = await _act(
                    env, call, res_iri, n, toolset, tool_ctx, repeated=earlier is not None,
                    warning=guards.warning(row, env.loop_limit),
                    refused=oversize or resolved.problem)
                span.set_attributes({"gliding.tool.ok": outcome.ok})
            if not (oversize or resolved.problem):  # a refused call was not made (not loaded)
                results_of[key] = res_iri
            if not outcome.ok:
                log.info("tool.call.failed", job=env.job, role=role.name, turn=n,
                         tool=call.name, error=_first_line(outcome.output))
            records.append(ToolRecord(call.name, call.arguments, outcome.ok, outcome.output,
                                      res_iri, t_iri, outcome.data))
            result = Message("tool", outcome.output, (), calls[0].id, call.name)
            if len(outcome.output) > OFF_LOOP_CHARS:  # tokens, identifiers, lines: CPU-bound
                await anyio.to_thread.run_sync(partial(engine.add, result, iri=res_iri,
                                                       tool=call.name))
            else:
                engine.add(result, iri=res_iri, tool=call.name)
            summary = _describe(call, _first_line(outcome.output))
            summaries.append(TurnSummary(role.name, n, summary, t_iri))
            await _announce(env, n, t_iri, "turn", summary)
            await _announce(env, n, res_iri, "result", summary, t_iri)
            await _progress(env, n, completion, call.name, summary, meter.last)
            state = transition(state, "done")
    log.info("agent.stopped", job=env.job, role=role.name, state=state.value, turns=turns)
    stats = engine.stats
    return AgentResult(role.name, state.value, finish, turns, tuple(summaries), tuple(records),
                       error, stats.prompt_tokens, stats.baseline_tokens, stats.compactions,
                       stats.archived_results, usage, schema_tokens, replayed, rereads)


async def _bounded_arguments(env: AgentEnv, name: str, n: int, call: ToolCall,
                             cap: int) -> tuple[ToolCall, str | None]:
    """``(call, None)``, or when its arguments pass ``cap`` bytes of JSON: the call with a
    stub instead of them (``router.route_call``) and why it is refused. Their full text is
    archived first, for read_result (a replayed turn puts the same bytes: a no-op)."""
    iri = str(record_iri(env.job, "arguments", f"{name}-{n}"))
    stubbed, size = route_call(call, iri=iri, cap=cap)
    if size is None:
        return call, None
    await env.archive.put(iri, call.arguments_json(), kind="arguments",
                          meta={"tool": call.name, "role": name, "turn": n, "bytes": size})
    log.warning("tool.call.arguments_refused", job=env.job, role=env.role.name, turn=n,
                tool=call.name, bytes=size, cap=cap)
    return stubbed, (f"the arguments of {call.name} are {size} bytes, more than the {cap} a "
                     f"tool call may have, so it was not run; they are archived as {iri} "
                     "(read_result reads them). Split the work into smaller calls.")


async def _system_prompt(env: AgentEnv, name: str, system: str) -> str:
    """The session's system prompt: the one this assignment's session archived when it began
    (a resumed session rebuilds the bytes the killed one sent, so its first live call reads
    the provider's cache), else ``system``, archived now. The board's briefing in it would
    otherwise come out differently after the kill."""
    iri = str(record_iri(env.job, "system", f"{name}-{env.turn_base}"))
    kept = await env.archive.find(iri)
    if kept is not None:
        return (kept.content or b"").decode("utf-8", errors="replace")
    await env.archive.put(iri, system, kind="system",
                          meta={"role": name, "turn_base": env.turn_base})
    return system


async def _news(env: AgentEnv, name: str, n: int,
                board_update: Callable[[], Awaitable[str]]) -> str:
    """What the team recorded since the last turn, for turn ``n``: as archived when the turn
    was first asked (a replayed turn gets the same message, or none when it had none), else
    fresh from the board and archived. The board is asked either way, so what the session has
    been shown stays current."""
    iri = str(record_iri(env.job, "news", f"{name}-{n}"))
    kept = await env.archive.find(iri)
    fresh = await board_update()
    if kept is not None:
        return (kept.content or b"").decode("utf-8", errors="replace")
    if await env.archive.find(str(turn_iri(env.job, name, n))) is not None:
        return ""  # a replayed turn that had no news
    if fresh:
        await env.archive.put(iri, fresh, kind="news", meta={"role": name, "turn": n})
    return fresh


async def _complete_warming(env: AgentEnv, iri: str, n: int, request: LLMRequest,
                            warm: Sequence[str]) -> tuple[Completion, bool]:
    """``_complete``, while the sources the context engine predicted for this step are read
    into the archive's cache: the reads overlap the model's thinking and never delay the call."""
    if not warm:
        return await _complete(env, iri, n, request)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_warm, env, n, warm)
        try:
            return await _complete(env, iri, n, request)
        except Exception as exc:  # noqa: BLE001 - raised below, as it came: the task group would wrap it
            failed = exc
    raise failed


async def _warm(env: AgentEnv, n: int, iris: Sequence[str]) -> None:
    """Prefetch into the archive's read cache; a failure costs only the prefetch."""
    try:
        added = await env.archive.warm(iris)
    except (GlidingError, OSError) as exc:
        log.warning("archive.warm.failed", job=env.job, role=env.role.name, turn=n,
                    error=str(exc))
        return
    log.debug("archive.warmed", job=env.job, role=env.role.name, turn=n, asked=len(iris),
              added=added)


async def _complete(env: AgentEnv, iri: str, n: int,
                    request: LLMRequest) -> tuple[Completion, bool]:
    """The turn's completion: replayed from L0 when archived, else asked of the model and
    archived with its ledger row (then counted against the budget)."""
    archived = await env.archive.find(iri)
    if archived is not None:
        return completion_from_turn(json.loads(archived.content or b"{}")), True
    stream = TurnStream(partial(_publish, env), env.now, session=env.session or env.role.name,
                        turn=n)
    try:
        completion = await env.llm.complete(_with_notices(env, n, request, stream))
    except Exception as exc:
        await stream.discard(error_line(str(exc), 200))
        raise
    await stream.flush()
    await env.archive.put_turn(iri, _turn_body(env, n, request, completion),
                               {"role": env.session or env.role.name, "turn": n}, CallRecord(
        job=env.job, role=env.role.name, turn=n, model=completion.model,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
        cached_tokens=completion.usage.cached_tokens, latency_s=completion.latency_s,
        cost_usd=completion.usage.cost_usd, created_at=env.now(), turn_iri=iri,
        priced=not completion.usage.unpriced_calls))
    env.budget.record(env.role.name, completion.usage)
    return completion, False


def _with_notices(env: AgentEnv, n: int, request: LLMRequest,
                  stream: TurnStream) -> LLMRequest:
    """``request`` bounded by what the job's wall time budget leaves, its retries and
    fallbacks (``llm/resilient.py``) published as job events ``llm.retry`` / ``llm.fallback``
    (a progress line each, and the daemon's job log), its streamed reply as ``model.delta``
    events (``stream``); a retry or fallback after a call that had streamed first makes what
    it streamed void (``model.discarded``)."""
    wall = env.budget.limits.wall_time_s
    left = None if wall is None else max(0.0, wall - (env.now() - env.budget.started_at))

    async def notify(notice: ProviderNotice) -> None:
        await stream.discard(notice.fault)
        kind = events.LLMFallback if notice.kind == "fallback" else events.LLMRetry
        await _publish(env, kind(
            role=env.role.name, session=env.session or env.role.name, turn=n,
            model=notice.model, fault=notice.fault, retry=notice.retry,
            retries=notice.retries, delay_s=round(notice.delay_s, 3),
            next_model=notice.next_model))

    return dataclasses.replace(request, time_left_s=left, notify=notify, on_delta=stream.delta)


async def _publish(env: AgentEnv, event: events.Event) -> None:
    await env.bus.publish(topics.events(env.job), JobEvent.of(env.job, event))


async def _act(env: AgentEnv, call: ToolCall, res_iri: str, n: int, toolset: Toolset,
               ctx: ToolContext, *, repeated: bool, warning: str = "",
               refused: str | None = None) -> tuple[ToolOutcome, Toolset]:
    """Run (or replay) one tool call and archive its result; tool_search may grow the set.
    A ``refused`` call (``offer.resolve`` said why) is not run: the model gets the reason.
    A ``repeated`` call's successful output says so; ``warning`` follows any output."""
    archived = await env.archive.find(res_iri)
    if call.name == "tool_search" and env.on_demand and refused is None:
        outcome, toolset = tool_search(call.arguments, toolset, env.on_demand)
    if archived is not None:
        meta = archived.meta
        text = (archived.content or b"").decode("utf-8", errors="replace")
        return ToolOutcome(bool(meta.get("ok")), text, dict(meta.get("data") or {})), toolset
    session = env.session or env.role.name
    ran = False  # the tool ran now (its after_tool hooks run)
    verdict: Verdict | None = None  # a person's answer, where the approvals policy asks
    if refused is not None:
        outcome = ToolOutcome(False, f"error: {refused}")
    elif call.name != "tool_search" or not env.on_demand:
        tool = toolset.get(call.name)
        name = f"{env.session or env.role.name}-{n}-0"
        intent = str(record_iri(env.job, "intent", name))
        began = env.began_dir / name if env.began_dir and tool and tool.marks_begin else None
        begun = (tool is not None and not tool.idempotent
                 and await env.archive.find(intent) is not None
                 and (began is None or began.exists()))
        said = None  # a call that had begun before a crash is no new call: no hook sees it
        if not begun and env.hooks is not None:
            said = await env.hooks.before_tool(role=env.role.name, session=session, turn=n,
                                               tool=call.name, arguments=call.arguments)
        if not begun and said is None and tool is not None and env.approvals is not None:
            verdict = await env.approvals.decide(role=env.role.name, session=session, turn=n,
                                                 tool=call.name, arguments=call.arguments)
            if verdict is not None:  # the wait is not charged to the wall time budget
                env.budget.started_at += verdict.waited_s
        ctx = _within_budget(env, ctx)
        if begun:
            stopped = began is not None and stop_orphan(began)
            outcome = ToolOutcome(False, INTERRUPTED + (
                " It was still running and has been stopped." if stopped else ""))
            log.warning("tool.call.interrupted", job=env.job, role=env.role.name, turn=n,
                        tool=call.name, stopped=stopped)
        elif said is not None:
            outcome = ToolOutcome(False, f"error: refused by a hook: {said}")
        elif verdict is not None and not verdict.approved:
            assert env.approvals is not None
            outcome = ToolOutcome(False, verdict.outcome_text(env.approvals.timeout_s))
        elif tool is not None and not tool.idempotent:
            # a first call, or one whose intent was written but which never began
            await env.archive.put(intent, call.arguments_json(), kind="intent", meta={
                "tool": call.name, "role": env.session or env.role.name, "turn": n})
            outcome, ran = await toolset.call(call.name, call.arguments,
                                              dataclasses.replace(ctx, began=began)), True
        else:
            outcome, ran = await toolset.call(call.name, call.arguments, ctx), True
    if ran and verdict is not None and (said_too := verdict.outcome_text(0)):
        outcome = ToolOutcome(outcome.ok, f"{outcome.output}\n{said_too}", outcome.data)
    if outcome.ok and repeated:
        outcome = ToolOutcome(True, outcome.output + guards.REPEATED, outcome.data)
    if warning:
        outcome = ToolOutcome(outcome.ok, f"{outcome.output}\n{warning}", outcome.data)
    marked = await anyio.to_thread.run_sync(workspace_mark, ctx.workspace, env.data_dir)
    await env.archive.put(res_iri, outcome.output, kind="result",
                          meta={"tool": call.name, "arguments": call.arguments, "ok": outcome.ok,
                                "role": env.session or env.role.name, "turn": n,
                                "data": outcome.data,
                                "workspace": marked})
    if ran and env.snapshots is not None:
        await env.snapshots(f"{session}-{n}", marked)
    if ran and env.hooks is not None:
        await env.hooks.after_tool(role=env.role.name, session=session, turn=n,
                                   tool=call.name, arguments=call.arguments, ok=outcome.ok,
                                   output=outcome.output)
    return outcome, toolset


def _usage_attributes(c: Completion, replayed: bool) -> dict[str, str | int | float | bool]:
    """A model call's span attributes once it answered (tokens as the provider reported)."""
    out: dict[str, str | int | float | bool] = {
        "gen_ai.response.model": c.model, "gen_ai.usage.input_tokens": c.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": c.usage.completion_tokens,
        "gliding.usage.cached_tokens": c.usage.cached_tokens, "gliding.replayed": replayed}
    if not c.usage.unpriced_calls:
        out["gliding.cost_usd"] = c.usage.cost_usd
    return out


async def _steer(env: AgentEnv, engine: ContextEngine, session: str, n: int,
                 shown: dict[str, str], *, replay: bool) -> list[str]:
    """Append the steers for turn ``n`` that this session has not shown its model yet (those
    the turn claimed before, on a replay, and, unless the turn is a ``replay``, those no
    session has claimed) as user messages before its prompt; the IRIs of the unclaimed ones,
    to claim once the model answered."""
    assert env.steering is not None
    new_ones = []
    for iri, text, new in await env.steering.take(session, n):
        if new and replay:
            continue
        if iri not in shown:
            shown[iri] = text
            engine.add(Message("user", f"{STEER_PREFIX}\n{text}"), iri=iri)
        if new:
            new_ones.append(iri)
    return new_ones


async def _claim(env: AgentEnv, session: str, n: int, iris: list[str]) -> None:
    """The model answered turn ``n`` with ``iris`` in its prompt: claim them; a steer this
    session claimed first is a job event."""
    assert env.steering is not None
    for iri in await env.steering.claim(session, n, iris):
        text = env.steering.text(iri)
        log.info("agent.steered", job=env.job, session=session, turn=n, steer=iri)
        await env.bus.publish(topics.events(env.job), JobEvent.of(env.job, events.Steered(
            session=session, turn=n, steer=iri, text=one_line(text, STEER_SHOWN))))


def _within_budget(env: AgentEnv, ctx: ToolContext) -> ToolContext:
    """``ctx`` with the end of the job's wall time budget as its deadline, so that no tool call
    outlives the budget (``Toolset.call`` stops it there)."""
    wall = env.budget.limits.wall_time_s
    if wall is None:
        return ctx
    left = wall - (env.now() - env.budget.started_at)
    return dataclasses.replace(ctx, deadline=time.monotonic() + left)


async def _guard(env: AgentEnv, n: int, stop: State, detail: str) -> None:
    """A guard stops the session at turn ``n``: a warning and a ``guard.tripped`` event."""
    log.warning("agent.guard.tripped", job=env.job, role=env.role.name, turn=n,
                reason=stop.value, detail=detail)
    await env.bus.publish(topics.events(env.job), JobEvent.of(env.job, events.GuardTripped(
        role=env.role.name, session=env.session or env.role.name, turn=n, reason=stop.value,
        detail=detail)))


def completion_from_turn(body: Mapping[str, Any]) -> Completion:
    """The Completion an archived turn recorded (its reply and usage)."""
    reply = body.get("reply") or {}
    calls = tuple(ToolCall(str(c.get("id", "")), str(c["function"]["name"]),
                           json.loads(c["function"].get("arguments") or "{}"))
                  for c in reply.get("tool_calls") or ())
    u = body.get("usage") or {}
    usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)),
                  int(u.get("cached_tokens", 0)), float(u.get("cost_usd") or 0.0),
                  0 if u.get("cost_known", True) else 1)
    return Completion(Message("assistant", str(reply.get("content") or ""), calls), usage,
                      float(body.get("latency_s", 0.0)), str(body.get("model", "")),
                      raw=str(body.get("raw", "")))


def memory_note(settings: ContextSettings) -> str:
    """What the system prompt says about archived results: the numbers the code uses."""
    r = settings.tool_result_iri
    return (f"Memory: a tool result over {r.threshold} bytes is archived and shown as a summary "
            f"of at most {r.preview_size} bytes with its IRI. Read it back with "
            "read_result(iri, offset, limit) or grep_result(iri, pattern); recall(query) finds "
            "earlier turns that left the prompt and what earlier jobs recorded.")


def _turn_body(env: AgentEnv, n: int, request: LLMRequest, c: Completion) -> str:
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
                  "cached_tokens": c.usage.cached_tokens,
                  "cost_usd": None if c.usage.unpriced_calls else c.usage.cost_usd,
                  "cost_known": not c.usage.unpriced_calls},
        "latency_s": round(c.latency_s, 4),
    }
    return json.dumps(body, ensure_ascii=False, indent=1)


async def _announce(env: AgentEnv, n: int, iri: str, kind: str, summary: str,
                    of_turn: str = "") -> None:
    """Tell ingestion an item reached L0 (the content stays there)."""
    await env.bus.publish(topics.archived(env.job), ArchivedMsg(
        job=env.job, iri=iri, kind="turn" if kind == "turn" else "result", role=env.role.name,
        turn=n, summary=summary, turn_iri=of_turn))


async def _progress(env: AgentEnv, n: int, c: Completion, action: str, summary: str,
                    weight: PromptWeight | None) -> None:
    """The ``turn`` event; ``weight``: the call's prompt measured (built, naive, a simulated
    cache's hit, compactions), for the dashboard. A provider that reported cached tokens is
    believed over the simulation."""
    spent = env.budget.usage
    measured: dict[str, Any] = {} if weight is None else {
        "built_tokens": weight.built, "naive_tokens": weight.naive,
        "cached_tokens": weight.cached, "cached_source": "simulated",
        "compactions": weight.compactions}
    if c.usage.cached_tokens:
        measured |= {"cached_tokens": c.usage.cached_tokens, "cached_source": "provider"}
    await env.bus.publish(topics.events(env.job), JobEvent.of(env.job, events.Turn(
        role=env.role.name, session=env.session or env.role.name, turn=n,
        action=action, summary=summary,
        prompt_tokens=c.usage.prompt_tokens, completion_tokens=c.usage.completion_tokens,
        job_prompt_tokens=spent.prompt_tokens,
        job_completion_tokens=spent.completion_tokens, job_cost_usd=spent.cost_usd,
        job_unpriced_calls=spent.unpriced_calls, cost_free=free_backend(env.llm.name),
        **measured)))


def _finish_needs(role: RoleSpec, ran: list[str]) -> str:
    missing = [t for t in role.finish_requires if t not in ran]
    if missing:
        return f"call {', '.join(missing)} first"
    return f"make {role.finish_min_calls} successful tool call(s) first"


def _check_finish(role: RoleSpec, call: ToolCall) -> str | None:
    schema = role.finish.parameters
    missing = [k for k in schema.get("required", []) if k not in call.arguments]
    if missing:
        return f"finish needs: {', '.join(missing)}"
    for key, prop_ in schema.get("properties", {}).items():
        if "enum" in prop_ and key in call.arguments and call.arguments[key] not in prop_["enum"]:
            return f"finish.{key} must be one of {', '.join(map(str, prop_['enum']))}"
    return None


def _describe(call: ToolCall, outcome: str) -> str:
    args = ", ".join(f"{k}={one_line(json.dumps(v, ensure_ascii=False), 40)}"
                     for k, v in call.arguments.items())
    return one_line(f"{call.name}({args}) → {outcome}", LINE_CHARS)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no output)"
