"""The context engine with a real TokenCounter and small windows: a stable prefix, append-only
prompts between compactions, the max_tokens ceiling, tool pairs, keep_recent, routing, recall,
cache breakpoints, and a read-back round trip through a real Archive and the read-back tools."""

from __future__ import annotations

import json
import random
import re
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gliding.config.settings import (
    ContextSettings,
    SummarySettings,
    ToolResultIRISettings,
    ToolSettings,
    WindowSettings,
)
from gliding.context.engine import ContextEngine
from gliding.context.tokens import TokenCounter
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Message, ToolCall
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.tools.base import ToolContext, Toolset
from gliding.tools.readback import MemoryGroup

JOB = "job-ctx"
COUNTER = TokenCounter()
HISTORY_HEADER = "[Earlier turns, summarised."
PREFIX = (
    Message("system", "You are DA, the Do agent. Reach the goal by calling tools."),
    Message("user", "Goal: Create the file a.txt containing x y"),
    Message("assistant", "", (ToolCall("ex1", "write_file", {"path": "a.txt", "content": "x y"}),)),
    Message("tool", "wrote 3 bytes to a.txt", (), "ex1", "write_file"),
    Message("user", "Goal: make tests/test_app.py pass by fixing src/app/handlers.py"),
)
WORDS = ["the", "handler", "returns", "parse_config", "src/app/handlers.py", "value", "retry",
         "cache_key", "tenant", "region", "1234", "test", "passed", "failed", "with", "of"]


def small(**window: object) -> ContextSettings:
    w = {"target_tokens": 600, "max_tokens": 1500, "keep_recent": 2, "whole_below": 0.0,
         **window}
    return ContextSettings(
        tool_result_iri=ToolResultIRISettings(threshold=1024, preview_size=512),
        window=WindowSettings(**w),
        summaries=SummarySettings(budget_tokens=200),
    )


def words(n: int, seed: int) -> str:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        out.append(rnd.choice(WORDS))
        if i % 12 == 11:
            out.append("\n")
    return " ".join(out)


@dataclass
class Session:
    """Drives one engine like the agent loop does: prompt, assistant reply, tool result."""

    engine: ContextEngine
    prompts: list[list[Message]] = field(default_factory=list)
    compactions: list[int] = field(default_factory=list)  # stats.compactions after each prompt
    majors: list[int] = field(default_factory=list)
    added: list[Message] = field(default_factory=list)  # as the engine returned them
    turn: int = 0
    focus: str = "the goal"  # the loop passes the assignment

    def prompt(self) -> list[Message]:
        p = self.engine.prompt(self.focus)
        self.prompts.append(p)
        self.compactions.append(self.engine.stats.compactions)
        self.majors.append(self.engine.stats.major_compactions)
        return p

    def add(self, message: Message, iri: str, tool: str | None = None) -> Message:
        routed = self.engine.add(message, iri=iri, tool=tool)
        self.added.append(routed)
        return routed

    def step(self, reply: str, result: str | None, tool: str = "bash") -> None:
        """One turn: a prompt, then the reply (with a call when ``result`` is given)."""
        self.prompt()
        self.turn += 1
        iri = str(turn_iri(JOB, "DA", self.turn))
        if result is None:
            self.add(Message("assistant", reply), iri)
            return
        call_id = f"c{self.turn}"
        self.add(Message("assistant", reply, (ToolCall(call_id, tool, {"cmd": "x"}),)), iri)
        self.add(Message("tool", result, (), call_id, tool),
                 str(result_iri(JOB, f"DA-{self.turn}-0")), tool)


def session(config: ContextSettings) -> Session:
    return Session(ContextEngine(config, COUNTER, PREFIX))


def live_part(prompt: Sequence[Message]) -> list[Message]:
    rest = list(prompt[len(PREFIX):])
    while rest and rest[0].role == "user" and rest[0].content.startswith(HISTORY_HEADER):
        rest.pop(0)
    return rest


def history_part(prompt: Sequence[Message]) -> list[Message]:
    rest = list(prompt[len(PREFIX):])
    return rest[: len(rest) - len(live_part(prompt))]


def assert_pairs_whole(live: Sequence[Message]) -> None:
    """Every tool result follows the assistant message that made its call."""
    for i, m in enumerate(live):
        if m.role == "tool":
            assert i > 0, "a tool result is the first live message"
            before = live[i - 1]
            assert before.role == "assistant"
            assert m.tool_call_id in {c.id for c in before.tool_calls}


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- hypothesis: random sessions -------------------------------------------------------------

