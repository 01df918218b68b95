"""`gliding bench research`: the question rule on small synthetic trajectories written here, the
found rule, and a whole run (no embedding model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gliding.bench import research_questions as rq
from gliding.bench.research import run_research_bench
from gliding.bench.research_questions import Question, found, jobs_of, questions, units
from gliding.core.records import json_records
from tests.bench.test_bench_cli import write
from tests.cli.cli_support import invoke

ASKED = re.compile(r"In the output of (.*), what is the (number|identifier) on the line "
                   r"about (.*)\?")
SHELVES = ("north", "south", "east")


def inventory(system: str, n: int) -> dict:
    """A shell read of a stock file (a rare file name in its own first line), a JSON order
    lookup and an editor view with line numbers: words shared by every record, ids not."""
    stock = "\n".join(
        [f"report stock_{system}{n}z.txt lists warehouse shelf quantity counted {10 + n}"]
        + [f"warehouse shelf {s} item_code K{n}{k}X{len(system)} quantity {20 + k} status "
           f"stocked" for k, s in enumerate(SHELVES)])
    order = {"order_id": f"W{n}{len(system)}77", "status": "pending",
             "items": [{"item_id": f"P{n}{k}{len(system)}Q", "name": "blue lamp shade",
                        "price": 30 + k} for k in range(2)]}
    view = "\n".join(f"{k:6d}\tconfig entry timeout_seconds value {100 + k} for service"
                     for k in range(1, 4))
    return {"task_id": f"{system}-{n}", "system": system, "steps": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": f"Check the stock of {system} record {n}."},
        {"role": "assistant", "content": "Read it.", "tool_name": "bash",
         "tool_input": f"cat stock_{system}{n}z.txt"},
        {"role": "tool", "tool_name": "bash", "content": stock},
        {"role": "assistant", "content": "Both.", "tool_name": "get_order,view",
         "tool_input": [{"order_id": order["order_id"]}, {"path": "conf/app.ini"}]},
        {"role": "tool", "tool_name": "get_order", "content": json.dumps(order)},
        {"role": "tool", "tool_name": "view", "content": view},
        {"role": "assistant", "content": "Done."}]}


def records() -> list[dict]:
    return [inventory(system, n) for system in ("alpha", "beta", "gamma") for n in range(3)]


def test_units_are_json_records_or_lines_without_display_numbers() -> None:
    data = {"order_id": "W1", "items": [{"item_id": "P1", "price": 3}]}
    assert units(json.dumps(data)) == list(json_records(data, "", 0))
    assert units("     1\tfirst line\n  12→second\n273:            third(x)\n7|fourth\n\n"
                 "total 300") == ["first line", "second", "third(x)", "fourth", "total 300"]


def test_arguments_follow_the_assistant_step_and_parallel_calls_in_order() -> None:
    (job, *_) = jobs_of([inventory("alpha", 0)])
    assert [r.name for r in job.results] == ["bash", "get_order", "view"]
    assert job.results[0].arguments == {"command": "cat stock_alpha0z.txt"}
    assert job.results[1].arguments == {"order_id": "W0577"}
    assert job.results[2].arguments == {"path": "conf/app.ini"}
    assert job.goal == "Check the stock of alpha record 0."
    assert job.results[1].iri.endswith("/result/DA-2-0")
    assert job.results[2].iri.endswith("/result/DA-2-1")
    assert rq.arguments_of("open", "open src/a.py 20") == {"command": "open src/a.py 20"}
    assert rq.arguments_of("think", "plan it") == {"input": "plan it"}


def test_questions_are_deterministic_and_quote_no_rare_token_of_their_line() -> None:
    results = [r for job in jobs_of(records()) for r in job.results]
    asked = questions(results, 12, seed=3)

    assert asked == questions(results, 12, seed=3)
    assert {q.system for q in asked} == {"alpha", "beta", "gamma"}
    assert all(sum(q.system == s for q in asked) <= 4 for s in ("alpha", "beta", "gamma"))
    df = rq.doc_freq(results)
    for q in asked:
        match = ASKED.fullmatch(q.text)
        assert match, q.text
        quoted = " ".join((match.group(1), match.group(3)))
        held = {*rq.words(quoted), *(a.lower() for a in rq.answers(quoted))}
        rare = {t for t in (*rq.words(q.unit), *(a.lower() for a in rq.answers(q.unit)))
                if df[t] < rq.RARE_DF}
        assert not held & rare, q.text
        assert q.answer.lower() not in q.text.lower()
        assert q.unit in next(r.units for r in results if r.iri == q.result)
    # the stock file's name is rare and in its first line: the question names the command only
    firsts = [question for r in results if r.name == "bash"
              if (question := rq.question_of(r, r.units[0], df)) is not None]
    assert firsts and all(q.text.startswith("In the output of bash cat, ")
                          and "stock_" not in q.text for q in firsts)


def test_json_results_are_asked_about_their_records() -> None:
    results = [r for job in jobs_of(records()) for r in job.results]
    df = rq.doc_freq(results)
    order = next(r for r in results if r.name == "get_order")
    asked = [q for u in order.units if (q := rq.question_of(order, u, df)) is not None]
    records_of = list(json_records(json.loads(order.output), "", 0))
    assert list(order.units) == records_of and all(q.unit in records_of for q in asked)
    assert any(q.unit.startswith("items[") for q in asked)


def test_found_needs_the_answer_and_most_words_on_one_line_however_rendered() -> None:
    q = Question("s", "gliding://job/j/result/DA-1-0", "?", "HAT214", "identifier",
                 "flight_number=HAT214, origin=MCO, destination=PHX, price=57")
    fact = "[gliding://job/j/fact/DA-1-0/1] flights[0]: flight_number=hat214, origin=MCO, " \
           "destination=PHX, date=2024-05-19, price=57"
    assert found(q, f"unrelated line\n{fact}")
    assert not found(q, "flight_number=HAT2140, origin=MCO, destination=PHX, price=57")
    assert not found(q, "flight_number HAT214 elsewhere")  # 1 of the 5 words
    assert not found(q, "flight_number=HAT214, origin=MCO\ndestination=PHX, price=57")


def test_a_whole_run_scores_each_system_within_the_budget(tmp_path: Path) -> None:
    path = write(tmp_path, records())

    result = run_research_bench([path], questions=30, seed=1, budget=400, vectors=False)

    assert result["rule"] == rq.RULE and result["seed"] == 1 and result["budget"] == 400
    assert result["vectors"] is False and "vector" not in result["overall"]
    assert set(result["systems"]) == {"alpha", "beta", "gamma"}
    assert result["questions"] == sum(s["n"] for s in result["systems"].values()) > 0
    assert all(1 <= len(s["samples"]) <= 3 for s in result["systems"].values())
    assert result["ingest"]["results"] == 27 and result["ingest"]["failed"] == 0
    assert result["ingest"]["nodes_by_type"]["ToolResult"] == 27
    assert result["ingest"]["nodes_by_type"]["Job"] == 9
    assert all(q["tokens"] <= 400 for q in result["per_question"])
    assert result["context_tokens_max"] <= 400
    overall = result["overall"]
    assert overall["gliding_minus_bm25"] == round(overall["gliding"] - overall["bm25"], 4)
    assert overall["bm25"] > 0.5  # the answer lines are among the baseline's lines


def test_the_cli_takes_several_files_and_writes_json(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    paths = [write(first, records()[:5]), write(second, records()[5:])]

    done = invoke(["bench", "research", *map(str, paths), "--no-vectors", "--questions", "9",
                   "--out", "r.json"], cwd=tmp_path)

    assert done.code == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["inputs"] == [str(p) for p in paths] and result["questions"] > 0
    assert done.out.startswith("research: ") and len(done.out.strip().splitlines()) == 1


def test_the_docstring_states_the_rule_the_results_carry() -> None:
    assert rq.RULE in " ".join((rq.__doc__ or "").split())
