"""The webhook Notifier against a local aiohttp server on loopback: bodies (generic, Slack), retries on
5xx / 429 / connection errors, no retry on other 4xx, the URL file, kinds filter, no secrets sent."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from datetime import datetime, timezone

import pytest
import pytest_asyncio
from aiohttp import web

from controller import metrics
from controller.notify import KINDS, Notifier, redact

pytestmark = pytest.mark.component

FIXED = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


class Hook:
    """A webhook receiver: answers with the scripted statuses in order (then 200), records each body."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.bodies: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(json.loads(await request.read()))
        self.headers.append(dict(request.headers))
        status, headers = self.script.pop(0) if self.script else (200, {})
        return web.Response(status=status, text="ok" if status < 300 else "no", headers=headers)


@pytest_asyncio.fixture
async def hook() -> AsyncIterator[Hook]:
    h = Hook()
    app = web.Application()
    app.router.add_post("/hook/{secret}", h.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    h.url = f"http://127.0.0.1:{port}/hook/T0-S3CR3T"
    yield h
    await runner.cleanup()


def notifier(url, **kw) -> Notifier:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 2.0)
    return Notifier(url=url, clock=lambda: FIXED, **kw)


def count(kind: str, result: str) -> float:
    return metrics.REGISTRY.get_sample_value("agentbox_notifications_total", {"kind": kind, "result": result}) or 0.0


async def test_generic_body(hook: Hook):
    n = notifier(hook.url, cluster="kind-dev")
    try:
        assert await n.notify("resume", "team-a", "box-1", "Tab main: continue sent after the 5-hour limit reset")
    finally:
        await n.aclose()
    assert hook.bodies == [{
        "source": "agentbox-controller", "version": hook.bodies[0]["version"], "kind": "resume",
        "namespace": "team-a", "box": "box-1", "message": "Tab main: continue sent after the 5-hour limit reset",
        "time": "2026-03-01T12:00:00Z", "cluster": "kind-dev"}]
    assert hook.headers[0]["Content-Type"] == "application/json"
    assert hook.headers[0]["User-Agent"].startswith("agentbox-controller/")


async def test_slack_body_for_every_kind(hook: Hook):
    n = notifier(hook.url, style="slack")
    try:
        for kind in KINDS:
            assert await n.notify(kind, "team-a", "box-1", f"{kind} happened")
    finally:
        await n.aclose()
    assert [set(b) for b in hook.bodies] == [{"text"}] * len(KINDS)
    assert hook.bodies[1]["text"] == ":twisted_rightwards_arrows: *Switched subscription* `team-a/box-1`: switch happened"
    assert "Needs attention" in hook.bodies[3]["text"]


async def test_retries_5xx_then_delivers(hook: Hook):
    hook.script = [(500, {}), (503, {})]
    before = count("switch", "ok")
    n = notifier(hook.url, attempts=4)
    try:
        assert await n.notify("switch", "ns", "b", "Switched from a to b")
    finally:
        await n.aclose()
    assert len(hook.bodies) == 3
    assert count("switch", "ok") == before + 1


async def test_429_honours_retry_after(hook: Hook):
    hook.script = [(429, {"Retry-After": "0.3"})]
    n = notifier(hook.url, attempts=2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        assert await n.notify("reserve", "ns", "b", "stopped at 80 %")
    finally:
        await n.aclose()
    assert loop.time() - start >= 0.25
    assert len(hook.bodies) == 2


async def test_other_4xx_is_final_and_reported_not_raised(hook: Hook):
    hook.script = [(404, {})]
    before = count("needs_attention", "error")
    n = notifier(hook.url, attempts=5)
    try:
        assert await n.notify("needs_attention", "ns", "b", "stalled") is False
    finally:
        await n.aclose()
    assert len(hook.bodies) == 1
    assert count("needs_attention", "error") == before + 1


async def test_gives_up_after_the_attempts(hook: Hook):
    hook.script = [(502, {})] * 10
    n = notifier(hook.url, attempts=3)
    try:
        assert await n.notify("resume", "ns", "b", "x") is False
    finally:
        await n.aclose()
    assert len(hook.bodies) == 3


async def test_connection_refused_is_retried_then_false_and_the_url_is_not_logged(caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook/T0-S3CR3T"
    n = notifier(url, attempts=2)
    try:
        assert await n.notify("resume", "ns", "b", "x") is False
    finally:
        await n.aclose()
    assert "S3CR3T" not in caplog.text
    assert "failed" in caplog.text


async def test_url_file_is_read_on_every_send(hook: Hook, tmp_path):
    path = tmp_path / "url"
    n = Notifier.from_env({"AGENTBOX_WEBHOOK_URL_FILE": str(path), "AGENTBOX_WEBHOOK_STYLE": "slack"},
                          backoff_s=0.01)
    try:
        assert not n.enabled
        assert await n.notify("resume", "ns", "b", "x") is False
        path.write_text(hook.url + "\n")
        assert n.enabled
        assert await n.notify("resume", "ns", "b", "x")
    finally:
        await n.aclose()
    assert len(hook.bodies) == 1 and set(hook.bodies[0]) == {"text"}


async def test_kinds_filter_and_schedule(hook: Hook):
    n = Notifier.from_env({"AGENTBOX_WEBHOOK_URL": hook.url, "AGENTBOX_WEBHOOK_KINDS": "needs_attention, switch"},
                          backoff_s=0.01)
    try:
        assert n.schedule("resume", "ns", "b", "x") is None
        task = n.schedule("needs_attention", "ns", "b", "stalled")
        assert task is not None
        await n.aclose()  # waits for the scheduled one
        assert task.result() is True
    finally:
        await n.aclose()
    assert [b["kind"] for b in hook.bodies] == ["needs_attention"]


def test_from_env_refuses_unknown_style_and_kind():
    with pytest.raises(ValueError, match="STYLE"):
        Notifier.from_env({"AGENTBOX_WEBHOOK_STYLE": "teams"})
    with pytest.raises(ValueError, match="KINDS"):
        Notifier.from_env({"AGENTBOX_WEBHOOK_KINDS": "resume,limit"})
    assert not Notifier.from_env({}).enabled


async def test_tokens_never_leave_in_a_body(hook: Hook):
    message = ("login refused: Bearer sk-ant-oat01-AbCdEf0123456789 access_token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx.sig "
               "{\"refresh_token\": \"rt-123\"} via https://hooks.slack.com/services/T0/B0/XYZ")
    n = notifier(hook.url)
    try:
        assert await n.notify("needs_attention", "ns", "b", message)
    finally:
        await n.aclose()
    sent = json.dumps(hook.bodies[0])
    for secret in ("sk-ant-oat01", "AbCdEf0123456789", "eyJhbGci", "rt-123", "hooks.slack.com", "XYZ"):
        assert secret not in sent, secret
    assert "login refused" in sent


@pytest.mark.parametrize("text", ["Tab main: usage limit (resets 2026-03-01T17:00:00Z); resuming then",
                                  "Switched from claude-a to claude-b: 5-hour window at 100%",
                                  "a-very-long-box-name-with-many-words-in-it-1234 token expired"])
def test_redact_keeps_ordinary_messages(text: str):
    assert redact(text) == text