# a step: (reply words, result words or None for a plain reply, tool name)
steps_st = st.lists(
    st.tuples(st.integers(0, 120), st.one_of(st.none(), st.integers(0, 900)),
              st.sampled_from(["bash", "grep", "read_file", "read_result"]),
              st.integers(0, 2**16)),
    min_size=1, max_size=30)


def play(s: Session, steps: list[tuple[int, int | None, str, int]]) -> None:
    for reply, result, tool, seed in steps:
        # read_result outputs are never re-routed: keep them page-sized like the real tool
        size = None if result is None else (min(result, 150) if tool == "read_result" else result)
        s.step(words(reply, seed), None if size is None else words(size, seed + 1), tool)
    s.prompt()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_st, keep_recent=st.integers(1, 4))
def test_random_sessions_keep_prefix_append_only_pairs_and_keep_recent(
    steps: list[tuple[int, int | None, str, int]], keep_recent: int
) -> None:
    s = session(small(keep_recent=keep_recent, max_tokens=2500))

    play(s, steps)
    event(f"compacted: {s.engine.stats.compactions > 0}, "
          f"major: {s.engine.stats.major_compactions > 0}")

    for i, p in enumerate(s.prompts):
        assert p[: len(PREFIX)] == list(PREFIX)  # byte-identical prefix, every prompt
        assert_pairs_whole(live_part(p))
        assert COUNTER.messages(p) <= 2500
        if i == 0:
            continue
        before = s.prompts[i - 1]
        if s.compactions[i] == s.compactions[i - 1]:
            assert p[: len(before)] == before, "between compactions a prompt only grows"
        else:
            assert p[: len(before)] != before
            if s.majors[i] == s.majors[i - 1]:  # minor: earlier history blocks stay as they were
                old = history_part(before)
                assert history_part(p)[: len(old)] == old
    # the newest keep_recent messages are in the last prompt as they were added
    recent = s.added[-keep_recent:]
    assert s.prompts[-1][-len(recent):] == recent


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_st, huge_at=st.integers(0, 29), huge_words=st.integers(2000, 6000),
       huge_role=st.sampled_from(["assistant", "read_result"]))
def test_random_sessions_with_a_huge_message_stay_under_max_tokens(
    steps: list[tuple[int, int | None, str, int]], huge_at: int, huge_words: int, huge_role: str
) -> None:
    config = small(max_tokens=1500)
    s = session(config)
    huge = words(huge_words, 7)
    assert COUNTER.count(huge) > config.window.max_tokens
    at = min(huge_at, len(steps) - 1)

    for k, (reply, result, tool, seed) in enumerate(steps):
        if k == at and huge_role == "assistant":
            s.step(huge, None)
        elif k == at:  # a read_result page is never routed, so it arrives whole
            s.step(words(reply, seed), huge, "read_result")
        else:
            size = None if result is None else (min(result, 150) if tool == "read_result"
                                                else result)
            s.step(words(reply, seed), None if size is None else words(size, seed + 1), tool)
    s.prompt()
    event(f"compacted: {s.engine.stats.compactions > 0}, "
          f"cut: {any('characters cut to fit' in m.content for m in s.prompts[-1])}")

    for p in s.prompts:
        assert p[: len(PREFIX)] == list(PREFIX)
        assert_pairs_whole(live_part(p))
        assert COUNTER.messages(p) <= config.window.max_tokens
    assert s.engine.stats.last_prompt_tokens == COUNTER.messages(s.prompts[-1])


def test_a_long_session_compacts_and_stays_under_the_ceiling() -> None:
    config = small()
    s = session(config)

    for k in range(40):
        s.step(words(40, k), words(300, 100 + k) if k % 3 else words(60, 100 + k))
    s.prompt()

    stats = s.engine.stats
    assert stats.compactions > 1
    assert stats.prompts == len(s.prompts) == 41
    assert max(COUNTER.messages(p) for p in s.prompts) <= config.window.max_tokens
    assert stats.prompt_tokens == sum(COUNTER.messages(p) for p in s.prompts)
    assert stats.prompt_tokens < stats.baseline_tokens / 2  # the point of it all
    assert history_part(s.prompts[-1]), "compacted turns are summarised in a history block"


def test_without_pressure_nothing_compacts_and_the_prompt_is_everything_added() -> None:
    s = session(ContextSettings())

    for k in range(5):
        s.step(words(20, k), words(50, k))
    p = s.prompt()

    assert s.engine.stats.compactions == 0
    assert p == [*PREFIX, *s.added]


