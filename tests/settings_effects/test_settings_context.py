"""context.*: each key, set through GLIDING_* variables, changes what the context engine builds;
the default is the control.

Keys the runner reads itself (tokenizer, cache_breakpoints, tool_result_iri.*) are shown through
scripted jobs; the window and summary keys through a ContextEngine built from the loaded
settings the way the agent loop builds it, driven by a fixed session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gliding.config.settings import Settings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import MESSAGE_OVERHEAD, TokenCounter
from gliding.core.messages import Message, ToolCall
from gliding.llm.port import LLMRequest
from gliding.testing import call
from tests.settings_effects.effects_support import Job, run_scripted, settings_from, write_task

DEFAULTS = Settings().context
HISTORY_HEADER = "[Earlier turns, summarised."
PREFIX = (
    Message("system", "You are DA, the Do agent. Reach the goal by calling tools."),
    Message("user", "Goal: make tests/test_app.py pass by fixing src/app/handlers.py"),
)
WORDS = ["the", "handler", "returns", "parse_config", "src/app/handlers.py", "value", "retry",
         "cache_key", "tenant", "region", "1234", "test", "passed", "failed", "with", "of"]


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


def text(n: int, seed: int) -> str:
    """``n`` words, deterministic in ``seed``, twelve to a line."""
    out = [WORDS[(seed * 7 + i * (seed % 5 + 3)) % len(WORDS)] for i in range(n)]
    return "\n".join(" ".join(out[i:i + 12]) for i in range(0, n, 12))


# --- engine sessions ---------------------------------------------------------------------------


@dataclass
class Run:
    engine: ContextEngine
    counter: TokenCounter
    prompts: list[list[Message]] = field(default_factory=list)
    compactions: list[int] = field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        return [self.counter.messages(p) for p in self.prompts]

    def first_compaction(self) -> int:
        """Index of the first prompt built after a compaction."""
        return next(i for i, n in enumerate(self.compactions) if n > 0)

    def live(self, i: int = -1) -> list[Message]:
        rest = self.prompts[i][len(PREFIX):]
        while rest and rest[0].content.startswith(HISTORY_HEADER):
            rest = rest[1:]
        return list(rest)

    def history(self, i: int = -1) -> list[Message]:
        rest = self.prompts[i][len(PREFIX):]
        return list(rest[: len(rest) - len(self.live(i))])


# the engine saves from the first message (a test of routing or compaction, not of whole_below)
SAVE = {"GLIDING_CONTEXT__WINDOW__WHOLE_BELOW": "0"}


def engine_for(settings: Settings) -> tuple[ContextEngine, TokenCounter]:
    """The engine the agent loop builds from ``settings`` (the runner makes the counter)."""
    counter = TokenCounter(settings.context.tokenizer)
    return ContextEngine(settings.context, counter, PREFIX), counter


def own_words(n: int, seed: int) -> str:
    """``n`` words no other seed uses: turns that share no terms with each other."""
    return "\n".join(" ".join(f"s{seed}w{j}" for j in range(i, min(n, i + 12)))
                     for i in range(0, n, 12))


def play(settings: Settings, turns: int, *, reply: int = 40, result: int = 250,
         first_reply: str | None = None, focus: str = "the goal",
         filler: Callable[[int, int], str] = text) -> Run:
    """``turns`` turns of prompt → assistant call → tool result, then one last prompt."""
    engine, counter = engine_for(settings)
    run = Run(engine, counter)
    for k in range(turns):
        run.prompts.append(engine.prompt(focus))
        run.compactions.append(engine.stats.compactions)
        content = first_reply if (k == 0 and first_reply) else filler(reply, k)
        engine.add(Message("assistant", content, (ToolCall(f"c{k}", "bash", {"n": k}),)),
                   iri=f"gliding://job/j/turn/DA/{k + 1}")
        engine.add(Message("tool", filler(result, 100 + k), (), f"c{k}", "bash"),
                   iri=f"gliding://job/j/result/DA-{k + 1}-0", tool="bash")
    run.prompts.append(engine.prompt(focus))
    run.compactions.append(engine.stats.compactions)
    return run


# --- scripted jobs -----------------------------------------------------------------------------


def da_job(tmp: Path, settings: Settings, *replies: Message | Callable[[LLMRequest], Message],
           files: Mapping[str, str] = {}) -> Job:  # noqa: B006 - read only
    for name, content in files.items():
        (tmp / "workspace" / name).write_text(content, encoding="utf-8")
    task = write_task(tmp, "goal: Look around the workspace\npipeline: [DA]\n")
    job = run_scripted(task, settings, {"DA": [*replies, call("finish", summary="looked")]})
    assert job.handle.report.outcome == "success", job.handle.report
    return job


BIG_FILE = "".join(f"row {n:03d}: the handler returns parse_config value {n * 7}\n"
                   for n in range(1, 61))  # ~3.3 KB: over the default threshold, under 8 KB


def tool_message_seen(job: Job, request: int) -> Message:
    """The newest message of the ``request``-th model call (a tool result)."""
    message = job.llm.requests[request].messages[-1]
    assert message.role == "tool"
    return message


# --- context.tokenizer -------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["o200k_base", "no_such_encoding"])
def test_tokenizer_is_the_encoding_the_job_counts_prompt_tokens_with(
    tmp: Path, encoding: str
) -> None:
    assert DEFAULTS.tokenizer == "cl100k_base"
    control = settings_from(tmp / "a", {})
    changed = settings_from(tmp / "b", {"GLIDING_CONTEXT__TOKENIZER": encoding})
    files = {"notes.txt": "déjà vu — 東京 naïve café\n" * 40}

    default_tokens = da_job(tmp, control, call("read_file", path="notes.txt"),
                            files=files).handle.report.context_tokens["DA"]
    changed_tokens = da_job(tmp, changed, call("read_file", path="notes.txt"),
                            files=files).handle.report.context_tokens["DA"]

    assert changed.context.tokenizer == encoding
    assert changed_tokens[0] != default_tokens[0]
    assert changed_tokens[1] != default_tokens[1]


def test_tokenizer_unknown_falls_back_to_4_characters_a_token(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_CONTEXT__TOKENIZER": "no_such_encoding"})
    default_counter = engine_for(settings_from(tmp, {}))[1]

    engine, counter = engine_for(settings)
    prompt = engine.prompt()

    assert default_counter.exact and not counter.exact
    assert counter.count("abcdefghi") == 3 != default_counter.count("abcdefghi")
    assert engine.stats.last_prompt_tokens == sum((len(m.content) + 3) // 4 + MESSAGE_OVERHEAD
                                                  for m in prompt)


# --- context.cache_breakpoints -----------------------------------------------------------------


@pytest.mark.parametrize(("value", "marks"), [(None, 4), ("2", 2), ("1", 1), ("0", 0)],
                         ids=["default", "2", "1", "0"])
def test_cache_breakpoints_is_how_many_marks_each_model_call_gets(
    tmp: Path, value: str | None, marks: int
) -> None:
    env = {} if value is None else {"GLIDING_CONTEXT__CACHE_BREAKPOINTS": value}
    job = da_job(tmp, settings_from(tmp, env), call("read_file", path="notes.txt"),
                 files={"notes.txt": "hello\n"})

    first, second = job.llm.requests[:2]
    prefix_end = len(first.messages) - 1  # the first call's prompt is the stable prefix
    newest = len(second.messages) - 1
    got = second.meta["cache_breakpoints"]
    assert len(got) + second.meta["cache_tools"] == marks
    # kept in this order: newest message, prefix end, system prompt, tool list
    expected = {4: ([0, prefix_end, newest], True), 2: ([prefix_end, newest], False),
                1: ([newest], False), 0: ([], False)}[marks]
    assert (got, second.meta["cache_tools"]) == expected
    if value is None:
        assert DEFAULTS.cache_breakpoints == 4
    # the first call's newest message is the prefix end: the next mark in line takes its place
    assert first.meta["cache_breakpoints"] == {4: [0, prefix_end], 2: [0, prefix_end],
                                               1: [prefix_end], 0: []}[marks]


# --- context.tool_result_iri.threshold ---------------------------------------------------------


@pytest.mark.parametrize("value", [None, "8192"], ids=["default", "8192"])
def test_threshold_decides_whether_the_model_sees_the_result_or_its_summary(
    tmp: Path, value: str | None
) -> None:
    env = {**SAVE, **({} if value is None else
                      {"GLIDING_CONTEXT__TOOL_RESULT_IRI__THRESHOLD": value})}
    job = da_job(tmp, settings_from(tmp, env), call("read_file", path="big.txt"),
                 files={"big.txt": BIG_FILE})

    (archived,) = job.results()
    seen = tool_message_seen(job, 1).content
    size = len(archived.encode())
    assert DEFAULTS.tool_result_iri.threshold < size < 8192
    if value is None:
        iri = f"gliding://job/{job.handle.report.job}/result/DA-1-0"
        assert seen.startswith(f"[file result archived as {iri}: {size} bytes")
        assert len(seen.encode()) <= DEFAULTS.tool_result_iri.preview_size
    else:
        assert seen == archived


def test_threshold_archived_result_reads_back_byte_exact_in_the_same_job(tmp: Path) -> None:
    settings = settings_from(tmp, {**SAVE, "GLIDING_CONTEXT__TOOL_RESULT_IRI__THRESHOLD": "256"})

    def read_back(request: LLMRequest) -> Message:
        iri = re.search(r"archived as gliding://job/[^/]+/(\S+):", request.messages[-1].content)
        assert iri, request.messages[-1].content
        return call("read_result", iri=iri[1], limit=100_000)  # relative: iri_base resolves it

    job = da_job(tmp, settings, call("read_file", path="big.txt"), read_back,
                 files={"big.txt": BIG_FILE})

    read, page = job.results()
    assert len(read.encode()) > 256
    assert tool_message_seen(job, 2).content == page == read  # read-back is never re-routed


# --- context.tool_result_iri.preview_size ------------------------------------------------------


@pytest.mark.parametrize("value", [None, "300"], ids=["default", "300"])
def test_preview_size_bounds_the_summary_the_model_sees(tmp: Path, value: str | None) -> None:
    env = {**SAVE, **({} if value is None else
                      {"GLIDING_CONTEXT__TOOL_RESULT_IRI__PREVIEW_SIZE": value})}
    job = da_job(tmp, settings_from(tmp, env), call("read_file", path="big.txt"),
                 files={"big.txt": BIG_FILE})

    seen = tool_message_seen(job, 1).content.encode()
    assert b"result archived as gliding://job/" in seen
    if value is None:
        assert 300 < len(seen) <= DEFAULTS.tool_result_iri.preview_size
    else:
        assert len(seen) <= 300


# --- context.window.target_tokens --------------------------------------------------------------


def test_target_tokens_smaller_compacts_sooner_and_keeps_prompts_smaller(tmp: Path) -> None:
    default = play(settings_from(tmp, {}), 30)
    small = play(settings_from(tmp, {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "1000"}), 30)

    assert small.engine.stats.compactions > default.engine.stats.compactions
    assert small.first_compaction() < default.first_compaction()
    assert max(small.sizes) < max(default.sizes)
    assert max(small.sizes[small.first_compaction():]) < 1000 + 600  # about target, not 4000


# --- context.window.high_water -----------------------------------------------------------------

# Turns of ~150 tokens (reply=20, result=100 words), small against target_tokens: where a
# compaction starts and stops then shows the water marks rather than the size of one turn (with
# ~450-token turns both settings compact between the same two turns).


def test_high_water_higher_lets_the_prompt_grow_further_before_compacting(tmp: Path) -> None:
    default = play(settings_from(tmp, {}), 30, reply=20, result=100)
    high = play(settings_from(tmp, {"GLIDING_CONTEXT__WINDOW__HIGH_WATER": "0.95"}), 30,
                reply=20, result=100)

    target = DEFAULTS.window.target_tokens
    peak = default.sizes[default.first_compaction() - 1]
    high_peak = high.sizes[high.first_compaction() - 1]
    assert high.first_compaction() > default.first_compaction()
    assert peak <= DEFAULTS.window.high_water * target < high_peak <= 0.95 * target


# --- context.window.low_water ------------------------------------------------------------------


def test_low_water_lower_compacts_further_down(tmp: Path) -> None:
    default = play(settings_from(tmp, {}), 30, reply=20, result=100)
    low = play(settings_from(tmp, {"GLIDING_CONTEXT__WINDOW__LOW_WATER": "0.2"}), 30,
               reply=20, result=100)

    target = DEFAULTS.window.target_tokens
    after = default.sizes[default.first_compaction()]
    low_after = low.sizes[low.first_compaction()]
    assert low_after < after
    assert low_after <= 0.2 * target + 300 < DEFAULTS.window.low_water * target
    assert after <= DEFAULTS.window.low_water * target + 300


# --- context.window.max_tokens -----------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "3000"], ids=["default", "3000"])
def test_max_tokens_is_the_ceiling_a_huge_reply_is_cut_to(tmp: Path, value: str | None) -> None:
    env = {} if value is None else {"GLIDING_CONTEXT__WINDOW__MAX_TOKENS": value}
    huge = text(9000, 3)

    run = play(settings_from(tmp, env), 1, first_reply=huge)

    last = run.prompts[-1]
    if value is None:
        assert huge in [m.content for m in last]
        assert 9000 < run.sizes[-1] <= DEFAULTS.window.max_tokens
    else:
        assert huge not in [m.content for m in last]
        assert any("characters cut to fit the prompt; read_result(gliding://job/j/turn/DA/1)"
                   in m.content for m in last)
        assert run.sizes[-1] <= 3000


# --- context.window.max_messages ---------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "8"], ids=["default", "8"])
def test_max_messages_bounds_the_live_messages(tmp: Path, value: str | None) -> None:
    env = {**SAVE, **({} if value is None else {"GLIDING_CONTEXT__WINDOW__MAX_MESSAGES": value})}

    run = play(settings_from(tmp, env), 25, reply=3, result=3)

    most = max(len(run.live(i)) for i in range(len(run.prompts)))
    if value is None:
        assert run.engine.stats.compactions == 0
        assert most == 50 <= DEFAULTS.window.max_messages
    else:
        assert run.engine.stats.compactions > 0
        assert most <= 8


# --- context.window.keep_recent ----------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "6"], ids=["default", "6"])
def test_keep_recent_is_how_many_messages_a_compaction_leaves(
    tmp: Path, value: str | None
) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}  # compaction must cut deep
    if value is not None:
        env["GLIDING_CONTEXT__WINDOW__KEEP_RECENT"] = value
    keep = DEFAULTS.window.keep_recent if value is None else 6

    run = play(settings_from(tmp, env), 20)

    after = [len(run.live(i)) for i in range(1, len(run.prompts))
             if run.compactions[i] > run.compactions[i - 1]]
    assert after, "the session compacted"
    assert min(after) == keep


# --- context.window.whole_below ----------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "0.5", "0"], ids=["default", "0.5", "0"])
def test_whole_below_keeps_a_small_session_whole_and_saves_once_it_grows(
    tmp: Path, value: str | None
) -> None:
    env = {} if value is None else {"GLIDING_CONTEXT__WINDOW__WHOLE_BELOW": value}
    settings = settings_from(tmp, env)
    limit = settings.context.window.whole_below * settings.context.window.max_tokens

    run = play(settings, 40, result=700)  # results over the 2 KB threshold

    routed = [i for i, p in enumerate(run.prompts)
              if any("result archived as" in m.content for m in p)]
    if value == "0":  # the engine saves from the first result on
        assert routed[0] <= 1 and run.engine.stats.compactions > 0
        return
    first = routed[0]  # the first prompt with a result routed
    assert first >= (5 if value else 2) and run.engine.stats.baseline_tokens > limit
    # before it, every prompt was the append-only prompt: whole results, nothing compacted,
    # each holding the one before it
    assert all(run.compactions[i] == 0 for i in range(first))
    assert run.counter.messages(run.prompts[first - 1]) <= limit
    assert all(run.prompts[i][:len(run.prompts[i - 1])] == run.prompts[i - 1]
               for i in range(1, first))
    assert run.engine.stats.compactions > 0  # and it saves once it grew past the limit


# --- context.summaries.budget_tokens -----------------------------------------------------------


def test_budget_tokens_bounds_the_history_block(tmp: Path) -> None:
    env = {**SAVE, "GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}
    default = play(settings_from(tmp, env), 40)
    tight = play(settings_from(tmp, {**env, "GLIDING_CONTEXT__SUMMARIES__BUDGET_TOKENS": "100"}),
                 40)

    def history_tokens(run: Run) -> int:
        return run.counter.messages(run.history())

    assert history_tokens(tight) < history_tokens(default)
    assert tight.engine.chain.tokens <= 100 < default.engine.chain.tokens
    assert tight.engine.stats.major_compactions > default.engine.stats.major_compactions
    assert len(tight.engine.chain.weak) > len(default.engine.chain.weak)
    assert "older turns dropped" in tight.history()[0].content


# --- context.summaries.beta / w_recency / w_cost -----------------------------------------------

FOCUS = "parse_config config/loader.py"


def evicted_by(settings: Settings) -> list[str]:
    """The engine's own L1 chain, over budget by one token: which entry goes first."""
    chain = engine_for(settings)[0].chain
    chain.add(1, "tool read_file", "config/loader.py parse_config reads yaml",
              "gliding://job/j/result/DA-1-0")  # relevant to FOCUS, oldest, mid-cost
    chain.add(2, "assistant", "ran the tests", "gliding://job/j/turn/DA/2")  # cheap, old
    chain.add(3, "tool bash", "exit code 1 tests/test_app.py::test_handler_returns_value FAILED "
              "assert 1 == 2 in src/app/handlers.py line 42",
              "gliding://job/j/result/DA-3-0")  # the most expensive
    chain.add(4, "assistant", "edit the handler", "gliding://job/j/turn/DA/4")  # newest
    chain.budget_tokens = chain.tokens - 1
    return [e.iri.rsplit("/", 1)[1] for e in chain.evict(FOCUS)]


