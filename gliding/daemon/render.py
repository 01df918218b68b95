"""How a job looks to a person, for both front doors (the CLI and the MCP server): one
progress line per event, the final report and its JSON, the daemon's records as lines.

Much of what is shown was written by a model (turn summaries, plans, AA's report, check
evidence quoting a file, paths). None of it reaches the terminal raw: a progress line and each
line of the report are made one line with control characters escaped (``terminal_safe``), so
model text cannot send escape sequences or start a line that passes for the report's own
(``Outcome: SUCCESS``). ``json_text`` escapes what JSON itself would leave raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import structlog

from gliding.bus.messages import JobEvent
from gliding.core import events
from gliding.core.logs import terminal_safe
from gliding.core.messages import Usage
from gliding.core.prices import CostTotal
from gliding.core.text import clip, error_line, one_line
from gliding.daemon.schedule import scheduled_by, zone
from gliding.errors import GlidingError
from gliding.llm.port import free_backend
from gliding.scheduler.report import JobReport
from gliding.tools.sandbox import UNPROTECTED

_UNRENDERED: set[str] = set()  # event names already logged as not renderable (bounded)
LINE_CHARS = 2000  # a progress line, at most


def progress_line(event: JobEvent) -> str | None:
    """The line shown for ``event`` (one line, control characters escaped, at most
    LINE_CHARS), or None. An event this Gliding does not know (``gliding.core.events``: a
    newer one) is skipped with a debug log; one whose data has another shape than its name
    promises (a field missing, of another type: a forged event) is not shown, and logged
    once per name: rendering never raises into the job that emitted it."""
    if event.event not in events.EVENTS:
        structlog.get_logger("gliding.cli").debug(
            "cli.event.unknown", event_name=str(event.event)[:100],
            schema_version=event.schema_version)
        return None
    try:
        line = _progress_line(event)
    except Exception as exc:  # noqa: BLE001 - a forged or newer event must not stop a job
        _unrendered(event, exc)
        return None
    return None if line is None else clip(terminal_safe(line), LINE_CHARS)


def _unrendered(event: JobEvent, exc: Exception) -> None:
    name = str(event.event)[:100]
    if name in _UNRENDERED or len(_UNRENDERED) >= 100:
        return
    _UNRENDERED.add(name)
    structlog.get_logger("gliding.cli").warning(
        "cli.event.unrendered", job=str(event.job)[:100], event_name=name,
        error=error_line(f"{type(exc).__name__}: {exc}", 200))


def _progress_line(event: JobEvent) -> str | None:
    d = event.data
    if not isinstance(d, dict):
        raise TypeError(f"data is a {type(d).__name__}, not a mapping")
    if event.event == events.JobStarted.name:
        return f"job {event.job}: pipeline {' → '.join(d['pipeline'])} ({d['kind']}: {d['reason']})"
    if event.event == events.JobSandbox.name:
        if event.data.get("confined"):
            return f"job {event.job}: {event.data['line']}"
        return f"job {event.job}: WARNING {UNPROTECTED}"
    if event.event == events.ToolchainRefused.name:
        return f"job {event.job}: toolchain: not mounted {d['path']} ({d['what']}): {d['why']}"
    if event.event == events.WorkspaceChanged.name:
        return (f"job {event.job}: the workspace changed since the job last recorded it; "
                "the agents go on with it as it is now")
    if event.event == events.RoleStarted.name:
        return (f"[{_who(d)}] started (cycle {d['cycle']}, attempt {d['attempt']}"
                f"{_step(d)}){_on(d)}")
    if event.event == events.WorkGranted.name:
        return (f"[{_who(d)}] granted to worker {d['worker']} (cycle {d['cycle']}, "
                f"attempt {d['attempt']}{_step(d)})")
    if event.event == events.Turn.name:
        cost = CostTotal(float(d["job_cost_usd"]), int(d.get("job_unpriced_calls") or 0))
        return (f"[{_who(d)} turn {d['turn']}] {d['summary']}  "
                f"| prompt {d['prompt_tokens']} tok, job {d['job_prompt_tokens']} tok, "
                f"{cost.text(free=d.get('cost_free'))}")
    if event.event == events.GuardTripped.name:
        return f"[{d['session']} turn {d['turn']}] stopped, {d['reason']}: {d['detail']}"
    if event.event == events.MemoryWithheld.name:
        return f"[{d['role']}] on worker {d['worker']} without the knowledge tools: {d['reason']}"
    if event.event == events.RoleFinished.name:
        replayed = f", {d['replayed']} replayed from the archive" if d.get("replayed") else ""
        return f"[{_who(d)}] {d['status']} after {d['turns']} turn(s){replayed}{_on(d)}"
    if event.event == events.CheckReport.name:
        if d["passed"]:
            return f"[CA] all checks passed → {d['next']}"
        failed = "; ".join(d.get("failed") or ()) or "a check failed"
        return f"[CA] FAIL {failed} → {d['next']}"
    if event.event == events.Steered.name:
        return f"[{d['session']} turn {d['turn']}] steered: {d['text']}"
    if event.event == events.ApprovalRequested.name:
        return (f"[{d['session']} turn {d['turn']}] waiting for approval {d['approval']}: "
                f"{d['tool']} {d['arguments']} ({d['reason']}; gliding approve {event.job} "
                f"--id {d['approval']}, or gliding deny)")
    if event.event == events.ApprovalAnswered.name:
        said = f": {d['note']}" if d.get("note") else ""
        verdict = "approved" if d["approved"] else (
            "denied (no answer in time)" if d["by"] == "timeout" else "denied")
        return f"[{d['session']} turn {d['turn']}] approval {d['approval']} {verdict}{said}"
    if event.event == events.HookRefused.name:
        return (f"[{d['session']} turn {d['turn']}] {d['tool']} refused by hook "
                f"`{d['hook']}`: {d['reason']}")
    if event.event == events.HookFailed.name:
        on = f" ({d['tool']})" if d.get("tool") else ""
        return f"hook `{d['hook']}` failed at {d['point']}{on}: {d['error']}"
    if event.event == events.LLMRetry.name:
        return (f"[{d['session']}] model {d['model']}: {d['fault']}, retry "
                f"{d['retry']}/{d['retries']} in {d['delay_s']:.1f}s")
    if event.event == events.LLMFallback.name:
        return (f"[{d['session']}] model {d['model']}: {d['fault']}, retries spent → "
                f"falling back to {d['next_model']}")
    if event.event == events.ModelDelta.name:
        return _streamed(str(d["session"]), int(d["turn"]), d.get("tool"), str(d["text"]))
    if event.event == events.ModelDiscarded.name:
        return (f"[{d['session']} turn {d['turn']}] ✗ the {int(d['chars'])} characters "
                f"streamed above are void ({d['reason']}); the reply comes again")
    return None


def _streamed(session: str, turn: int, tool: Any, text: str) -> str:
    """A line of a turn's streamed reply: ``[DA turn 3] ▸ text``, or ``▸ write_file`` and
    the text of that tool call's JSON arguments."""
    return f"[{session} turn {turn}] ▸ {f'{tool} ' if tool else ''}{text}"


