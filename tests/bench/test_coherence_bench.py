"""``gliding bench coherence``: its pure helpers here, then two real runs (mosquitto, oxigraph,
client and directory processes killed with SIGKILL) through the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gliding.bench.coherence import (
    Record,
    failures,
    final_reads,
    kill_schedule,
    lost_acked_writes,
    mode_metrics,
    parse_history,
)
from gliding.bench.coherence_procs import (
    CoherenceBenchError,
    RegisterStore,
    Step,
    call_line,
    decode,
    encode,
    key_iri,
    no_invalidate_step,
    ret_line,
    workload,
)
from gliding.memory.coherence.linearizability import check
from gliding.memory.coherence.protocol import (
    DirEntry,
    Invalidate,
    SendTo,
    StoreWritten,
    WriteAck,
    WriteRequest,
    directory_step,
)

GLIDING = str(Path(sys.executable).parent / "gliding")
K = key_iri(0)


def lines(*chunks: bytes) -> list[str]:
    return b"".join(chunks).decode().splitlines()


def test_history_lines_parse_into_done_failed_and_pending_operations() -> None:
    history = lines(
        call_line("p0.0", 0, "p0.i1", Step("write", K), "p0.i1.0", 1.0),
        ret_line("p0.0", 1.5, ok=True, version=1),
        call_line("p0.1", 0, "p0.i1", Step("read", K), None, 2.0),
        ret_line("p0.1", 2.1, ok=True, value="p0.i1.0", version=1, hit=True),
        call_line("p0.2", 0, "p0.i1", Step("write", K), "p0.i1.2", 3.0),
        ret_line("p0.2", 6.0, ok=False, error="coherence.timeout: no ack"),
        call_line("p0.3", 0, "p0.i1", Step("read", K), None, 7.0),  # killed: pending
    ) + ['{"t": "ret", "op": "p0', "not json", '{"t": "ret", "op": "nobody", "at": 1}']
    records = {r.op: r for r in parse_history(history)}
    assert set(records) == {"p0.0", "p0.1", "p0.2", "p0.3"}
    assert records["p0.0"] == Record("p0.0", 0, "p0.i1", K, "write", "p0.i1.0", 1.0, 1.5,
                                     True, 1)
    assert records["p0.1"].value == "p0.i1.0" and records["p0.1"].hit
    assert not records["p0.2"].ok and records["p0.2"].value == "p0.i1.2"  # what it wrote
    assert records["p0.3"].ret is None
    assert check([r.operation() for r in records.values()]).ok


def test_lost_acked_writes_compare_with_the_final_stored_version() -> None:
    def write(op: str, version: int, value: str, *, ok: bool = True,
              ret: float | None = 1.0) -> Record:
        return Record(op, 0, "p0.i1", K, "write", value, 0.5, ret, ok, version)

    records = [write("a", 1, "x"), write("b", 2, "y"), write("c", 3, "z", ok=False),
               write("d", 4, "w", ret=None)]
    assert lost_acked_writes(records, {K: (2, "y")}) == []
    assert [r.op for r in lost_acked_writes(records, {K: (1, "x")})] == ["b"]
    assert [r.op for r in lost_acked_writes(records, {K: (2, "other")})] == ["b"]
    assert lost_acked_writes(records, {}) == []  # a key the parent could not read back


def test_a_final_read_exposes_a_write_the_store_lost() -> None:
    acked = Record("a", 0, "p0.i1", K, "write", "x", 0.0, 1.0, True, 1)
    history = [acked.operation(), *final_reads({K: (0, None)}, 5.0)]
    assert not check(history).ok
    assert check([acked.operation(), *final_reads({K: (1, "x")}, 5.0)]).ok


def test_the_workload_and_the_kill_schedule_are_seeded() -> None:
    one = workload(7, 2, 1000, 10, 0.25)
    assert one == workload(7, 2, 1000, 10, 0.25) != workload(7, 3, 1000, 10, 0.25)
    assert 180 < sum(s.kind == "write" for s in one) < 320
    assert {s.key for s in one} == {key_iri(i) for i in range(10)}
    kills = kill_schedule(3, 40_000, 8, 1)
    assert kills == kill_schedule(3, 40_000, 8, 1) != kill_schedule(4, 40_000, 8, 1)
    assert len(kills) == 9 and sum(k.directory for k in kills) == 1
    assert [k.at for k in kills] == sorted(k.at for k in kills)
    assert all(2_000 <= k.at <= 36_000 for k in kills)


class FakeBoard:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        return self.nodes.get(f"{graph} {iri}")

    def put(self, node: dict[str, Any], *, graph: str) -> str:
        self.nodes[f"{graph} {node['@id']}"] = node
        return str(node["@id"])


def test_the_register_store_encodes_versions_in_fact_nodes() -> None:
    store = RegisterStore(FakeBoard())
    assert store.load(K) == (0, None)
    store.save(K, 3, "v")
    assert store.load(K) == (3, "v") and (store.loads, store.saves) == (2, 1)
    assert encode(K, 3, "v")["@type"] == "Fact" and decode(encode(K, 0, None)) == (0, None)
    with pytest.raises(CoherenceBenchError):
        decode({"@id": K, "@type": "Fact", "text": "not a register"})


def test_the_broken_step_never_invalidates_yet_acks_the_write() -> None:
    entry = DirEntry(K, sharers=frozenset({"b"}))
    good, effects = directory_step(entry, WriteRequest(K, "a", "v", 1), 0.0, lease=1.0)
    assert any(isinstance(e, SendTo) and isinstance(e.message, Invalidate) for e in effects)
    bad, effects = no_invalidate_step(entry, WriteRequest(K, "a", "v", 1), 0.0, lease=1.0)
    assert not any(isinstance(e, SendTo) and isinstance(e.message, Invalidate) for e in effects)
    _, effects = no_invalidate_step(bad, StoreWritten(K, 1), 0.0, lease=1.0)
    assert any(isinstance(e, SendTo) and isinstance(e.message, WriteAck) for e in effects)


def test_mode_metrics_and_failures() -> None:
    records = [Record("a", 0, "p0.i1", K, "write", "x", 0.0, 0.004, True, 1),
               Record("b", 0, "p0.i1", K, "read", "x", 0.01, 0.011, True, 1, hit=True),
               Record("c", 0, "p0.i1", K, "read", None, 0.02, 0.03, False),
               Record("d", 0, "p0.i1", K, "read", None, 0.04)]
    checked = {"violations": 0, "timed_out_keys": []}
    m = mode_metrics(records, {"messages": 8, "store_reads": 1}, 0, checked, wall_s=1.0,
                     kills=1, directory_kills=0)
    assert (m["operations"], m["failed"], m["pending"], m["called"]) == (2, 1, 1, 4)
    assert m["messages_per_operation"] == 2.0 and m["cache_hit_rate"] == 1.0
    assert m["write_latency_ms"]["p50"] == pytest.approx(4.0)
    result = {"mesi": m}
    assert failures(result) == []
    result["mesi"] = {**m, "violations": 2, "lost_acked_writes": 1,
                      "checker_timed_out": True, "checker": {"timed_out_keys": [K]}}
    assert len(failures(result)) == 3


# --- real runs ----------------------------------------------------------------------------------


def bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "r.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([GLIDING, "bench", "coherence", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=170, env=env, cwd=tmp_path)
    return done, json.loads(out.read_text())


@pytest.mark.heavy
@pytest.mark.timeout(180)
def test_mesi_stays_linearizable_through_client_and_directory_kills(tmp_path: Path) -> None:
    done, result = bench(tmp_path, "--processes", "3", "--ops", "300", "--keys", "20",
                         "--kills", "2", "--directory-kills", "1", "--seed", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    assert result["violations"] == 0 and result["lost_acked_writes"] == 0
    assert result["kills"] == 2 and result["directory_kills"] == 1
    assert result["processes"] == 3 and result["ops_per_process"] == 300
    assert set(result["baselines"]) == {"no_cache", "broadcast_invalidation"}
    assert result["checker"]["ok"] and result["checker"]["keys_checked"] == 20
    mesi = result["mesi"]
    assert mesi["called"] == 900 and mesi["operations"] + mesi["failed"] + mesi["pending"] == 900
    assert mesi["pending"] <= 3  # one in flight per kill at most
    assert 0 < mesi["cache_hit_rate"] < 1 and mesi["messages_per_operation"] > 0
    assert mesi["store_reads"] < result["baselines"]["no_cache"]["store_reads"]
    for metrics in (mesi, *result["baselines"].values()):
        assert metrics["kills"] == 2
        for field in ("operations", "pending", "failed", "messages_per_operation",
                      "read_latency_ms", "write_latency_ms", "store_reads", "cache_hit_rate",
                      "violations", "lost_acked_writes", "wall_s"):
            assert field in metrics
    assert "killed client" in done.stderr and "killed the directory" in done.stderr


@pytest.mark.heavy
@pytest.mark.timeout(120)
def test_a_directory_that_never_invalidates_fails_the_bench(tmp_path: Path) -> None:
    done, result = bench(tmp_path, "--protocol", "broken", "--modes", "mesi", "--processes",
                         "2", "--ops", "300", "--keys", "5", "--kills", "0",
                         "--directory-kills", "0")
    assert done.returncode == 1
    assert result["violations"] > 0 and result["baselines"] == {}
    assert "not coherent" in done.stderr and "not linearizable" in done.stderr