def test_beta_0_forgets_the_relevant_old_turn_the_default_keeps(tmp: Path) -> None:
    assert evicted_by(settings_from(tmp, {})) == ["2"]
    assert evicted_by(settings_from(tmp, {"GLIDING_CONTEXT__SUMMARIES__BETA": "0"})) == \
        ["DA-1-0"]


def test_beta_in_a_session_keeps_the_turn_the_focus_is_about(tmp: Path) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600",
           "GLIDING_CONTEXT__SUMMARIES__BUDGET_TOKENS": "120"}
    first = "open zebra_quantum_index"

    def kept_first(beta: str | None) -> bool:
        extra = {} if beta is None else {"GLIDING_CONTEXT__SUMMARIES__BETA": beta}
        run = play(settings_from(tmp, {**env, **extra}), 30, result=100, first_reply=first,
                   focus="zebra_quantum_index", filler=own_words)
        assert run.engine.stats.major_compactions > 0
        return "#1 assistant:" in run.history()[0].content

    assert kept_first("1")
    assert not kept_first("0")


def test_w_recency_high_makes_age_outweigh_relevance(tmp: Path) -> None:
    assert evicted_by(settings_from(tmp, {})) == ["2"]
    assert evicted_by(settings_from(tmp, {"GLIDING_CONTEXT__SUMMARIES__W_RECENCY": "5"})) == \
        ["DA-1-0"]
    assert evicted_by(settings_from(tmp, {"GLIDING_CONTEXT__SUMMARIES__W_RECENCY": "0"})) == \
        ["DA-3-0"]


