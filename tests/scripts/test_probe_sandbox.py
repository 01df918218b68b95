"""scripts/probe_sandbox.py end to end: a real scripted job whose DA tries every way out of the
command sandbox, judged by the probe from the host; the test reads the probe's JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gliding.tools.sandbox import bwrap_problem, make_pids_cgroup, remove_cgroup

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "scripts" / "probe_sandbox.py"
ATTEMPTS = ["read_shadow", "read_home", "read_parent", "read_api_keys", "read_archive",
            "write_outside", "connect_loopback", "fork_2000", "leave_process"]
PROBLEM = bwrap_problem()


def _root_unbounded() -> bool:
    """Root where Gliding cannot create a pids cgroup: nothing bounds processes (the rlimit
    does not bind root), so fork_2000 is not refused there, as docs/tools.md says."""
    if os.geteuid() != 0:
        return False
    made = make_pids_cgroup(8)
    if made is not None:
        remove_cgroup(made)
    return made is None


pytestmark = [
    pytest.mark.heavy,  # a whole job through the console script, in a subprocess
    pytest.mark.skipif(PROBLEM is not None,
                       reason=f"bubblewrap cannot run here ({PROBLEM}); scripts/setup.sh "
                       "installs it"),
]


@dataclass(frozen=True)
class Probed:
    code: int
    data: dict[str, Any]
    printed: dict[str, Any]
    workspace: Path

    def result(self, attempt: str) -> dict[str, Any]:
        return next(r for r in self.data["results"] if r["attempt"] == attempt)


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Probed:
    tmp = tmp_path_factory.mktemp("probe")
    out = tmp / "r.json"
    done = subprocess.run([sys.executable, str(PROBE), "--out", str(out), "--workspace",
                           str(tmp / "ws"), "--json"], cwd=tmp, capture_output=True,
                          text=True, timeout=110, check=False)
    assert out.is_file(), done.stderr
    return Probed(done.returncode, json.loads(out.read_text()), json.loads(done.stdout),
                  tmp / "ws")


def test_the_probe_writes_one_verdict_per_attempt(probed: Probed) -> None:
    data = probed.data
    assert probed.printed == data  # --json prints what --out holds
    assert [r["attempt"] for r in data["results"]] == ATTEMPTS
    assert data["attempts"] == len(ATTEMPTS)
    assert data["refused"] == sum(r["refused"] for r in data["results"])
    assert all(isinstance(r["refused"], bool) and r["evidence"] for r in data["results"])
    assert isinstance(data["host_changed"], bool)


def test_the_job_ended_cleanly_with_its_checks_confined(probed: Probed) -> None:
    data = probed.data
    assert (data["job_outcome"], data["job_status"], data["job_exit_code"]) == (
        "success", "success", 0), data["job_stderr_tail"]
    assert data["job_clean"] is True
    # the check passes only where /etc/shadow is absent: inside the sandbox
    assert [c["status"] for c in data["checks"]] == ["pass"]
    assert data["sandbox"].startswith("sandbox: bubblewrap (")
    assert (probed.workspace / "probe-done").read_text() == "done\n"


@pytest.mark.parametrize("attempt", [
    pytest.param(a, marks=pytest.mark.skipif(
        a == "fork_2000" and _root_unbounded(),
        reason="root without a pids cgroup: processes are not bounded (docs/tools.md)"))
    for a in ATTEMPTS])
def test_each_attempt_is_refused(probed: Probed, attempt: str) -> None:
    result = probed.result(attempt)
    assert result["refused"] is True, result["evidence"]


def test_the_evidence_comes_from_the_host_too(probed: Probed) -> None:
    host = probed.data["host"]
    assert host["processes_left"] == []
    assert host["listener_connections"] == 0
    assert host["cgroups_left"] == []
    assert host["marked_processes_seen"] > 100  # the forks and the escapes did run
    # the key was there to steal: in the probe's /proc/<pid>/environ on the host
    assert ": True; in the output: False" in probed.result("read_api_keys")["evidence"]
    assert "refused after" in probed.result("fork_2000")["evidence"]
    assert "on the host: none" in probed.result("write_outside")["evidence"]


def test_the_archive_in_the_workspace_is_out_of_reach_and_the_probe_passes(
        probed: Probed) -> None:
    assert probed.result("read_archive")["refused"] is True, probed.result("read_archive")
    assert probed.data["host"]["files_written"] == []
    assert probed.data["host_changed"] is False
    assert probed.code == 0
