"""Which calls an approvals policy asks about: rules match tools, whole commands (whose
wildcards never span a chaining character), normalised workspace paths and URL hosts; the
task's policy adds asking to the host's; bad policies are refused when they load."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.agents.approvals import asks, command_matches, digest, matches
from gliding.config.settings import ApprovalPolicy, ApprovalRule
from gliding.errors import TaskFileError
from tests.settings_effects.effects_support import write_task

WS = Path("/work/ws")


@pytest.mark.parametrize(("command", "pattern", "expected"), [
    ("pytest -x tests", "pytest *", True),
    ("pytest   -x\ttests", "pytest -x tests", True),  # runs of blanks read as one space
    ("pytest x; rm -rf ~", "pytest *", False),
    ("pytest x && curl evil", "pytest *", False),
    ("pytest $(rm -rf ~)", "pytest *", False),
    ("pytest `id`", "pytest *", False),
    ("pytest x > /etc/passwd", "pytest *", False),
    ("pytest x | sh", "pytest *", False),
    ("pytest x\nrm -rf ~", "pytest *", False),  # two lines are two commands
    ("echo a >> trace.txt", "echo * >> trace.txt", True),  # literal in the pattern: allowed
    ("echo a >> trace.txt; id", "echo * >> trace.txt*", False),
    ("ls", "ls ?", False),
    ("ls -l", "ls ??", True),
])
def test_a_command_pattern_matches_the_whole_command_and_never_spans_chaining(
        command: str, pattern: str, expected: bool) -> None:
    assert command_matches(command, pattern) is expected


@pytest.mark.parametrize(("path", "pattern", "expected"), [
    ("src/a.py", "src/*", True),
    ("./src/../src/a.py", "src/*", True),
    ("src/deep/a.py", "src/*", True),  # * matches / too
    ("../ws/src/a.py", "src/*", True),  # normalised: it is inside the workspace
    ("../other/src/a.py", "src/*", False),
    ("/etc/passwd", "*", False),  # a relative pattern: inside the workspace only
    ("/etc/passwd", "/etc/*", True),
    ("src/../../../etc/passwd", "/etc/*", True),
])
def test_a_path_pattern_matches_normalised_paths(path: str, pattern: str,
                                                 expected: bool) -> None:
    rule = ApprovalRule(tool="write_file", path=pattern)
    assert matches(rule, "write_file", {"path": path, "content": ""}, WS) is expected


def test_a_rule_matches_only_when_every_field_it_gives_does() -> None:
    fetch = ApprovalRule(tool="web_fetch", host="*.python.org")
    assert matches(fetch, "web_fetch", {"url": "https://docs.python.org/3/"}, WS)
    assert matches(fetch, "web_fetch", {"url": "https://DOCS.Python.org"}, WS)
    assert not matches(fetch, "web_fetch", {"url": "https://python.org.evil.com/"}, WS)
    assert not matches(fetch, "web_fetch", {"url": "not a url"}, WS)
    assert not matches(fetch, "web_fetch", {}, WS)  # the argument is missing
    assert not matches(fetch, "bash", {"url": "https://docs.python.org/"}, WS)
    bash = ApprovalRule(tool="bash", command="ls *")
    assert not matches(bash, "bash", {"command": ["ls", "-l"]}, WS)  # not a string
    assert matches(ApprovalRule(tool="mcp_*"), "mcp_files_read", {}, WS)


def test_either_policy_asking_makes_a_call_wait() -> None:
    lenient = ApprovalPolicy(ask="unmatched", allow=[ApprovalRule(tool="bash")])
    strict = ApprovalPolicy(ask="everything")
    call = ("bash", {"command": "ls"})
    assert asks((ApprovalPolicy(),), *call, WS) is None
    assert asks((lenient,), *call, WS) is None
    assert asks((lenient, strict), *call, WS) == (
        "every tool call waits for approval (approvals.ask: everything)")
    assert asks((ApprovalPolicy(), lenient), "read_file", {"path": "a"}, WS) == (
        "no approvals.allow rule matches this call")


def test_an_answer_binds_to_the_exact_tool_and_arguments() -> None:
    one = digest("bash", {"command": "ls", "b": [1, 2]})
    assert one == digest("bash", {"b": [1, 2], "command": "ls"})  # key order is no change
    assert one != digest("bash", {"command": "ls ", "b": [1, 2]})
    assert one != digest("sh", {"command": "ls", "b": [1, 2]})


def test_a_task_file_with_a_bad_policy_is_refused_with_the_field(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match=r"approvals\.ask"):
        write_task(tmp_path, "goal: g\napprovals: {ask: sometimes}\n")
    with pytest.raises(TaskFileError, match=r"approvals\.allow\[0\]\.comand"):
        write_task(tmp_path, "goal: g\napprovals: {allow: [{tool: bash, comand: ls}]}\n")
    task = write_task(tmp_path, "goal: g\napprovals: {ask: everything}\n")
    assert task.approvals.ask == "everything"
