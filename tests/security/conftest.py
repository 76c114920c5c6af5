"""Fixtures shared by the security tests."""

from __future__ import annotations

import pytest

from tests.security._api_harness import ApiServer, InMemoryNode


@pytest.fixture
def api():
    made: list[ApiServer] = []

    def make(**kw) -> ApiServer:
        server = ApiServer(InMemoryNode(**kw))
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()
