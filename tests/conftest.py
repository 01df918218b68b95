"""Suite-wide guardrails: no test reaches the Hugging Face hub, and no test leaves structlog
configured for the next one.

pytest's own settings (markers, warnings as errors, the per-test timeout) are in pyproject.toml.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import structlog

# Before anything imports huggingface_hub: the embedding model loads from the packaged files even
# under a bare `pytest` (scripts/test.sh exports it too). No test talks to the internet.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """A test that configures structlog (directly or through the CLI) does so for itself only."""
    saved = structlog.get_config() if structlog.is_configured() else None
    yield
    if (structlog.get_config() if structlog.is_configured() else None) != saved:
        structlog.reset_defaults()
        if saved is not None:
            structlog.configure(**saved)