def test_w_cost_high_makes_the_most_expensive_turn_go_first(tmp: Path) -> None:
    assert evicted_by(settings_from(tmp, {})) == ["2"]
    assert evicted_by(settings_from(tmp, {"GLIDING_CONTEXT__SUMMARIES__W_COST": "5"})) == \
        ["DA-3-0"]


# --- context.summaries.line_chars --------------------------------------------------------------

L1_LINE = re.compile(r"^#\d+ [^:]+: (.*) <[^>]+>$")


def l1_lines(run: Run) -> list[str]:
    """Every L1 line (the summary between "#turn role: " and its IRI) any prompt showed."""
    out = []
    for i in range(len(run.prompts)):
        for m in run.history(i):
            out += [hit[1] for line in m.content.splitlines() if (hit := L1_LINE.match(line))]
    return out


@pytest.mark.parametrize("value", [None, "130"], ids=["default", "130"])
def test_line_chars_bounds_every_l1_line(tmp: Path, value: str | None) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}
    if value is not None:
        env["GLIDING_CONTEXT__SUMMARIES__LINE_CHARS"] = value
    width = DEFAULTS.summaries.line_chars if value is None else 130

    lines = l1_lines(play(settings_from(tmp, env), 20))

    assert len(lines) > 10
    assert max(len(x) for x in lines) <= width
    assert max(len(x) for x in lines) > 120  # the bound binds: turns say more than fits
    if value is None:
        assert width == 160 and max(len(x) for x in lines) > 130


