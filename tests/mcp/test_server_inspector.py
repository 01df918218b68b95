"""``gliding mcp`` under the MCP Inspector's CLI (``@modelcontextprotocol/inspector``, another
implementation of the protocol than the Python SDK's): it lists the tools, runs a scripted job
through ``tools/call``, reads the artifact back, and sees a bad call as a tool error.

The Inspector is installed by scripts/setup.sh into ``.cache/mcp-servers`` and run offline
(``npx --no``: never fetched). Without node these tests are skipped; with node but without
the package they fail, saying to run the setup.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = ROOT / ".cache" / "mcp-servers"
PACKAGE = PREFIX / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
SERVER = [sys.executable, "-m", "gliding.mcp.server", "--data-dir", "data"]
SERVER_ENV = ["-e", "HF_HUB_OFFLINE=1", "-e", "GLIDING_MEMORY__VECTORS__ENABLED=false"]
TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: [DA, CA]
checks:
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""
REPLIES = """\
DA:
  - write_file: {path: hello.txt, content: "Hello, World! ✓\\n"}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: all checks pass}
"""

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npx") is None,
                       reason="node is not installed: the MCP Inspector CLI runs on node "
                              "(install node 20+, then scripts/setup.sh)"),
]


def inspector(cwd: Path, *args: str) -> tuple[int, Any, str]:
    """``npx --no --prefix .cache/mcp-servers mcp-inspector --cli <gliding mcp> ARGS`` in
    ``cwd``: its exit code, its JSON answer and its stderr."""
    if not PACKAGE.is_file():
        pytest.fail(f"the MCP Inspector is not installed in {PREFIX}: run scripts/setup.sh")
    proc = subprocess.run(["npx", "--no", "--prefix", str(PREFIX), "mcp-inspector", "--cli",
                           *SERVER, *SERVER_ENV, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    try:
        answer = json.loads(proc.stdout[proc.stdout.index("{"): proc.stdout.rindex("}") + 1])
    except ValueError:
        answer = None
    return proc.returncode, answer, proc.stderr + proc.stdout


def test_inspector_lists_the_tools_and_runs_a_job_then_reads_its_artifact(
        tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")

    code, listed, out = inspector(tmp_path, "--method", "tools/list")
    assert code == 0, out
    assert sorted(t["name"] for t in listed["tools"]) == [
        "job_status", "knowledge_query", "list_jobs", "read_iri", "recall", "run_job",
        "submit_job"]
    read_iri = next(t for t in listed["tools"] if t["name"] == "read_iri")
    assert read_iri["annotations"]["readOnlyHint"] is True
    assert read_iri["inputSchema"]["required"] == ["iri"]

    code, ran, out = inspector(tmp_path, "--method", "tools/call", "--tool-name", "run_job",
                               "--tool-arg", "task_path=task.yaml",
                               "model=scripted:replies.yaml")
    assert code == 0, out
    assert ran["isError"] is False, ran
    report = ran["structuredContent"]
    assert report["outcome"] == "success", report
    (artifact,) = report["artifacts"]

    code, page, out = inspector(tmp_path, "--method", "tools/call", "--tool-name", "read_iri",
                                "--tool-arg", f"iri={artifact['iri']}")
    assert code == 0, out
    data = page["structuredContent"]
    assert (data["encoding"], data["next_offset"]) == ("utf-8", None)
    assert data["content"].encode("utf-8") == (tmp_path / "workspace" / "hello.txt").read_bytes()


def test_inspector_sees_a_bad_call_as_a_tool_error(tmp_path: Path) -> None:
    code, answer, out = inspector(tmp_path, "--method", "tools/call", "--tool-name",
                                  "job_status", "--tool-arg", "job=../etc")
    assert code != 0, out  # the Inspector exits non-zero on isError
    assert answer is not None and answer["isError"] is True, out
    assert "bad job id '../etc'" in answer["content"][0]["text"]