STREAM_WIDTH = 160  # a streamed line without a line break is shown in pieces this long
_STREAMS_HELD = 64  # turns whose unfinished line is held at once, at most


class StreamLines:
    """A job's streamed replies (``model.delta``) as the model's own lines, not a line per
    event: each turn's text is held until a line break (or STREAM_WIDTH characters), then
    shown a line at a time; what is held is shown when any other event comes (``flush``),
    so the lines of a turn come before its ``turn`` line, and before a ``model.discarded``
    line that declares them void.

        streams = StreamLines()
        lines = streams.take(event)       # a model.delta or model.discarded: its lines
        if lines is None:                 # any other event: what is held, then its own line
            lines = [*streams.flush(), progress_line(event)]
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, str | None], str] = {}

    def take(self, event: JobEvent) -> list[str] | None:
        """The lines ``event`` completes, when it is a ``model.delta`` (held text ends its
        line) or a ``model.discarded`` (the turn's held text dropped, its own line); None for
        any other event."""
        d = event.data if isinstance(event.data, dict) else {}
        if event.event == events.ModelDiscarded.name:  # what was streamed, then that it is void
            turn = (str(d.get("session")), d.get("turn"))
            out = [line for key in list(self._held) if key[:2] == turn
                   for line in self._release(key)]
            line = progress_line(event)
            return [*out, line] if line else out
        if event.event != events.ModelDelta.name:
            return None
        parsed = events.parse(event.event, d)
        if not isinstance(parsed, events.ModelDelta) or not isinstance(parsed.text, str):
            return []
        key = (str(parsed.session), parsed.turn, parsed.tool)
        out = [line for other in list(self._held)  # the turn went on to other text
               if other[:2] == key[:2] and other != key for line in self._release(other)]
        *whole, rest = (self._held.pop(key, "") + parsed.text).split("\n")
        while len(rest) >= STREAM_WIDTH:
            whole.append(rest[:STREAM_WIDTH])
            rest = rest[STREAM_WIDTH:]
        out += [self._line(key, text) for text in whole]
        if rest:
            if len(self._held) >= _STREAMS_HELD:
                out += self._release(next(iter(self._held)))
            self._held[key] = rest
        return out

    def flush(self) -> list[str]:
        """Every held line, shown now."""
        return [line for key in list(self._held) for line in self._release(key)]

    def _release(self, key: tuple[str, int, str | None]) -> list[str]:
        text = self._held.pop(key, "")
        return [self._line(key, text)] if text else []

    @staticmethod
    def _line(key: tuple[str, int, str | None], text: str) -> str:
        return clip(terminal_safe(_streamed(*key, text)), LINE_CHARS)


def _who(d: dict[str, Any]) -> str:
    """A line's session: the role, or a plan step's session (``DA.1.s2``), so the lines of
    step DAs running side by side can be told apart."""
    return str(d.get("session") or d["role"])


def _step(d: dict[str, Any]) -> str:
    return f", step {d['step']}" if d.get("step") else ""


def _on(d: dict[str, Any]) -> str:
    return f" on worker {d['worker']}" if d.get("worker") else ""


def cost_fields(usage: Usage) -> dict[str, Any]:
    """A cost in JSON: ``cost_usd`` is null when some call had no price (``cost_known``
    false); ``cost_usd_at_least`` is the sum of the calls whose cost is known."""
    return {"cost_usd": usage.cost_usd if usage.cost.known else None,
            "cost_known": usage.cost.known, "cost_usd_at_least": usage.cost_usd,
            "unpriced_calls": usage.unpriced_calls}


def report_dict(report: JobReport, *, archive: str, model: str) -> dict[str, Any]:
    return {
        "job": report.job,
        "outcome": report.outcome,
        "why": outcome_reason(report),
        "model": model,
        "pipeline": {"roles": list(report.pipeline.roles), "kind": report.pipeline.kind,
                     "reason": report.pipeline.reason},
        "cycles": report.cycles,
        "corrections": report.corrections,
        "plan": list(report.plan),
        "decision": report.decision,
        "report": report.report,
        "stopped": report.stopped,
        "checks_verified_by": report.checks_verified_by,
        "checks": [{"check": r.check, "status": r.status, "evidence": r.evidence,
                    "expected": r.expected} for r in report.checks],
        "checked_files": dict(report.checked_files),
        "roles": [{"role": r.role, "turns": r.turns, "prompt_tokens": r.usage.prompt_tokens,
                   "completion_tokens": r.usage.completion_tokens,
                   "cached_tokens": r.usage.cached_tokens, **cost_fields(r.usage),
                   "schema_tokens": r.schema_tokens}
                  for r in report.roles],
        "total": {"prompt_tokens": report.total.prompt_tokens,
                  "completion_tokens": report.total.completion_tokens,
                  "cached_tokens": report.total.cached_tokens,
                  **cost_fields(report.total)},
        # the models whose calls had no price; cost_free: "local" or "scripted" when the
        # job's model costs nothing by nature (its $0 is known)
        "unpriced_models": list(report.unpriced_models),
        "cost_free": free_backend(model),
        "artifacts": [{"path": p, "iri": i} for p, i in report.artifacts],
        "skipped_artifacts": [{"path": p, "why": why} for p, why in report.skipped_artifacts],
        "turns": [{"role": t.role, "turn": t.turn, "summary": t.summary, "iri": t.iri}
                  for t in report.turns],
        "context": {
            "prompt_tokens": sum(v[0] for v in report.context_tokens.values()),
            "append_only_baseline_tokens": sum(v[1] for v in report.context_tokens.values()),
            # calls that repeated an earlier call whose result the prompt no longer held whole
            "post_compaction_rereads": sum(report.rereads.values()),
            "by_role": {r: {"prompt_tokens": v[0], "append_only_baseline_tokens": v[1],
                            "post_compaction_rereads": report.rereads.get(r, 0)}
                        for r, v in report.context_tokens.items()},
        },
        "resumed": report.resumed,
        "workspace_changed": report.workspace_changed,
        "board_updates": dict(report.board_updates),
        "wall_s": round(report.wall_s, 3),
        "archive": archive,
    }


def outcome_reason(report: JobReport) -> str:
    """Why the job ended as it did, in the words of the evidence."""
    failed = [r for r in report.checks if not r.passed]
    if report.outcome in ("budget_exceeded", "loop_detected", "compaction_stalled"):
        return f"stopped: {error_line(report.stopped or '')}"
    if report.outcome == "error":
        return f"stopped by an error: {error_line(report.stopped or '')}"
    if failed:
        head = f"{len(failed)} of {len(report.checks)} checks failed"
        return f"{head}: {failed[0].check}" + (" (AA escalated)" if report.decision ==
                                                "escalate" else "")
    if report.checks:
        return f"every check passed (verified by {report.checks_verified_by})"
    if report.outcome == "escalated":
        return "AA escalated the job to a human"
    return "the team finished; the task has no checks"


def report_text(d: dict[str, Any]) -> str:
    lines = [
        "",
        f"Outcome: {d['outcome'].upper()} — {d['why']}",
        f"Job {d['job']}   model {d['model']}   {d['wall_s']:.1f}s"
        + (f"   resumed {d['resumed']}×" if d.get("resumed") else ""),
        f"Pipeline: {' → '.join(d['pipeline']['roles'])} ({d['pipeline']['kind']}), "
        f"cycles {d['cycles']}, corrections {d['corrections']}",
    ]
    if d["stopped"]:
        lines.append(f"Stopped: {d['stopped']}")
    if d["decision"]:
        note = ""
        if d["decision"] == "escalate" and d["outcome"] == "success":
            note = " (not taken: every check passed)"
        lines.append(f"AA's decision: {d['decision']}{note} — {d['report']}")
    lines.append(f"Checks (verified by {d['checks_verified_by']}):")
    for c in d["checks"] or [{"status": "-", "check": "no checks in the task", "evidence": ""}]:
        lines.append(f"  {c['status'].upper():4} {c['check']}")
        if c["evidence"]:
            lines.append(f"       evidence: {c['evidence']}")
    if d["checked_files"]:
        lines.append("Checked files: " + ", ".join(f"{p} ({how})"
                                                   for p, how in d["checked_files"].items()))
    if d.get("workspace_changed"):
        lines.append("Warning: the workspace changed behind the job's back before a resume.")
    lines.append("Tokens and cost per role (as the model reported them):")
    lines.append(f"  {'role':4} {'turns':>5} {'prompt':>8} {'completion':>10} {'cached':>7} "
                 f"{'cost $':>13} {'schema':>7}")
    free = d.get("cost_free")
    for r in d["roles"]:
        lines.append(f"  {r['role']:4} {r['turns']:>5} {r['prompt_tokens']:>8} "
                     f"{r['completion_tokens']:>10} {r['cached_tokens']:>7} "
                     f"{_cost_of(r).cell(free=free):>13} {r['schema_tokens']:>7}")
    t = d["total"]
    lines.append(f"  {'all':4} {'':>5} {t['prompt_tokens']:>8} {t['completion_tokens']:>10} "
                 f"{t['cached_tokens']:>7} {_cost_of(t).cell(free=free):>13}")
    lines.append("  (schema: cl100k tokens of the tool schemas in the role's prompt)")
    if not _cost_of(t).known:
        models = ", ".join(d.get("unpriced_models") or ()) or "?"
        lines.append(f"Cost: {_cost_of(t).text()}: no price is known for {models}; give it "
                     "one in llm.prices (docs/config.md, 'Prices and costs')")
    ctx = d["context"]
    if ctx["append_only_baseline_tokens"]:
        saved = 1 - ctx["prompt_tokens"] / ctx["append_only_baseline_tokens"]
        lines.append(f"Context engine: the prompts it built came to {ctx['prompt_tokens']} "
                     f"cl100k tokens, against {ctx['append_only_baseline_tokens']} had every "
                     f"message been appended ({saved:.0%} saved); the table counts the model's "
                     "own tokenizer.")
    if ctx.get("post_compaction_rereads"):
        lines.append(f"Re-reads: {ctx['post_compaction_rereads']} call(s) repeated an earlier "
                     "call whose result the prompt no longer held whole.")
    if d["artifacts"]:
        lines.append("Artifacts:")
        lines += [f"  {a['path']}  {a['iri']}" for a in d["artifacts"]]
    if d.get("skipped_artifacts"):
        lines.append("Not archived:")
        lines += [f"  {a['path']}  {a['why']}" for a in d["skipped_artifacts"]]
    lines.append(f"Archive: {d['archive']}  (read back: gliding memory show IRI)")
    return "\n".join(terminal_safe(line) for line in lines)


def _cost_of(d: dict[str, Any]) -> CostTotal:
    """The cost a report row or total holds (``cost_fields``; a report of a Gliding before
    unpriced calls has only ``cost_usd``)."""
    at_least = d.get("cost_usd_at_least", d.get("cost_usd"))
    return CostTotal(float(at_least or 0.0), int(d.get("unpriced_calls") or 0))


# What json.dumps(ensure_ascii=False) leaves raw although a terminal acts on it: DEL, the C1
# controls and the characters that reorder or break lines.
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_text(data: Any, *, indent: int | None = 2,
              default: Callable[[Any], Any] | None = None) -> str:
    """``data`` as JSON for the terminal: readable Unicode, every control character escaped."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=default)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# -- the daemon's jobs (gliding submit, status, logs, jobs) --------------------------------------

def event_line(record: dict[str, Any]) -> str:
    """One event of a daemon job's stream (``seq``, ``at``, ``event``, ``data``) as a line:
    its time, then the progress line ``gliding run`` shows for it, or what the daemon did."""
    name, data = str(record.get("event", "?")), record.get("data") or {}
    text: str | None = None
    try:  # a record of another shape (data not a mapping) is not a JobEvent: shown as is
        text = progress_line(JobEvent(job=str(record.get("job", "")), event=name, data=data))
    except (KeyError, TypeError, ValueError):
        text = None
    if text is None:
        text = _daemon_event(name, data if isinstance(data, dict) else {"data": data})
    return terminal_safe(f"{_stamp(record)} {text}")


def _stamp(record: dict[str, Any]) -> str:
    import time

    at = record.get("at")
    return time.strftime("%H:%M:%S", time.localtime(at)) if isinstance(at, int | float) \
        else "--:--:--"


def event_lines(record: dict[str, Any], streams: StreamLines) -> list[str]:
    """``event_line`` with the streamed replies shown as lines of their own (``StreamLines``):
    what ``gliding logs`` and ``gliding submit --wait`` print for each record."""
    name, data = str(record.get("event", "?")), record.get("data")
    if name in (events.ModelDelta.name, events.ModelDiscarded.name) and isinstance(data, dict):
        taken = streams.take(JobEvent(job=str(record.get("job", "")), event=name, data=data))
        if taken is not None:
            return [f"{_stamp(record)} {line}" for line in taken]
    return [*(f"{_stamp(record)} {line}" for line in streams.flush()), event_line(record)]


def _daemon_event(name: str, d: dict[str, Any]) -> str:
    if name == events.JobQueued.name:
        return "queued again (to resume)" if d.get("resume") else f"queued: {d.get('goal', '')}"
    if name == events.JobDispatched.name:
        again = "resumed" if int(d.get("run") or 1) > 1 else "started"
        return f"{again} by the daemon (run {d.get('run')}, {d.get('running')} running)"
    if name == events.JobFinished.name:
        return f"finished: {d.get('outcome')}"
    if name == events.JobCancelled.name:
        return "cancelled" + ("" if d.get("ran") else " before it started")
    if name == events.JobPaused.name:
        return f"paused: {d.get('reason')}"
    if name == events.JobStopped.name:
        return f"stopped: {d.get('error')}"
    if name == events.JobSuspended.name:
        return "suspended: the daemon stopped; it resumes the job when it starts again"
    return f"{name} {json.dumps(d, ensure_ascii=False, default=str)[:300]}"


def queue_line(job: dict[str, Any]) -> str:
    """A job of the daemon's queue as ``gliding jobs`` lists it."""
    state = job.get("outcome") or job.get("state") or "?"
    if job.get("state") == "interrupted":
        state = "interrupted"
    runs = int(job.get("runs") or 0)
    resumed = f"  (resumed {runs - 1}×)" if runs > 1 else ""
    error = f"  {job['error']}" if job.get("error") and state != "success" else ""
    by = scheduled_by(str(job.get("name") or ""))
    scheduled = f"  ({job['name']})" if by else ""  # <schedule>@<time>: which run it is
    return terminal_safe(f"{job.get('job')}  {state:<15} {str(job.get('goal', ''))[:60]}"
                         f"{scheduled}{resumed}{error}")


def schedule_line(s: dict[str, Any]) -> str:
    """A schedule of the daemon as ``gliding schedule list`` shows it: its times in its zone."""
    def when(t: Any) -> str:
        if t is None:
            return "never"
        try:
            return datetime.fromtimestamp(float(t), zone(str(s.get("tz")))).isoformat(
                timespec="minutes")
        except (GlidingError, ValueError, OverflowError):
            return str(t)

    last = f"  last job {s['last_job']}" if s.get("last_job") else ""
    return terminal_safe(f"{s.get('name')}  {s.get('cron')!r} {s.get('tz')}  "
                         f"missed={s.get('missed')} overlap={s.get('overlap')}  "
                         f"{s.get('task_name')}  next {when(s.get('next_due'))}{last}")


def status_text(s: dict[str, Any]) -> str:
    """How a daemon job stands, one ``key: value`` a line."""
    import time

    def when(t: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"

    lines = [f"job:       {s['job']}",
             f"state:     {s['state']}" + (f" ({s['outcome']})" if s.get("outcome") else ""),
             f"goal:      {s.get('goal', '')}",
             f"task:      {s.get('name', '')}   workspace {s.get('workspace', '')}",
             "model:     " + (s.get("model") or "(the task's, else llm.model)"),
             f"submitted: {when(s.get('submitted'))}   started {when(s.get('started'))}   "
             f"finished {when(s.get('finished'))}   runs {s.get('runs', 0)}"]
    if s.get("error"):
        lines.append(f"error:     {s['error']}")
    p = s.get("progress")
    if p:
        roles = ", ".join(f"{r} {n}" for r, n in p["turns_by_role"].items()) or "none yet"
        t = p["tokens"]
        cost = CostTotal(float(t.get("cost_usd_at_least", t.get("cost_usd")) or 0.0),
                         int(t.get("unpriced_calls") or 0))
        lines.append(f"turns:     {p['turns']} ({roles})")
        lines.append(f"tokens:    prompt {t['prompt']}, completion {t['completion']}, "
                     f"{cost.text(free=t.get('cost_free'))}")
        if not cost.known:
            lines.append(f"unpriced:  {', '.join(t.get('unpriced_models') or ()) or '?'} "
                         "(no price known; give it one in llm.prices)")
        lines.append(f"archive:   {s.get('archive')} ({p['archive_status']})")
    for a in s.get("approvals_waiting") or ():
        lines.append(f"waiting:   approval {a['approval']}: {approval_text(a)} "
                     f"(denied at {when(a.get('deadline'))} unless answered)")
    return "\n".join(terminal_safe(line) for line in lines)


def approval_text(a: dict[str, Any]) -> str:
    """A call waiting for approval, one line: the tool and its arguments."""
    shown = json.dumps(a.get("arguments") or {}, ensure_ascii=False)
    return one_line(f"{a.get('tool')} {shown}", 300)