def test_line_chars_below_110_still_bounds_every_l1_line(tmp: Path) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600",
           "GLIDING_CONTEXT__SUMMARIES__LINE_CHARS": "60"}

    lines = l1_lines(play(settings_from(tmp, env), 20))

    assert lines and max(len(x) for x in lines) <= 60


# --- context.summaries.facts_budget_tokens -----------------------------------------------------

FACT_LINE = "src/app/loader.py:42: def parse_config(path_name) -> zebra_cfg.Settings"
FACTS_HEADER = "[Facts this job has used"


def turn(engine: ContextEngine, k: int, reply: str, result: str) -> None:
    engine.add(Message("assistant", reply, (ToolCall(f"c{k}", "bash", {"n": k}),)),
               iri=f"gliding://job/j/turn/DA/{k}")
    engine.add(Message("tool", result, (), f"c{k}", "bash"),
               iri=f"gliding://job/j/result/DA-{k}-0", tool="bash")


def used_fact_session(settings: Settings) -> Run:
    """The first result shows a definition, the next reply uses it, then 40 turns of words no
    one uses again push both out of the prompt and their L1 lines out of the history block."""
    engine, counter = engine_for(settings)
    run = Run(engine, counter)
    replies = ["open the loader", "parse_config returns zebra_cfg.Settings; call it"]
    replies += [own_words(40, k) for k in range(40)]
    results = [f"{FACT_LINE}\n    return zebra_cfg.load(path_name)", "ok"]
    results += [own_words(250, 100 + k) for k in range(40)]
    for k, (reply, result) in enumerate(zip(replies, results, strict=True), 1):
        run.prompts.append(engine.prompt("the goal"))
        run.compactions.append(engine.stats.compactions)
        turn(engine, k, reply, result)
    run.prompts.append(engine.prompt("the goal"))
    run.compactions.append(engine.stats.compactions)
    return run


