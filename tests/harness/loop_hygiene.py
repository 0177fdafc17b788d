"""Work around pytest-asyncio 1.5.0 leaking an event loop under ``-W error``.

Before each async test, pytest-asyncio saves the "current" loop with ``asyncio.get_event_loop()``, which in
the main thread *creates* a loop when none is set, restores it afterwards and never closes it.  Once that
loop is garbage-collected (typically during a later test), ``ResourceWarning: unclosed event loop`` becomes
an error in whichever test happens to run (reproduced with one sync and one async empty test; upstream:
pytest-dev/pytest-asyncio#724, PR #1430).  Installing one explicit loop for the session, closed at the end,
gives pytest-asyncio something to save and restore without creating anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_placeholder_loop() -> Iterator[None]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()
