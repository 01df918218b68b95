"""How a turn's streamed pieces become events (gliding/agents/streaming.py: batched by time,
size and kind of text; void when the call failed) and how they are shown
(gliding/daemon/render.py, StreamLines: the model's own lines, not a line per event)."""

from __future__ import annotations

import anyio

from gliding.agents.streaming import FLUSH_CHARS, FLUSH_S, TurnStream
from gliding.bus.messages import JobEvent
from gliding.core.events import Event, ModelDelta, ModelDiscarded, event_data
from gliding.daemon.render import STREAM_WIDTH, StreamLines, progress_line
from gliding.llm.port import Delta


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def stream_of(clock: Clock) -> tuple[TurnStream, list[Event]]:
    published: list[Event] = []

    async def publish(event: Event) -> None:
        published.append(event)

    return TurnStream(publish, clock, session="DA", turn=3), published


def test_pieces_are_batched_by_time_and_size_and_add_up_in_order() -> None:
    clock = Clock()
    stream, published = stream_of(clock)
    pieces = [f"p{i:03d} " for i in range(300)]  # 5 characters each

    async def main() -> None:
        for i, piece in enumerate(pieces):
            if i == 50:
                clock.t += 2 * FLUSH_S  # time is up: what is held goes out with the next piece
            await stream.delta(Delta(piece))
        await stream.flush()

    anyio.run(main)
    deltas = [e for e in published if isinstance(e, ModelDelta)]
    assert "".join(d.text for d in deltas) == "".join(pieces)
    assert [d.seq for d in deltas] == list(range(1, len(deltas) + 1))
    assert len(deltas) < len(pieces) // 50  # a handful of events, not one a piece
    assert deltas[0].text == pieces[0]  # the first piece is not held back
    assert all(len(d.text) <= FLUSH_CHARS + 4 for d in deltas)
    assert deltas[1].text == "".join(pieces[1:51])  # held since the first, out with the 51st
    assert {(d.session, d.turn, d.tool) for d in deltas} == {("DA", 3, None)}


def test_text_and_tool_arguments_are_separate_deltas() -> None:
    stream, published = stream_of(Clock())

    async def main() -> None:
        for piece in (Delta("Let me write it."), Delta(" Now."), Delta('{"pa', "write_file"),
                      Delta('th": "a"}', "write_file"), Delta('{"summ', "finish"),
                      Delta('ary": "ok"}', "finish")):
            await stream.delta(piece)
        await stream.flush()

    anyio.run(main)
    got = [(e.tool, e.text) for e in published if isinstance(e, ModelDelta)]
    assert got == [(None, "Let me write it."), (None, " Now."),
                   ("write_file", '{"path": "a"}'), ("finish", '{"summary": "ok"}')]


def test_a_discard_flushes_first_and_counts_what_was_streamed_since_the_last() -> None:
    stream, published = stream_of(Clock())

    async def main() -> None:
        await stream.discard("nothing streamed yet")  # a retry before any piece: no event
        for piece in ("Hello", ", wor"):
            await stream.delta(Delta(piece))
        await stream.discard("connection failed")
        for piece in ("Hello", ", world"):
            await stream.delta(Delta(piece))
        await stream.flush()

    anyio.run(main)
    assert [type(e).__name__ for e in published] == [
        "ModelDelta", "ModelDelta", "ModelDiscarded", "ModelDelta"]
    discarded = published[2]
    assert isinstance(discarded, ModelDiscarded)
    assert (discarded.chars, discarded.reason) == (len("Hello, wor"), "connection failed")
    after = [e.text for e in published[3:] if isinstance(e, ModelDelta)]
    assert "".join(after) == "Hello, world"
    assert [e.seq for e in published if isinstance(e, ModelDelta)] == [1, 2, 3]


def job_event(event: Event) -> JobEvent:
    return JobEvent.of("job-1", event)


def test_streamed_text_is_shown_as_the_models_lines_before_the_next_event() -> None:
    streams = StreamLines()
    shown: list[str] = []
    for text in ("First li", "ne\nSecond", " line\nthird, unfinished"):
        shown += streams.take(job_event(ModelDelta("DA", 3, 1, text))) or []
    assert shown == ["[DA turn 3] ▸ First line", "[DA turn 3] ▸ Second line"]
    other = job_event(ModelDelta("DA", 3, 2, '{"path": "x"}', tool="write_file"))
    shown = streams.take(other) or []
    assert shown == ["[DA turn 3] ▸ third, unfinished"]  # the turn went on to a tool call
    assert streams.take(JobEvent(job="job-1", event="turn", data={})) is None
    assert streams.flush() == ['[DA turn 3] ▸ write_file {"path": "x"}']
    assert streams.flush() == []


def test_a_long_line_comes_in_pieces_and_control_characters_are_escaped() -> None:
    streams = StreamLines()
    text = "x" * (2 * STREAM_WIDTH + 5) + "\x1b[31m"
    lines = streams.take(job_event(ModelDelta("DA.1.s2", 1, 1, text))) or []
    assert lines == [f"[DA.1.s2 turn 1] ▸ {'x' * STREAM_WIDTH}"] * 2
    assert streams.flush() == ["[DA.1.s2 turn 1] ▸ xxxxx\\x1b[31m"]


def test_a_discard_shows_what_was_held_then_says_it_is_void() -> None:
    streams = StreamLines()
    assert streams.take(job_event(ModelDelta("DA", 2, 1, "Hello, wor"))) == []
    lines = streams.take(job_event(ModelDiscarded("DA", 2, "connection failed", 10)))
    assert lines == ["[DA turn 2] ▸ Hello, wor",
                     "[DA turn 2] ✗ the 10 characters streamed above are void "
                     "(connection failed); the reply comes again"]
    assert streams.flush() == []


def test_a_forged_delta_shows_nothing_and_raises_nothing() -> None:
    streams = StreamLines()
    forged = JobEvent(job="job-1", event=ModelDelta.name, data={"session": "DA", "text": 5})
    assert streams.take(forged) == []
    assert progress_line(forged) is None
    assert event_data(ModelDelta("DA", 1, 1, "hi")) == {
        "session": "DA", "turn": 1, "seq": 1, "text": "hi"}  # tool left out when None
