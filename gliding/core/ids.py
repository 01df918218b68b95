"""Identifiers: job ids (sortable by time) and tool-call ids."""

from __future__ import annotations

import secrets
import time


def new_job_id(now: float | None = None) -> str:
    """A job id like ``20261129-113758-a1b2c3``: sorts by start time, unique enough per machine."""
    t = time.gmtime(now if now is not None else time.time())
    return time.strftime("%Y%m%d-%H%M%S", t) + "-" + secrets.token_hex(3)


def new_call_id(role: str, turn: int, index: int) -> str:
    """A tool-call id unique within a job: role, turn and the call's index in that turn."""
    return f"{role}-{turn}-{index}"