def test_compaction_never_leaves_a_tool_result_first_even_with_keep_recent_1() -> None:
    s = session(small(keep_recent=1))

    for k in range(30):  # the newest message is always a tool result when prompt() runs
        s.step(words(10, k), words(200, k))
        live = live_part(s.prompts[-1])
        assert_pairs_whole(live)
    assert s.engine.stats.compactions > 0
    assert all(live_part(p)[0].role != "tool" for p in s.prompts if live_part(p))


@pytest.mark.parametrize("keep_recent", [1, 2, 3, 5])
def test_keep_recent_newest_messages_are_always_verbatim(keep_recent: int) -> None:
    s = session(small(keep_recent=keep_recent))

    for k in range(25):
        s.step(words(60, k), words(250, k))
        added_before = s.added[:-2]  # the prompt just built saw everything up to the last step
        if len(added_before) >= keep_recent:
            assert s.prompts[-1][-keep_recent:] == added_before[-keep_recent:]
    assert s.engine.stats.compactions > 0


def test_the_ceiling_terminates_on_token_dense_text() -> None:
    config = ContextSettings(window=WindowSettings(target_tokens=400, max_tokens=500),
                             summaries=SummarySettings(budget_tokens=100))
    system = Message("system", " ".join(f"rule{i}" for i in range(150)))  # ~310 tokens
    engine = ContextEngine(config, COUNTER, [system, Message("user", "Do the task.")])
    rnd = random.Random(1)
    engine.add(Message("assistant", "".join(chr(rnd.randrange(0x4E00, 0x9FFF))
                                            for _ in range(3000))),
               iri=str(turn_iri(JOB, "DA", 1)))

    with deadline(seconds=1.0):
        prompt = engine.prompt()

    assert COUNTER.messages(prompt) <= 500


def test_a_message_cut_by_the_ceiling_is_not_rewritten_without_a_compaction() -> None:
    s = session(small(max_tokens=1500, keep_recent=2))
    s.step(words(2000, 7), None)  # a reply bigger than max_tokens
    first = s.prompt()
    s.add(Message("assistant", ""), str(turn_iri(JOB, "DA", 2)))

    second = s.prompt()

    assert s.compactions == [0, 0, 0]
    assert second[: len(first)] == first


# --- routing ---------------------------------------------------------------------------------


def test_a_large_tool_result_is_replaced_by_its_summary_and_counted() -> None:
    config = small()
    s = session(config)
    big = "\n".join(f"src/app/mod_{k}.py:{k}: handle(x)" for k in range(200))
    small_result = "ok: 3 files"

    s.step("look", small_result, "grep")
    s.step("search", big, "grep")
    p = s.prompt()

    iri = str(result_iri(JOB, "DA-2-0"))
    routed = s.added[-1]
    assert routed.content.startswith(f"[search result archived as {iri}: ")
    assert len(routed.content.encode()) <= config.tool_result_iri.preview_size
    assert (routed.tool_call_id, routed.name) == ("c2", "grep")
    assert s.added[1].content == small_result
    assert s.engine.stats.archived_results == 1
    assert p[-1] == routed


@pytest.mark.parametrize("how", ["tool-argument", "message-name"])
@pytest.mark.parametrize("tool", ["read_result", "grep_result"])
def test_read_back_outputs_are_never_re_routed(tool: str, how: str) -> None:
    engine = ContextEngine(small(max_tokens=20_000), COUNTER, PREFIX)
    page = words(1500, 3)  # far over the 1 KB threshold
    assert len(page.encode()) > 4 * 1024

    got = engine.add(Message("tool", page, (), "c1", tool if how == "message-name" else None),
                     iri=str(result_iri(JOB, "DA-1-0")),
                     tool=tool if how == "tool-argument" else None)

    assert got.content == page
    assert engine.stats.archived_results == 0
    routed = engine.add(Message("tool", page, (), "c2", "bash"),
                        iri=str(result_iri(JOB, "DA-2-0")), tool="bash")
    assert routed.content != page and engine.stats.archived_results == 1  # the control


# --- recall ----------------------------------------------------------------------------------


@dataclass
class EngineRecall:
    """The session's own memory as the recall tool reads it (``ToolContext.session``)."""

    engine: ContextEngine

    def recall(self, query: str) -> str:
        return "\n".join(f"#{e.turn} {e.summary} <{e.iri}>" for e in self.engine.recall(query))