@pytest.mark.parametrize("value", [None, "0"], ids=["default", "0"])
def test_facts_budget_tokens_keeps_a_used_fact_in_the_prompt_or_not(
    tmp: Path, value: str | None
) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}
    if value is not None:
        env["GLIDING_CONTEXT__SUMMARIES__FACTS_BUDGET_TOKENS"] = value

    run = used_fact_session(settings_from(tmp, env))

    last = "\n".join(m.content for m in run.prompts[-1])
    assert "gliding://job/j/result/DA-1-0" in run.engine.chain.weak  # its L1 line is gone
    assert "<result/DA-1-0>" not in "\n".join(m.content for m in run.live())
    if value is None:
        assert f"{FACTS_HEADER}, each with a line" in last
        assert f"<result/DA-1-0> 1: {FACT_LINE}" in last.splitlines()
        assert 0 < run.engine.facts.tokens <= DEFAULTS.summaries.facts_budget_tokens
    else:
        assert "zebra_cfg.Settings" not in last
        assert all(FACTS_HEADER not in m.content for p in run.prompts for m in p)
        assert run.engine.facts.lines == []


# --- context.prefetch.* ------------------------------------------------------------------------

WORKING_SET_HEADER = "[Working set:"
PREFETCH_ON = {"GLIDING_CONTEXT__PREFETCH__ENABLED": "true",
               "GLIDING_CONTEXT__PREFETCH__BUDGET_TOKENS": "400",
               "GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}


@dataclass
class Warmed:
    prompt: list[Message]
    engine: ContextEngine
    counter: TokenCounter

    @property
    def block(self) -> Message | None:
        blocks = [m for m in self.prompt if m.content.startswith(WORKING_SET_HEADER)]
        assert len(blocks) <= 1
        return blocks[0] if blocks else None

    @property
    def quoted(self) -> dict[str, int]:
        """Lines quoted per source, as the engine reports them."""
        return {w.iri: len(w.lines) for w in self.engine.warmed if w.lines}

    @property
    def line_tokens(self) -> int:
        return sum(self.counter.count(x.text) + 4 for w in self.engine.warmed for x in w.lines)


def warmed_session(settings: Settings) -> Warmed:
    """Six results define names that use shared_key.lookup; ten turns of other words compact
    them away; then the agent calls shared_key.lookup again."""
    engine, counter = engine_for(settings)
    k = 0
    for k in range(1, 7):
        engine.prompt("the goal")
        turn(engine, k, f"look at module {k}", "\n".join(
            f"pkg/mod_{k}/file_{k}.py:{10 + i}: def helper_{k}_{i}(arg) uses shared_key.lookup "
            f"and other_{k}_{i}.value" for i in range(5)))
    for k in range(7, 17):
        engine.prompt("the goal")
        turn(engine, k, own_words(30, k), own_words(150, 100 + k))
    engine.prompt("the goal")
    turn(engine, 17, "now use shared_key.lookup", "shared_key.lookup failed")
    return Warmed(engine.prompt("the goal"), engine, counter)


@pytest.mark.parametrize("value", [None, "false"], ids=["default", "false"])
def test_prefetch_enabled_warms_the_sources_the_next_step_may_need(
    tmp: Path, value: str | None
) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}
    if value is not None:
        env["GLIDING_CONTEXT__PREFETCH__ENABLED"] = value

    got = warmed_session(settings_from(tmp, env))

    assert got.engine.stats.compactions > 0
    assert got.block is None  # the default block budget is 0: the warmed sources only
    if value is None:
        assert DEFAULTS.prefetch.enabled is True
        warmed = {w.iri for w in got.engine.warmed}
        # the results that showed shared_key.lookup, which the last action used again
        assert {f"gliding://job/j/result/DA-{k}-0" for k in range(1, 7)} <= warmed
        assert not warmed & {x.iri for x in got.engine.live if x.whole}
        assert all(w.lines == () for w in got.engine.warmed)
    else:
        assert got.engine.warmed == []
    assert got.engine.stats.working_set_tokens == 0


