"""Fixtures of the bus tests: a real mosquitto broker, started by the tests themselves.

``broker`` is one mosquitto for the whole session (the contract tests share it: each test uses
its own connections, and clean sessions keep nothing between tests); ``own_broker`` is a fresh
one for a test that stops and restarts it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gliding.testing.servers import Mosquitto, mosquitto


@pytest.fixture(scope="session")
def broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server


@pytest.fixture
def own_broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server