def test_recall_finds_a_compacted_turn_by_an_identifier() -> None:
    s = session(small())
    s.step("I will open frobnicate_widget_cache in src/cache/store.py", "class Store: ...")
    for k in range(30):
        s.step(words(40, k), words(250, k))
    s.prompt()
    first_iri = str(turn_iri(JOB, "DA", 1))
    assert all(first_iri not in m.content for m in live_part(s.prompts[-1]))  # compacted away

    found = s.engine.recall("frobnicate_widget_cache")

    assert found and found[0].iri == first_iri
    assert s.engine.recall("no_such_identifier_anywhere") == []
    ctx = ToolContext(Path("."), ToolSettings(), session=EngineRecall(s.engine))
    tools = Toolset(MemoryGroup(None).tools)
    out = anyio.run(tools.call, "recall", {"query": "frobnicate_widget_cache"}, ctx)
    assert out.ok and first_iri in out.output


def test_recall_finds_a_compacted_tool_result_by_an_identifier_its_summary_showed() -> None:
    s = session(small())
    matches = [f"src/app/mod_{k}.py:{k}: handle(x)" for k in range(100)]
    matches.insert(5, "src/zebra/quantum_index.py:12: found")
    s.step("search for the index", "\n".join(matches), "grep")
    assert "src/zebra/quantum_index.py" in s.added[-1].content  # the model saw it
    for k in range(30):
        s.step(words(40, k), words(250, k))
    s.prompt()

    found = s.engine.recall("src/zebra/quantum_index.py")

    assert str(result_iri(JOB, "DA-1-0")) in [e.iri for e in found]


def own_words(n: int, seed: int) -> str:
    """``n`` words that no other seed uses."""
    return "\n".join(" ".join(f"s{seed}w{j}" for j in range(i, min(n, i + 12)))
                     for i in range(0, n, 12))


def relevant_turn_survives(result_words: int) -> bool:
    """A session whose first turn is the one the focus names, with beta = 1."""
    config = ContextSettings(
        tool_result_iri=ToolResultIRISettings(threshold=1024, preview_size=512),
        window=WindowSettings(target_tokens=600, max_tokens=1500),
        summaries=SummarySettings(budget_tokens=150, beta=1.0))
    s = session(config)
    s.focus = "zebra_quantum_index"
    s.step("open zebra_quantum_index", own_words(20, 1000))
    for k in range(30):
        s.step(own_words(30, k), own_words(result_words, 100 + k))
    p = s.prompt()
    assert s.engine.stats.major_compactions > 0
    return "#1 assistant:" in history_part(p)[0].content


def test_with_beta_1_the_turn_the_focus_names_outlives_archived_result_boilerplate() -> None:
    assert relevant_turn_survives(result_words=60)  # results stay verbatim: the control

    assert relevant_turn_survives(result_words=300)  # results are archived


def test_recall_finds_turns_evicted_from_the_history_block() -> None:
    config = ContextSettings(window=WindowSettings(target_tokens=600, max_tokens=1500),
                             summaries=SummarySettings(budget_tokens=60))
    s = session(config)
    s.step("open zebra_quantum_index now", "done")
    for k in range(40):
        s.step(words(40, k), words(250, k))
    s.prompt()
    assert s.engine.stats.major_compactions > 0
    assert str(turn_iri(JOB, "DA", 1)) in s.engine.chain.weak
    assert "older turns dropped" in history_part(s.prompts[-1])[0].content

    assert [e.turn for e in s.engine.recall("zebra_quantum_index")][:1] == [1]


# --- cache breakpoints ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_breakpoints_are_at_most_cache_breakpoints(n: int) -> None:
    config = small()
    s = session(ContextSettings(cache_breakpoints=n, tool_result_iri=config.tool_result_iri,
                                window=config.window, summaries=config.summaries))
    seen_with_history = False
    for k in range(25):
        s.step(words(40, k), words(250, k))
        p = s.prompts[-1]
        marks = s.engine.breakpoints(p)
        assert len(marks) <= n
        assert marks == sorted(set(marks))
        assert all(0 <= i < len(p) for i in marks)
        if n == 0:
            assert marks == []
        else:
            assert marks[-1] == len(p) - 1  # the newest message is always the last mark
        history = history_part(p)
        if history and n >= 3:
            seen_with_history = True
            # newest, history end, system prompt; then (no tool list here) the prefix end
            expected = [0, len(PREFIX) + len(history) - 1, len(p) - 1]
            assert marks == (expected if n == 3 else sorted([*expected, len(PREFIX) - 1]))
            with_tools = s.engine.cache_marks(p, tools=True)  # the tool list comes fourth
            assert (with_tools.tools, list(with_tools.messages)) == (n == 4, expected)
    assert n < 3 or seen_with_history


