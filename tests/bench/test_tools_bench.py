"""``gliding bench tools`` end to end: two scripted jobs with the real reference MCP servers (the
pinned node programs of tests/mcp), the tool-definition tokens of every role on demand against
the full catalog, and the model calls the on-demand path took."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gliding.bench.tool_catalog import ROLES, TARGET
from tests.cli.cli_support import invoke
from tests.mcp.mcp_support import EVERYTHING, FILESYSTEM, MODULES, node, server_js

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]  # node servers, two whole jobs


def test_bench_tools_measures_each_role_on_demand_against_the_full_catalog(
        tmp_path: Path) -> None:
    server_js(EVERYTHING), server_js(FILESYSTEM)  # skip without node; fail when not installed
    out = tmp_path / "r.json"

    done = invoke(["bench", "tools", str(MODULES), "--node", node(), "--out", str(out)],
                  cwd=tmp_path)

    assert done.code == 0, done.stderr
    result = json.loads(out.read_text("utf-8"))
    assert result["tokenizer"] == "cl100k_base"
    assert result["outcomes"] == {"on_demand": "success", "full": "success"}
    assert result["servers"]["everything"]["tools"] >= 10
    assert result["servers"]["filesystem"]["tools"] >= 10
    mcp_tools = sum(s["tools"] for s in result["servers"].values())
    (catalog,) = {result["roles"][role]["full"]["tools"] for role in ROLES}  # one catalog
    assert catalog > mcp_tools  # the core groups, both servers' tools, finish
    for role in ROLES:
        figures = result["roles"][role]
        assert figures["on_demand"]["tools"] == figures["without_servers"]["tools"] + 2
        for p in ("openai", "anthropic"):
            assert 0 < figures["on_demand"][p] < figures["full"][p]
            assert figures["ratio"][p] == round(figures["on_demand"][p] / figures["full"][p], 4)
            assert figures["servers_add"][p] == figures["on_demand"][p] - \
                figures["without_servers"][p]
            # what the two servers add on demand (tool_search, call_tool) is under the target
            assert figures["servers_add_ratio"][p] <= TARGET
    assert result["target"]["max_ratio"] == TARGET
    assert result["tools_unchanged"] is True
    assert result["found_and_called"]["on_demand"] and result["found_and_called"]["full"]
    assert result["found_and_called"]["load_answer_tokens"] > 0  # the schemas, once
    spent = result["job_tokens"]
    assert spent["on_demand"]["tools"] < spent["full"]["tools"] < spent["full"]["prompt"]
    assert result["model_calls"]["on_demand"]["DA"] == 3  # load, call, finish
    assert result["model_calls"]["full"]["DA"] == 2  # call, finish
    assert result["model_calls"]["extra"] == 1