@pytest.mark.parametrize("value", [None, "40", "400"], ids=["default", "40", "400"])
def test_prefetch_budget_tokens_bounds_the_lines_the_working_set_quotes(
    tmp: Path, value: str | None
) -> None:
    env = {"GLIDING_CONTEXT__WINDOW__TARGET_TOKENS": "600"}
    if value is not None:
        env["GLIDING_CONTEXT__PREFETCH__BUDGET_TOKENS"] = value

    got = warmed_session(settings_from(tmp, env))

    if value is None:
        assert DEFAULTS.prefetch.budget_tokens == 0
        assert got.block is None and got.line_tokens == 0 and got.engine.warmed
        return
    budget = int(value)
    assert got.block is got.prompt[-1]  # after the live messages, the cached part untouched
    assert got.block.role == "user"
    assert "(<x> means gliding://job/j/x; read_result(IRI) has the full text)" in \
        got.block.content
    assert 0 < got.line_tokens <= budget
    if budget == 40:
        assert sum(got.quoted.values()) < 4
    else:
        assert got.line_tokens > 200  # a larger budget lets it quote far more
        # of sources accessed alike, the newest first
        assert "<result/DA-6-0> 1: pkg/mod_6/file_6.py:10: def helper_6_0(arg)" in \
            got.block.content
    # Σ over the session's prompts: earlier ones warmed lines too
    assert got.engine.stats.working_set_tokens >= got.counter.message(got.block) > 0