# --- read-back round trip through a real archive ---------------------------------------------


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    with Archive.open(tmp_path, JOB) as archive:
        yield archive


def big_output() -> str:
    """~50 KB of shell output with non-ASCII text, CRLF and a needle line."""
    lines = [f"line {n:05d}: value={n * 7} ünïcödé ✓ tenant_{n % 13}" for n in range(1, 1200)]
    lines[776] = "line 00777: NEEDLE_marker_for_grep found here"
    return "exit code 0\n" + "\r\n".join(lines[:600]) + "\n" + "\n".join(lines[600:]) + "\n"


def readback(archive: Archive) -> tuple[Toolset, ToolContext]:
    """The memory group's tools over ``archive`` (as a job wires them) and a context."""
    port = LocalArchive(archive, archive.path.parents[2])  # <data_dir>/jobs/<job>/archive
    group = MemoryGroup(port, iri_base=f"gliding://job/{JOB}/")
    return Toolset(group.tools), ToolContext(Path("."), ToolSettings())


def test_read_result_pages_concatenate_to_the_archived_bytes(archive: Archive) -> None:
    output = big_output()
    assert len(output.encode()) > 50_000
    iri = str(result_iri(JOB, "DA-4-0"))
    archive.put(iri, output, kind="result")
    engine = ContextEngine(small(), COUNTER, PREFIX)
    routed = engine.add(Message("tool", output, (), "c4", "bash"), iri=iri, tool="bash")
    shown = re.search(r"archived as (\S+):", routed.content)
    assert shown and shown[1] == iri  # the model learns the IRI from the summary
    tools, ctx = readback(archive)

    pages, offset = [], 0
    while True:
        out = anyio.run(tools.call, "read_result", {"iri": shown[1], "offset": offset}, ctx)
        assert out.ok, out.output
        more = re.search(r"\n\[characters (\d+)-(\d+) of (\d+); next: offset=(\d+)\]$",
                         out.output)
        if more is None:
            pages.append(out.output)
            break
        pages.append(out.output[: more.start()])
        assert int(more[1]) == offset and int(more[3]) == len(output)
        offset = int(more[4])
    assert len(pages) > 5
    assert "".join(pages).encode() == archive.get(iri).content == output.encode()

    hit = anyio.run(tools.call, "grep_result", {"iri": iri, "pattern": r"NEEDLE_\w+"}, ctx)
    assert hit.ok and hit.output == "778: line 00777: NEEDLE_marker_for_grep found here"


@pytest.mark.parametrize("written", ["result/DA-4-0", "<result/DA-4-0>", "/result/DA-4-0",
                                     f"gliding://job/{JOB}/result/DA-4-0"])
def test_relative_iris_resolve_through_iri_base(archive: Archive, written: str) -> None:
    archive.put(result_iri(JOB, "DA-4-0"), "alpha\nbeta\ngamma\n", kind="result")
    tools, ctx = readback(archive)

    page = anyio.run(tools.call, "read_result", {"iri": written, "offset": 6, "limit": 4}, ctx)
    hit = anyio.run(tools.call, "grep_result", {"iri": written, "pattern": "^gam"}, ctx)

    assert page.ok and page.output.startswith("beta\n[characters 6-10 of 17; next: offset=10]")
    assert hit.ok and hit.output == "3: gamma"


def test_history_block_iris_read_back_through_the_tools(archive: Archive) -> None:
    s = session(small())
    for k in range(30):
        out = words(300, k)
        archive.put(result_iri(JOB, f"DA-{k + 1}-0"), out, kind="result")
        s.step(words(30, k), out)
    block = history_part(s.prompt())[0].content
    relative = re.findall(r"<(result/DA-\d+-0)>", block)
    assert relative

    tools, ctx = readback(archive)
    page = anyio.run(tools.call, "read_result", {"iri": relative[0], "limit": 100_000}, ctx)

    n = int(relative[0].split("-")[1])
    assert page.ok and page.output == words(300, n - 1)


