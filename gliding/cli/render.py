"""How a job looks on the terminal: one progress line per event, the final report, and its JSON."""

from __future__ import annotations

from typing import Any

from gliding.bus.messages import JobEvent
from gliding.scheduler.runner import JobReport


def progress_line(event: JobEvent) -> str | None:
    d = event.data
    if event.event == "job.started":
        return f"job {event.job}: pipeline {' → '.join(d['pipeline'])} ({d['kind']}: {d['reason']})"
    if event.event == "role.started":
        return f"[{d['role']}] started (cycle {d['cycle']}, attempt {d['attempt']})"
    if event.event == "turn":
        return (f"[{d['role']} turn {d['turn']}] {d['summary']}  "
                f"| prompt {d['prompt_tokens']} tok, job {d['job_prompt_tokens']} tok, "
                f"${d['job_cost_usd']:.4f}")
    if event.event == "role.finished":
        return f"[{d['role']}] {d['status']} after {d['turns']} turn(s)"
    if event.event == "check.report":
        verdict = "all checks passed" if d["passed"] else "a check failed"
        return f"[CA] {verdict} → {d['next']}"
    return None


def report_dict(report: JobReport, *, archive: str, model: str) -> dict[str, Any]:
    return {
        "job": report.job,
        "outcome": report.outcome,
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
        "checks": [{"check": r.check.describe(), "status": r.status, "evidence": r.evidence,
                    "expected": r.expected} for r in report.checks],
        "roles": [{"role": r.role, "turns": r.turns, "prompt_tokens": r.usage.prompt_tokens,
                   "completion_tokens": r.usage.completion_tokens,
                   "cached_tokens": r.usage.cached_tokens, "cost_usd": r.usage.cost_usd}
                  for r in report.roles],
        "total": {"prompt_tokens": report.total.prompt_tokens,
                  "completion_tokens": report.total.completion_tokens,
                  "cached_tokens": report.total.cached_tokens,
                  "cost_usd": report.total.cost_usd},
        "artifacts": [{"path": p, "iri": i} for p, i in report.artifacts],
        "turns": [{"role": t.role, "turn": t.turn, "summary": t.summary, "iri": t.iri}
                  for t in report.turns],
        "context": {
            "prompt_tokens": sum(v[0] for v in report.context_tokens.values()),
            "append_only_baseline_tokens": sum(v[1] for v in report.context_tokens.values()),
            "by_role": {r: {"prompt_tokens": v[0], "append_only_baseline_tokens": v[1]}
                        for r, v in report.context_tokens.items()},
        },
        "wall_s": round(report.wall_s, 3),
        "archive": archive,
    }


def report_text(d: dict[str, Any]) -> str:
    lines = [
        "",
        f"Outcome: {d['outcome'].upper()}   job {d['job']}   model {d['model']}   "
        f"{d['wall_s']:.1f}s",
        f"Pipeline: {' → '.join(d['pipeline']['roles'])} ({d['pipeline']['kind']}), "
        f"cycles {d['cycles']}, corrections {d['corrections']}",
    ]
    if d["stopped"]:
        lines.append(f"Stopped: {d['stopped']}")
    if d["decision"]:
        lines.append(f"Decision: {d['decision']} — {d['report']}")
    lines.append(f"Checks (verified by {d['checks_verified_by']}):")
    for c in d["checks"] or [{"status": "-", "check": "no checks in the task", "evidence": ""}]:
        lines.append(f"  {c['status'].upper():4} {c['check']}")
        if c["evidence"]:
            lines.append(f"       evidence: {c['evidence']}")
    lines.append("Tokens and cost per role:")
    lines.append(f"  {'role':4} {'turns':>5} {'prompt':>8} {'completion':>10} {'cached':>7} "
                 f"{'cost $':>9}")
    for r in d["roles"]:
        lines.append(f"  {r['role']:4} {r['turns']:>5} {r['prompt_tokens']:>8} "
                     f"{r['completion_tokens']:>10} {r['cached_tokens']:>7} {r['cost_usd']:>9.4f}")
    t = d["total"]
    lines.append(f"  {'all':4} {'':>5} {t['prompt_tokens']:>8} {t['completion_tokens']:>10} "
                 f"{t['cached_tokens']:>7} {t['cost_usd']:>9.4f}")
    ctx = d["context"]
    if ctx["append_only_baseline_tokens"]:
        saved = 1 - ctx["prompt_tokens"] / ctx["append_only_baseline_tokens"]
        lines.append(f"Prompt tokens (cl100k, all calls): {ctx['prompt_tokens']} vs "
                     f"{ctx['append_only_baseline_tokens']} append-only ({saved:.0%} saved)")
    if d["artifacts"]:
        lines.append("Artifacts:")
        lines += [f"  {a['path']}  {a['iri']}" for a in d["artifacts"]]
    lines.append(f"Archive: {d['archive']}  (read back: gliding memory show IRI)")
    return "\n".join(lines)