@pytest.mark.parametrize("value", [None, "2"], ids=["default", "2"])
def test_prefetch_max_sources_bounds_the_sources_the_working_set_quotes(
    tmp: Path, value: str | None
) -> None:
    env = dict(PREFETCH_ON)
    if value is not None:
        env["GLIDING_CONTEXT__PREFETCH__MAX_SOURCES"] = value

    got = warmed_session(settings_from(tmp, env))

    assert got.block is not None
    assert len(got.engine.warmed) <= (DEFAULTS.prefetch.max_sources if value is None else 2)
    if value is None:
        assert DEFAULTS.prefetch.max_sources == 12
        assert len(got.quoted) > 2
    else:
        assert len(got.quoted) == 2
    assert got.block.content.count("\n<result/") == len(got.quoted)


@pytest.mark.parametrize("value", [None, "1"], ids=["default", "1"])
def test_prefetch_lines_per_source_bounds_the_lines_quoted_from_one_source(
    tmp: Path, value: str | None
) -> None:
    env = dict(PREFETCH_ON)
    if value is not None:
        env["GLIDING_CONTEXT__PREFETCH__LINES_PER_SOURCE"] = value

    got = warmed_session(settings_from(tmp, env))

    assert got.block is not None
    most = max(got.quoted.values())
    if value is None:
        assert most == DEFAULTS.prefetch.lines_per_source == 3
        assert " | " in got.block.content
    else:
        assert most == 1
        assert " | " not in got.block.content
