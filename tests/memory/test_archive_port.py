"""The archive port's contract, run against LocalArchive (SQLite, on threads) and the
in-memory fake; and an agent session that writes only through the port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive import Archive, CallRecord
from gliding.memory.archive_port import ArchivePort, LocalArchive
from gliding.testing.archive import InMemoryArchive

J = "gliding://job/j1"


@pytest.fixture(params=["local", "memory"])
def port(request: Any, tmp_path: Path) -> Iterator[ArchivePort]:
    if request.param == "memory":
        yield InMemoryArchive("j1")
        return
    archive = Archive.open(tmp_path / "data", "j1")
    yield LocalArchive(archive, tmp_path / "data")
    archive.close()


def test_an_item_reads_back_with_its_meta(port: ArchivePort) -> None:
    async def main() -> None:
        await port.put(f"{J}/result/DA-1-0", "out", kind="result", meta={"ok": True})
        item = await port.find(f"{J}/result/DA-1-0")
        assert item is not None and item.content == b"out" and item.meta == {"ok": True}
        assert await port.read_text(f"{J}/result/DA-1-0") == "out"
        assert await port.find(f"{J}/result/DA-9-0") is None

    anyio.run(main)


def test_the_same_bytes_again_are_a_no_op_and_other_bytes_are_refused(port: ArchivePort) -> None:
    async def main() -> None:
        await port.put(f"{J}/result/DA-1-0", "out", kind="result")
        await port.put(f"{J}/result/DA-1-0", "out", kind="result")
        with pytest.raises(ArchiveError, match="different content"):
            await port.put(f"{J}/result/DA-1-0", "other", kind="result")
        with pytest.raises(ArchiveError):
            await port.put("gliding://job/j2/result/DA-1-0", "x", kind="result")

    anyio.run(main)


def test_a_turn_and_its_ledger_row_are_written_together(port: ArchivePort) -> None:
    call = CallRecord(job="j1", role="DA", turn=1, model="m", prompt_tokens=5,
                      turn_iri=f"{J}/turn/DA/1")

    async def main() -> None:
        await port.put_turn(f"{J}/turn/DA/1", '{"reply": {}}', {"role": "DA", "turn": 1}, call)
        assert [c.turn_iri for c in await port.calls()] == [f"{J}/turn/DA/1"]
        assert (await port.find(f"{J}/turn/DA/1")) is not None
        with pytest.raises(ArchiveError):  # a different turn body under the same IRI
            await port.put_turn(f"{J}/turn/DA/1", '{"reply": 2}', {}, call)
        assert len(await port.calls()) == 1  # and no second ledger row

    anyio.run(main)


def test_a_node_iri_reads_its_latest_revision(port: ArchivePort) -> None:
    async def main() -> None:
        for n in (1, 2):
            await port.put(f"{J}/node/step/1/{n}", f"revision {n}", kind="node",
                           meta={"node": f"{J}/plan/1/step/1"})
        assert await port.read_text(f"{J}/plan/1/step/1") == "revision 2"

    anyio.run(main)


def test_missing_and_malformed_iris_are_clear_errors(port: ArchivePort) -> None:
    async def main() -> None:
        with pytest.raises(NotFoundError):
            await port.read_text(f"{J}/result/nothing")
        with pytest.raises(IRIError):
            await port.read_text("not an iri")

    anyio.run(main)


def test_an_agent_session_needs_nothing_but_the_port(tmp_path: Path) -> None:
    from gliding.agents.loop import AgentEnv, run_agent
    from gliding.agents.roles import load_role
    from gliding.bus.inproc import InProcessBus
    from gliding.config.settings import Settings
    from gliding.context.tokens import TokenCounter
    from gliding.core.budget import BudgetTracker, Limits
    from gliding.testing import ScriptedLLM, call
    from gliding.tools.base import ToolContext
    from gliding.tools.groups import job_groups

    fake = InMemoryArchive("j1")
    settings = Settings()
    spec = load_role("DA")
    llm = ScriptedLLM([call("write_file", path="a.txt", content="x"),
                       call("read_result", iri="result/DA-1-0"),
                       call("finish", summary="wrote a.txt")])
    env = AgentEnv(job="j1", role=spec, llm=llm,
                   toolset=job_groups(reader=fake, iri_base=f"{J}/").toolset(spec.tool_groups),
                   tool_ctx=ToolContext(tmp_path, settings.tools), archive=fake,
                   budget=BudgetTracker(Limits(), started_at=0.0), bus=InProcessBus(),
                   now=lambda: 0.0, max_turns=5, context=settings.context,
                   counter=TokenCounter())
    result = anyio.run(run_agent, env, "Goal: write a.txt")
    assert result.status == "finished"
    assert result.tools[1].output == "wrote 1 bytes to a.txt"  # read back through the port
    assert sorted(i for i in fake.items if "/turn/" in i) == [f"{J}/turn/DA/{n}"
                                                              for n in (1, 2, 3)]
    assert len(fake.ledger) == 3