def test_reading_a_missing_iri_is_a_tool_error_the_model_can_read(archive: Archive) -> None:
    tools, ctx = readback(archive)
    out = anyio.run(tools.call, "read_result", {"iri": "result/nope"}, ctx)

    assert not out.ok
    assert out.output.startswith("error: ") and "result/nope" in out.output


def test_a_call_with_arguments_past_the_cap_enters_the_prompt_as_a_stub() -> None:
    """The engine's backstop (the loop refuses and archives such a call first): a call whose
    arguments pass ``argument_cap`` is kept as a stub naming the message's IRI; calls under
    the cap, and the prompts after, are untouched and small."""
    from gliding.context.engine import MAX_ARGUMENT_BYTES, argument_cap

    settings = small()
    engine = ContextEngine(settings, COUNTER, list(PREFIX))
    cap = engine.argument_cap
    assert cap == argument_cap(settings) == 16 << 10  # the floor: a 1500-token window
    assert argument_cap(ContextSettings(window=WindowSettings(max_tokens=10_000_000))) == \
        MAX_ARGUMENT_BYTES
    iri = str(turn_iri(JOB, "DA", 1))
    small_call = ToolCall("c0", "write_file", {"path": "a.txt", "content": "y" * 100})
    huge_call = ToolCall("c1", "write_file", {"path": "b.txt", "content": "x" * (cap + 1)})
    engine.add(Message("assistant", "", (small_call, huge_call)), iri=iri)
    kept = engine.prompt()[-1].tool_calls
    assert kept[0] == small_call
    assert kept[1].id == "c1" and kept[1].name == "write_file"
    assert kept[1].arguments["arguments_archived"] == iri
    assert kept[1].arguments["bytes"] == len(huge_call.arguments_json())
    assert engine.stats.last_prompt_tokens < settings.window.max_tokens


def test_a_routed_result_keeps_the_records_the_latest_call_asked_about() -> None:
    """The focus is the engine's own (task, latest user and assistant turns): the same in a
    replay and in a live job. A call that names an order brings that order's record into the
    preview of a result far larger than the preview."""
    engine = ContextEngine(small(whole_below=0.0), COUNTER, PREFIX)
    call = ToolCall("c1", "get_orders", {"user_id": "mia_li_3668", "order_id": "#W0000150"})
    rows = [{"order_id": f"#W{n:07d}", "user_id": f"user_{n}", "total": 5000 + n}
            for n in range(300)]
    engine.add(Message("assistant", "Looking up that order.", (call,)),
               iri=str(turn_iri(JOB, "DA", 1)))
    shown = engine.add(Message("tool", json.dumps(rows), (), "c1", "get_orders"),
                       iri=str(result_iri(JOB, "r1")), tool="get_orders")

    assert shown.content.startswith("[json result archived as")
    assert "order_id=#W0000150, user_id=user_150, total=5150" in shown.content
    assert "mia_li_3668" in engine.focus() and "make tests/test_app.py pass" in engine.focus()


def test_the_schemas_tool_search_loaded_stay_whole_in_every_prompt_after_compactions() -> None:
    """Tools loaded on demand stay callable: the load answer leaves the live messages at a
    compaction but not the prompt (it is never routed, cut or summarised)."""
    engine = ContextEngine(small(), COUNTER, PREFIX)
    schema = json.dumps({"description": "Read a text file.", "name": "filesystem__read_file",
                         "parameters": {"type": "object", "properties": {"path": {}}}})
    answer = f"loaded mcp_fs: filesystem__read_file\nCall them with call_tool(name, arguments). " \
             f"Their schemas:\n{schema}"
    engine.add(Message("assistant", "", (ToolCall("t", "tool_search", {"group": "mcp_fs"}),)),
               iri=str(turn_iri(JOB, "DA", 1)))
    engine.add(Message("tool", answer, (), "t", "tool_search"), iri=str(result_iri(JOB, "t1")),
               tool="tool_search")
    prompts = []
    for n in range(2, 30):
        engine.add(Message("assistant", words(60, n), (ToolCall(f"c{n}", "bash", {"n": n}),)),
                   iri=str(turn_iri(JOB, "DA", n)))
        engine.add(Message("tool", words(200, 100 + n), (), f"c{n}", "bash"),
                   iri=str(result_iri(JOB, f"r{n}")), tool="bash")
        prompts.append(engine.prompt())

    assert engine.stats.compactions >= 3 and engine.stats.major_compactions >= 1
    assert all(answer in "\n".join(m.content for m in p) for p in prompts)
    assert not any(x.tool == "tool_search" for x in engine.live)  # it left the live messages
