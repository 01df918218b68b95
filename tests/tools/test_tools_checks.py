"""Success checks: verdicts with evidence that names what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.settings import BashSettings, ToolSettings
from gliding.core.checks import CommandSucceeds, FileContains, FileExists
from gliding.tools.base import ToolContext
from gliding.tools.checks import ChecksGroup, outcome_of, outcomes_in, run_checks_on
from gliding.tools.groups import job_groups


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("Hello, World!")
    (ws / "notes.md").write_text("hello, world!\nsecond line\n")
    (ws / "src").mkdir()
    (tmp_path / "outside.txt").write_text("Hello, World!")
    return ws


@pytest.mark.anyio
async def test_file_exists(ws: Path) -> None:
    found, missing, nested, directory = await run_checks_on(
        [
            FileExists("hello.txt"),
            FileExists("bye.txt"),
            FileExists("src/x/y.py"),
            FileExists("src"),
        ],
        ws,
        ToolSettings(),
    )
    assert found.passed and found.evidence == "hello.txt exists (13 bytes)"
    assert not missing.passed
    assert missing.evidence == "bye.txt does not exist; workspace has: hello.txt, notes.md, src/"
    assert nested.evidence == "src/x/y.py does not exist; src/ is empty"
    assert directory.passed and directory.evidence == "src exists (directory)"


@pytest.mark.anyio
async def test_file_contains_pass_and_fail_show_expected(ws: Path) -> None:
    ok, wrong_case, missing = await run_checks_on(
        [
            FileContains("hello.txt", "Hello, World!"),
            FileContains("notes.md", "Hello, World!"),
            FileContains("nope.txt", "Hello"),
        ],
        ws,
        ToolSettings(),
    )
    assert ok.passed and ok.expected == "Hello, World!"
    assert ok.evidence == "found 'Hello, World!' at line 1"
    assert not wrong_case.passed
    assert wrong_case.expected == "Hello, World!"
    assert wrong_case.evidence == (
        "expected text 'Hello, World!'; file starts: 'hello, world!\\nsecond line\\n'; "
        "found with different case at line 1: 'hello, world!'"
    )
    assert not missing.passed and missing.expected == "Hello"
    assert "nope.txt does not exist" in missing.evidence
    assert "expected text 'Hello'" in missing.evidence


@pytest.mark.anyio
async def test_file_start_is_cut_at_200_chars(ws: Path) -> None:
    (ws / "big.txt").write_text("a" * 1000)
    [result] = await run_checks_on([FileContains("big.txt", "b")], ws, ToolSettings())
    assert result.evidence == f"expected text 'b'; file starts: {'a' * 200!r}"


@pytest.mark.anyio
async def test_check_paths_are_confined(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "outside.txt")
    results = await run_checks_on(
        [
            FileExists("../outside.txt"),
            FileContains("link.txt", "Hello, World!"),
            FileContains("/etc/passwd", "root"),
        ],
        ws,
        ToolSettings(),
    )
    assert [r.passed for r in results] == [False, False, False]
    for result in results:
        assert result.evidence.startswith("path refused: ")
        assert "outside the workspace" in result.evidence or "absolute" in result.evidence
    assert "expected text 'Hello, World!'" in results[1].evidence


@pytest.mark.anyio
async def test_command_checks(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak")
    passed, failed, no_secret = await run_checks_on(
        [
            CommandSucceeds("grep -q World hello.txt && echo found it"),
            CommandSucceeds("echo checking; echo 'AssertionError: 2 != 3' >&2; exit 1"),
            CommandSucceeds('test -z "$OPENAI_API_KEY"'),
        ],
        ws,
        ToolSettings(),
    )
    assert passed.passed and passed.evidence == "exit code 0; output tail: 'found it'"
    assert passed.expected == "exit code 0"
    assert not failed.passed
    assert failed.evidence == "exit code 1; output tail: 'checking\\nAssertionError: 2 != 3'"
    assert no_secret.passed and no_secret.evidence == "exit code 0; no output"


@pytest.mark.anyio
async def test_command_check_uses_its_own_timeout(ws: Path) -> None:
    settings = ToolSettings(bash=BashSettings(timeout_s=60))
    [result] = await run_checks_on(
        [CommandSucceeds("echo start; sleep 1000", timeout_s=0.5)], ws, settings
    )
    assert not result.passed
    # the check's 0.5 s, not the bash setting's 60 s, killed it
    assert result.evidence == "killed after 0.5s timeout; output tail: 'start'"


@pytest.mark.anyio
async def test_run_checks_tool_report(ws: Path) -> None:
    checks = [FileContains("hello.txt", "Hello, World!"), FileContains("hello.txt", "Bye")]
    toolset = job_groups(checks=checks).toolset(["check"])
    ctx = ToolContext(ws, ToolSettings())
    outcome = await toolset.call("run_checks", {}, ctx)
    assert outcome.ok
    assert outcome.output == (
        "PASS file hello.txt contains 'Hello, World!' — evidence: found 'Hello, World!' at line 1\n"
        "FAIL file hello.txt contains 'Bye' — evidence: expected text 'Bye'; "
        "file starts: 'Hello, World!'\n"
        "1/2 checks pass"
    )
    verdicts = outcomes_in(outcome.data)  # the verdicts the report was made of, kept as data
    assert verdicts == [outcome_of(r) for r in await run_checks_on(checks, ws, ToolSettings())]
    assert [(v.check, v.status, v.path) for v in verdicts] == [
        ("file hello.txt contains 'Hello, World!'", "pass", "hello.txt"),
        ("file hello.txt contains 'Bye'", "fail", "hello.txt"),
    ]
    assert verdicts[1].evidence == "expected text 'Bye'; file starts: 'Hello, World!'"
    assert verdicts[1].expected == "Bye"
    assert verdicts[1].remedy == 'Write the file hello.txt containing the text "Bye"'
    empty = await job_groups().toolset(["check"]).call("run_checks", {}, ctx)
    assert empty.ok and empty.output == "this task defines no checks"
    assert outcomes_in(empty.data) == []
    refused = await toolset.call("run_checks", {"fast": True}, ctx)
    assert not refused.ok and "unknown argument 'fast'" in refused.output
    assert outcomes_in(refused.data) is None


@pytest.mark.anyio
async def test_checks_group_runs_the_tasks_checks_as_outcomes(ws: Path) -> None:
    group = ChecksGroup([FileExists("hello.txt"), CommandSucceeds("exit 3")])
    assert group.name == "check" and [t.name for t in group.tools] == ["run_checks"]
    found, failed = await group.run(ToolContext(ws, ToolSettings()))
    assert found.passed and found.status == "pass" and found.path == "hello.txt"
    assert found.evidence == "hello.txt exists (13 bytes)"
    assert not failed.passed and failed.status == "fail" and failed.path is None
    assert failed.check == "command `exit 3` exits 0"
    assert failed.remedy == "Make the command `exit 3` exit 0"
    assert failed.evidence.startswith("exit code 3") and failed.expected == "exit code 0"
