"""The local model without the ``local`` extra: refused before a job starts, by ``gliding run``
(exit 2, nothing written) and by the daemon's API (400, nothing queued), naming the extra and
``llm.model``. "Not installed" is simulated with ``sys.modules[name] = None``, which is what
``importlib.util.find_spec`` reports for a package that is absent; the packaged model by
pointing ``PACKAGED_MODEL_DIST`` at a distribution that does not exist."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import LocalModelSettings
from gliding.daemon.api import build_app
from gliding.daemon.models import build_llm
from gliding.errors import UsageError
from gliding.llm import local
from gliding.llm.local import refuse_uninstalled
from tests.cli.cli_support import invoke
from tests.daemon.daemon_support import TASK, serving

SAID = "install gliding[local] or set llm.model"
TOKEN = "t0ken-for-tests"


@pytest.fixture
def no_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)


@pytest.fixture
def no_packaged_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "PACKAGED_MODEL_DIST", "gliding-test-no-such-distribution")


def test_without_llama_cpp_the_local_model_is_a_usage_error(no_llama: None) -> None:
    for path in (None, Path("/models/any.gguf")):
        with pytest.raises(UsageError) as caught:
            refuse_uninstalled(LocalModelSettings(), path)
        assert SAID in caught.value.message and "llama-cpp-python" in caught.value.message
        assert caught.value.exit_code == 2
        assert caught.value.hint is not None
        assert "pip install 'gliding[local]'" in caught.value.hint


def test_without_the_packaged_model_only_a_named_gguf_file_is_allowed(
        no_packaged_model: None) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed here (the local extra)")
    with pytest.raises(UsageError) as caught:
        refuse_uninstalled(LocalModelSettings())
    assert SAID in caught.value.message and local.PACKAGED_MODEL_DIST in caught.value.message
    refuse_uninstalled(LocalModelSettings(), Path("/models/any.gguf"))  # no packaged model needed
    refuse_uninstalled(LocalModelSettings(model_path="/models/any.gguf"))


def test_build_llm_refuses_local_and_takes_other_models(no_llama: None,
                                                        tmp_path: Path) -> None:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    for model in ("local", "local:/models/any.gguf"):
        with pytest.raises(UsageError, match=r"install gliding\[local\] or set llm\.model"):
            build_llm(model, settings)
    (tmp_path / "r.yaml").write_text("DA:\n  - finish: {summary: done}\n", encoding="utf-8")
    scripted = f"scripted:{tmp_path / 'r.yaml'}"
    assert build_llm(scripted, settings).name == scripted


def test_gliding_run_without_a_model_says_what_to_install_and_exits_2(
        no_llama: None, tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("goal: Write hello.txt\n", encoding="utf-8")

    result = invoke(["run", "task.yaml", "--data-dir", "data"], cwd=tmp_path)

    assert result.code == 2, result
    assert SAID in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "jobs").exists()  # refused before anything was written
    assert not (tmp_path / "workspace").exists()


def test_the_daemon_refuses_the_submission_with_400(no_llama: None, tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as service:
            app = await anyio.to_thread.run_sync(build_app, service, TOKEN)  # CPU: off the loop
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as client:
                auth = {"Authorization": f"Bearer {TOKEN}"}
                task = TASK.format(workspace=tmp_path / "workspace")
                refused = await client.post("/v1/jobs", headers=auth,
                                            json={"task": task, "name": "t.yaml"})
                listed = await client.get("/v1/jobs", headers=auth)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "usage"
        assert SAID in refused.json()["error"]["message"]
        assert listed.json()["total"] == 0

    anyio.run(main)
