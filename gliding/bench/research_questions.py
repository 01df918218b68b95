"""What ``gliding bench research`` asks: trajectory records as jobs and tool results, the lines
(units) of those results, the questions drawn from them and when a context holds an answer.

Pure functions over the records' texts. The rule below is fixed: it is written into every
result (``RULE``, the same text) and a test keeps the two in step. Changing it makes another
benchmark, never a better score.

The rule:

    Units of a result: when gliding.core.records.parse_json_output(output) is not None, the
    lines of json_records(data, "", 0), one per JSON record; else the physical lines of the
    output, each with a display line-number prefix (^\\s*\\d+[\\t:→|], SWE-agent's "12:" too)
    stripped, whitespace at both ends stripped, blank lines dropped.
    Tokens: word tokens are [A-Za-z_][A-Za-z0-9_]{2,} not preceded by [A-Za-z0-9_],
    lower-cased; answer tokens are runs of [A-Za-z0-9_.#/-], with ".", "-" and "/" stripped
    from both ends, that are identifiers (at least 1 digit, 1 letter and 4 characters) or
    numbers (\\d+ or \\d+.\\d+ with at least 2 digits). The document frequency (df) of a
    token (lower-cased) is the number of results, over all input files, with a unit holding
    it; a token is rare when its df < 3.
    A unit is eligible when it is 20-300 characters long, has an answer token (the one with
    the lowest df; ties: the first in the line) and at least 3 distinct word tokens that are
    not rare, not the answer and not part of it. Its question: "In the output of {source},
    what is the {number|identifier} on the line about {words}?" where words are the 4 (or
    fewer) of those word tokens with the lowest df (ties: the first in the line), in line
    order, and source is the tool name and its main argument (the first of path, file_path,
    file, filename, command, cmd, query, pattern, url, input that is set; else the other
    scalar arguments as key=value joined by ", "), whitespace collapsed, clipped to 60
    characters, with every rare token of the unit and the answer removed (case-insensitive,
    wherever no [A-Za-z0-9_] touches it), so that no rare token of the line is quoted.
    Sampling: random.Random(seed); systems (the record's "system") in sorted order; per
    system its eligible units, in input order, are shuffled and taken while no result gives
    more than 2 and no question text repeats, until questions // number of systems (at least
    1) are taken or the system has no more.
    Found: some line of the context holds the answer token (case-insensitive, with no letter
    or digit touching it) and at least 80% of the unit's distinct word tokens.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gliding.core.ids import new_call_id
from gliding.core.iri import result_iri, turn_iri
from gliding.core.records import parse_json_output, result_lines
from gliding.core.text import one_line

RULE = re.sub(r"\s+", " ", """
Units of a result: when gliding.core.records.parse_json_output(output) is not None, the
lines of json_records(data, "", 0), one per JSON record; else the physical lines of the
output, each with a display line-number prefix (^\\s*\\d+[\\t:→|], SWE-agent's "12:" too)
stripped, whitespace at both ends stripped, blank lines dropped.
Tokens: word tokens are [A-Za-z_][A-Za-z0-9_]{2,} not preceded by [A-Za-z0-9_],
lower-cased; answer tokens are runs of [A-Za-z0-9_.#/-], with ".", "-" and "/" stripped
from both ends, that are identifiers (at least 1 digit, 1 letter and 4 characters) or
numbers (\\d+ or \\d+.\\d+ with at least 2 digits). The document frequency (df) of a
token (lower-cased) is the number of results, over all input files, with a unit holding
it; a token is rare when its df < 3.
A unit is eligible when it is 20-300 characters long, has an answer token (the one with
the lowest df; ties: the first in the line) and at least 3 distinct word tokens that are
not rare, not the answer and not part of it. Its question: "In the output of {source},
what is the {number|identifier} on the line about {words}?" where words are the 4 (or
fewer) of those word tokens with the lowest df (ties: the first in the line), in line
order, and source is the tool name and its main argument (the first of path, file_path,
file, filename, command, cmd, query, pattern, url, input that is set; else the other
scalar arguments as key=value joined by ", "), whitespace collapsed, clipped to 60
characters, with every rare token of the unit and the answer removed (case-insensitive,
wherever no [A-Za-z0-9_] touches it), so that no rare token of the line is quoted.
Sampling: random.Random(seed); systems (the record's "system") in sorted order; per
system its eligible units, in input order, are shuffled and taken while no result gives
more than 2 and no question text repeats, until questions // number of systems (at least
1) are taken or the system has no more.
Found: some line of the context holds the answer token (case-insensitive, with no letter
or digit touching it) and at least 80% of the unit's distinct word tokens.
""").strip()

PREFIX = re.compile(r"^\s*\d+[\t:→|]")
WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]{2,}")
RUN = re.compile(r"[A-Za-z0-9_.#/-]+")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
MIN_CHARS, MAX_CHARS = 20, 300  # an eligible unit's length
MIN_WORDS, MAX_WORDS = 3, 4  # non-rare word tokens an eligible unit needs; a question quotes
RARE_DF = 3  # a token held by fewer results is rare
PER_RESULT = 2  # questions one result may give
SOURCE_CHARS = 60
FOUND_SHARE = 0.8  # of the unit's distinct word tokens a context line must hold
MAIN_KEYS = ("path", "file_path", "file", "filename", "command", "cmd", "query", "pattern",
             "url", "input")
SHELLS = frozenset({"bash", "sh", "shell", "execute_bash", "execute", "terminal", "run", "cmd"})
GOAL_CHARS = 500
ROLE = "DA"  # the role whose session a result is put under


@dataclass(frozen=True)
class Result:
    """One tool result of a record, as job 1 archives and ingests it (``Ingestor.ToolCall``)."""

    iri: str
    turn: int  # the assistant step (model call) that made it, from 1
    turn_iri: str
    system: str
    name: str
    arguments: dict[str, Any]
    ok: bool
    output: str
    units: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    id: str
    system: str
    goal: str
    results: tuple[Result, ...]


@dataclass(frozen=True)
class Question:
    system: str
    result: str  # the IRI of the result whose line answers it
    text: str
    answer: str
    kind: str  # number or identifier
    unit: str


def jobs_of(records: Sequence[Mapping[str, Any]], prefix: str = "research") -> list[Job]:
    """One job per record (``<prefix>-<n>``), its goal the first user step, a result per
    ``tool`` step with the arguments of the assistant step before it (a list of parallel
    calls is matched in order)."""
    jobs = []
    for n, record in enumerate(records):
        job = f"{prefix}-{n:04d}"
        system = str(record.get("system") or "?")
        goal = next((_text(s.get("content")) for s in record["steps"]
                     if s.get("role") == "user"), "")
        results: list[Result] = []
        turn, index = 0, 0
        inputs: list[Any] = []
        for step in record["steps"]:
            if step.get("role") == "assistant":
                turn += 1
                given = step.get("tool_input")
                inputs = given if isinstance(given, list) else [given]
                index = 0
            elif step.get("role") == "tool":
                tool = str(step.get("tool_name") or "tool")
                given = inputs[index] if index < len(inputs) else None
                output = _text(step.get("content"))
                results.append(Result(
                    iri=str(result_iri(job, new_call_id(ROLE, turn, index))), turn=turn,
                    turn_iri=str(turn_iri(job, ROLE, turn)), system=system, name=tool,
                    arguments=arguments_of(tool, given), ok=not step.get("is_error"),
                    output=output, units=tuple(units(output))))
                index += 1
        jobs.append(Job(job, system, _valid(one_line(goal, GOAL_CHARS)), tuple(results)))
    return jobs


def arguments_of(tool: str, given: Any) -> dict[str, Any]:
    """A call's arguments as the agent loop archives them: a dict as it is; a string as
    ``command`` for a shell, or a command line starting with the tool's name (SWE-agent),
    else as ``input``."""
    if isinstance(given, dict):
        return given
    if given is None:
        return {}
    if isinstance(given, str):
        first = given.split(maxsplit=1)[0] if given.strip() else ""
        shell = tool.lower() in SHELLS or first == tool
        return {"command" if shell else "input": given}
    return {"input": given}


def units(output: str) -> list[str]:
    """The lines a result is asked about and a baseline ranks (see the module docstring)."""
    lines = result_lines(output, parse_json_output(output), PREFIX)
    return [s for _, line in lines if (s := line.strip())]


def words(text: str) -> list[str]:
    """Word tokens, lower-cased, in order."""
    return [w.lower() for w in WORD.findall(text)]


def answers(text: str) -> list[str]:
    """Answer tokens (identifiers and numbers), as written, in order."""
    out = []
    for run in RUN.findall(text):
        token = run.strip(".-/")
        if _is_number(token) or (len(token) >= 4 and any(c.isdigit() for c in token)
                                 and any(c.isalpha() for c in token)):
            out.append(token)
    return out


def doc_freq(results: Iterable[Result]) -> Counter[str]:
    """Token (lower-cased) → how many results hold it in a unit."""
    df: Counter[str] = Counter()
    for result in results:
        held: set[str] = set()
        for unit in result.units:
            held.update(words(unit))
            held.update(a.lower() for a in answers(unit))
        df.update(held)
    return df


def question_of(result: Result, unit: str, df: Mapping[str, int]) -> Question | None:
    """The question a unit gives, or None when it is not eligible."""
    if not MIN_CHARS <= len(unit) <= MAX_CHARS:
        return None
    found = answers(unit)
    if not found:
        return None
    answer = min(found, key=lambda a: df.get(a.lower(), 0))  # min keeps the first of a tie
    low = answer.lower()
    order = list(dict.fromkeys(words(unit)))
    common = [w for w in order if df.get(w, 0) >= RARE_DF and w not in low]
    if len(common) < MIN_WORDS:
        return None
    picked = set(sorted(common, key=lambda w: df[w])[:MAX_WORDS])  # sorted() is stable
    about = " ".join(w for w in common if w in picked)
    rare = {t for t in (*order, *(a.lower() for a in found)) if df.get(t, 0) < RARE_DF}
    source = scrub(one_line(_source(result.name, result.arguments), SOURCE_CHARS),
                   rare | {low})
    kind = "number" if _is_number(answer) else "identifier"
    text = f"In the output of {source}, what is the {kind} on the line about {about}?"
    return Question(result.system, result.iri, text, answer, kind, unit)


def scrub(text: str, banned: set[str]) -> str:
    """``text`` without any word or answer token in ``banned`` (lower-cased), whitespace
    collapsed; repeated while a removal joins characters into a banned token."""
    while True:
        held = {*words(text), *(a.lower() for a in answers(text))} & banned
        if not held:
            return " ".join(text.split())
        for token in sorted(held, key=len, reverse=True):
            text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(token)}(?![A-Za-z0-9_])", " ", text,
                          flags=re.IGNORECASE)


def questions(results: Sequence[Result], total: int, seed: int) -> list[Question]:
    """The sampled questions (see the module docstring), system by system."""
    df = doc_freq(results)
    pools: dict[str, list[Question]] = defaultdict(list)
    systems = sorted({r.system for r in results})
    for result in results:
        for unit in result.units:
            asked = question_of(result, unit, df)
            if asked is not None:
                pools[result.system].append(asked)
    rng = random.Random(seed)
    quota = max(1, total // max(len(systems), 1))
    seen: set[str] = set()
    out: list[Question] = []
    for system in systems:
        pool = pools[system]
        rng.shuffle(pool)
        taken: Counter[str] = Counter()
        for asked in pool:
            if sum(taken.values()) >= quota:
                break
            if taken[asked.result] >= PER_RESULT or asked.text in seen:
                continue
            seen.add(asked.text)
            taken[asked.result] += 1
            out.append(asked)
    return out


def found(question: Question, context: str) -> bool:
    """Whether a line of ``context`` holds the answer line (see the module docstring)."""
    wanted = set(words(question.unit))
    need = math.ceil(FOUND_SHARE * len(wanted) - 1e-9)
    answer = re.compile(rf"(?<![A-Za-z0-9]){re.escape(question.answer)}(?![A-Za-z0-9])",
                        re.IGNORECASE)
    return any(answer.search(line) and len(wanted & set(words(line))) >= need
               for line in context.splitlines())


def _source(tool: str, arguments: Mapping[str, Any]) -> str:
    for key in MAIN_KEYS:
        value = arguments.get(key)
        if _scalar(value) and str(value).strip():
            return f"{tool} {value}"
    pairs = ", ".join(f"{k}={v}" for k, v in arguments.items() if _scalar(v))
    return f"{tool} {pairs}" if pairs else tool


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _is_number(token: str) -> bool:
    return NUMBER.fullmatch(token) is not None and sum(c.isdigit() for c in token) >= 2


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _valid(text: str) -> str:
    """``text`` with lone surrogates replaced (a literal on the board must be valid UTF-8)."""
    return text.encode("utf-8", "replace").decode("utf-8")
