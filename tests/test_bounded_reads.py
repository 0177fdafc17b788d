"""Bounded reads of what comes out of a box (issue 9, finding 6): structured files are cut in the box
and refused above `STRUCTURED_MAX`, whatever the box's own `head` does; the exec layer's own bound is
tested against the emulator in tests/test_kube_emulator.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from controller.service.boxfiles import STRUCTURED_MAX, read_structured

pytestmark = pytest.mark.unit

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class Res:
    stdout: str
    stderr: str = ""
    rc: int = 0


def box_printing(text: str):
    """A box whose `sh` ignores the `head -c` it is given and prints `text` for every read."""
    calls: list[list[str]] = []

    async def exec_fn(argv: list[str], stdin: str | None = None) -> Res:
        calls.append(argv)
        return Res(text)
    return exec_fn, calls


STATUSLINE = json.dumps({"rate_limits": {"five_hour": {"used_percentage": 100, "resets_at": 1782914400}}})
TOKEN_COUNT = json.dumps({"type": "event_msg", "payload": {"type": "token_count", "rate_limits": {
    "primary": {"used_percent": 100.0, "window_minutes": 300, "resets_at": 1782914400}}}})


@pytest.mark.parametrize("agent,good", [
    ("claude-code", f"1782900000\n{STATUSLINE}"),
    ("codex", TOKEN_COUNT),
])
async def test_a_huge_structured_file_counts_as_no_data(agent: str, good: str):
    exec_fn, calls = box_printing(good)
    usage, _ = await read_structured(exec_fn, agent, NOW)
    assert usage is not None and usage.windows, "the well-sized file is read"
    pad = " " * (STRUCTURED_MAX + 1)
    huge = good[:-1] + pad + good[-1]  # still valid JSON, one byte over the bound
    exec_fn, calls = box_printing(huge)
    usage, _ = await read_structured(exec_fn, agent, NOW)
    assert usage is None
    assert all("head -c 65537" in " ".join(argv) for argv in calls), "every read is cut in the box too"


class _Trickle:
    """A response body that arrives a few bytes per read (as over a slow or chunked connection)."""

    def __init__(self, body: bytes, per_read: int = 3) -> None:
        self.body, self.per_read = body, per_read

    async def read(self, n: int = -1) -> bytes:
        take = min(n, self.per_read) if n >= 0 else len(self.body)
        out, self.body = self.body[:take], self.body[take:]
        return out


@pytest.mark.parametrize("size,limit,want", [(100, 1000, 100), (1000, 1000, 1000), (5000, 1000, 1001), (0, 10, 0)])
async def test_provider_answers_are_read_whole_up_to_the_cap(size: int, limit: int, want: int):
    """`StreamReader.read(n)` returns fewer than n bytes whenever the body comes in pieces: a token
    answer cut at its first chunk would be "not JSON" (a spent refresh token counted lost). The capped
    read goes on to the cap, and stops one byte past it."""
    from controller.providers.bounded import read_capped

    body = bytes(range(256)) * (size // 256 + 1)
    got = await read_capped(_Trickle(body[:size]), limit)
    assert len(got) == want and got == body[:want]
