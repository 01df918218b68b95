"""``llm.api_base`` against a real OpenAI-compatible server on loopback: llama-cpp-python's own
server (``python -m llama_cpp.server``, the ``server`` extra's starlette-context is a dev
dependency) serving the packaged SmolLM2-135M GGUF, started and stopped by the test. One real
completion comes back through build_llm's hosted path (litellm's ``openai/`` provider)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.bench.servers import free_port
from gliding.core.messages import Completion, Message
from gliding.daemon.models import build_llm
from gliding.llm.local import packaged_model_path
from gliding.llm.port import LLMRequest
from gliding.testing.servers import stop_process
from tests.settings_effects.effects_support import settings_from

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

START_TIMEOUT_S = 90.0


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra")
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_model_path()),
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", "2",
         "--verbose", "False"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: "
                                   f"{(tmp_path / 'server.log').read_text()[-2000:]}")
            try:
                with opener.open(f"{base}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer in {START_TIMEOUT_S} s")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(process)
        log.close()


def test_api_base_reaches_a_real_openai_compatible_server(
        llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("SMOL_KEY", "not-checked-by-llama-server")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "OPENAI_API_BASE",
                 "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = settings_from(tmp_path, {"GLIDING_LLM__API_BASE": llama_server,
                                        "GLIDING_LLM__API_KEY_ENV": "SMOL_KEY",
                                        "GLIDING_LLM__TIMEOUT_S": "60"})
    llm = build_llm("openai/smollm2", settings)

    async def main() -> Completion:
        return await llm.complete(LLMRequest(
            (Message("system", "You are a friendly assistant."),
             Message("user", "Say hello in three words.")), max_tokens=12, temperature=0.0))

    completion = anyio.run(main)

    assert completion.model == "openai/smollm2"
    assert completion.message.content.strip()
    assert completion.usage.completion_tokens > 0
    assert completion.usage.prompt_tokens > 5
