"""The one Event poster (controller/events.py) and the one redactor (controller/redact.py): Events
are posted on change, deduplicated per (object, type, reason, message) with a count, the webhook and
the metric follow the same rule, and every message is masked BEFORE it is cut."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from controller import metrics
from controller.events import ObjectRef, Recorder, event_name
from controller.redact import EVENT_MESSAGE_MAX, bounded, redact, url_for_message

pytestmark = pytest.mark.unit

BOX = ObjectRef("agentbox.dev/v1alpha1", "AgentBox", "ns", "box-a", "uid-1")
OTHER = ObjectRef("agentbox.dev/v1alpha1", "AgentBox", "ns", "box-b", "uid-2")


class Store:
    """An in-memory Event store that behaves like the API server (409 on a taken name)."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    async def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        self.calls.append(("create", body["metadata"]["name"]))
        if body["metadata"]["name"] in self.events:
            return False
        self.events[body["metadata"]["name"]] = dict(body)
        return True

    async def read_event_count(self, namespace: str, name: str) -> int | None:
        self.calls.append(("get", name))
        ev = self.events.get(name)
        return None if ev is None else ev["count"]

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.calls.append(("patch", name))
        self.events[name].update(patch)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


class Notifier:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []

    def schedule(self, kind: str, namespace: str, box: str, message: str) -> None:
        self.sent.append((kind, namespace, box, message))


async def drain(rec: Recorder) -> None:
    if rec._queue is not None:
        await rec._queue.join()


async def test_a_repeated_event_is_one_event_with_a_count_and_one_webhook_call():
    store, clock, hook = Store(), Clock(), Notifier()
    rec = Recorder(store, hook, clock, refresh_s=0.05, quiet_s=600)
    before = metrics.EVENTS.labels("Warning", "PromptNotEmpty", "repeated")._value.get()
    assert rec.post(BOX, "Warning", "PromptNotEmpty", "Tab main: half-typed line") is True
    for _ in range(1550):
        clock.now += timedelta(milliseconds=20)
        assert rec.post(BOX, "Warning", "PromptNotEmpty", "Tab main: half-typed line") is False
    await drain(rec)
    assert [c for c, _ in store.calls] == ["create"], "repeats cost no API call within the refresh period"
    await asyncio.sleep(0.1)  # the pending count is flushed when the refresh period ends
    await drain(rec)
    (event,) = store.events.values()
    assert event["count"] == 1551 and event["type"] == "Warning" and event["reason"] == "PromptNotEmpty"
    assert event["involvedObject"] == {"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentBox",
                                       "namespace": "ns", "name": "box-a", "uid": "uid-1"}
    assert event["lastTimestamp"] == clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert len(hook.sent) == 1 and hook.sent[0][0] == "needs_attention"
    assert metrics.EVENTS.labels("Warning", "PromptNotEmpty", "repeated")._value.get() - before == 1550
    await rec.aclose()


async def test_distinct_objects_reasons_and_messages_are_distinct_events():
    store, clock = Store(), Clock()
    rec = Recorder(store, None, clock)
    for ref in (BOX, OTHER):
        for reason, msg in (("InvalidPattern", "spec.detection.patterns[0].regex: bad"),
                            ("InvalidPattern", "spec.detection.patterns[1].regex: bad"),
                            ("Stalled", "spec.detection.patterns[0].regex: bad")):
            for _ in range(3):
                rec.post(ref, "Warning", reason, msg)
    await drain(rec)
    assert len(store.events) == 6
    assert rec.count(BOX, "InvalidPattern") == 6
    await rec.aclose()
    assert all(e["count"] == 3 for e in store.events.values()), "aclose writes the pending counts"


async def test_a_quiet_event_is_announced_again_and_a_restart_continues_the_count():
    store, clock, hook = Store(), Clock(), Notifier()
    rec = Recorder(store, hook, clock, refresh_s=60, quiet_s=600)
    rec.post(BOX, "Warning", "Stalled", "Tab main: no progress")
    clock.now += timedelta(seconds=601)
    assert rec.post(BOX, "Warning", "Stalled", "Tab main: no progress") is True
    await drain(rec)
    assert len(hook.sent) == 2
    (event,) = store.events.values()
    assert event["count"] == 2
    await rec.aclose()

    # A restarted controller posts the same Event: the stored one is counted on, not duplicated.
    again = Recorder(store, None, clock)
    again.post(BOX, "Warning", "Stalled", "Tab main: no progress")
    await drain(again)
    assert len(store.events) == 1 and next(iter(store.events.values()))["count"] == 3
    await again.aclose()


async def test_forget_and_the_memory_bound():
    rec = Recorder(Store(), None, Clock(), max_events=50)
    for i in range(200):
        rec.post(BOX, "Normal", "Resumed", f"Tab t{i}: sent continue")
    assert len(rec._seen) == 50
    rec.post(OTHER, "Normal", "Resumed", "x")
    rec.forget(BOX)
    assert [k[0] for k in rec._seen] == ["uid-2"]
    await rec.aclose()


async def test_messages_are_redacted_then_bounded_before_they_are_posted_or_sent():
    store, hook = Store(), Notifier()
    rec = Recorder(store, hook, Clock())
    token = "sk-ant-oat01-" + "Q" * 40
    # The token straddles the Event length limit: cut first, the fragment would escape the patterns.
    message = "x" * (EVENT_MESSAGE_MAX - 20) + " " + token
    rec.post(BOX, "Warning", "Stalled", message)
    await drain(rec)
    (event,) = store.events.values()
    assert len(event["message"]) <= EVENT_MESSAGE_MAX
    assert "sk-ant" not in event["message"] and "QQQQ" not in event["message"]
    assert "sk-ant" not in hook.sent[0][3]
    await rec.aclose()


def test_event_names_are_stable_valid_and_distinct():
    a = event_name(BOX, "Warning", "Stalled", "m")
    assert a == event_name(BOX, "Warning", "Stalled", "m")
    assert a != event_name(BOX, "Warning", "Stalled", "m2") != event_name(OTHER, "Warning", "Stalled", "m")
    long_ref = ObjectRef("v1", "AgentBox", "ns", "b" * 253, "u")
    assert len(event_name(long_ref, "Normal", "R", "m")) <= 253


@pytest.mark.parametrize("text,secret", [
    ("sk-ant-oat01-AbCdEf0123456789AbCdEf0123456789", "oat01-AbCd"),   # Claude OAuth access token
    ("sk-ant-ort01-zz", "ort01-zz"),                                  # a short (cut-off) refresh token
    ("sk-proj-abc", "proj-abc"),                                      # a short API key
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx.sig", "eyJ"),                 # a JWT
    ("eyJhbGciOi", "eyJ"),                                            # a JWT fragment
    ("Bearer abc.def", "abc.def"),
    ("access_token=shorty", "shorty"),
    ('"refresh_token": "rt-1"', "rt-1"),
    ("https://hooks.slack.com/services/T0/B0/XYZ", "hooks.slack"),
    ("https://api.example.com/cb?code=abc&state=1", "code=abc"),
    ("Zx8Kq2LmP9rT4vW7yB3nC6", "Zx8Kq2"),                             # 22 opaque characters, mixed classes
    ("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=", "aGVsbG8"),  # base64
])
def test_the_redactor_masks_tokens_long_and_short(text: str, secret: str):
    out = redact(f"before {text} after")
    assert out.startswith("before ") and out.endswith(" after"), out
    assert secret not in out, out
    assert "[redacted]" in out


@pytest.mark.parametrize("text", [
    "Tab main: usage limit (resets 2026-03-01T17:00:00Z); resuming then",
    "Switched from claude-a to claude-b: 5-hour window at 100%",
    "a-very-long-box-name-with-many-words-in-it-1234 token expired",
    "spec.template.spec.containers[0].name is required",
    "Tab main: restarted with 'codex resume 0199a1b2-0000-4000-8000-000000000000' and sent 'continue'",
    "The limit came back after 3 resumes; a human should look",
    "ResumeNotTakingEffect exit code: 1",
])
def test_the_redactor_keeps_ordinary_messages(text: str):
    assert redact(text) == text


def test_bounded_masks_before_cutting():
    token = "sk-ant-oat01-" + "A1b2" * 20
    text = "last lines: " + token
    cut_at = len("last lines: ") + 8   # a cut inside the token leaves "sk-ant-o"
    out = bounded(text, cut_at + 3)
    assert "sk-ant" not in out and "A1b2" not in out
    assert bounded("short", 10) == "short"
    assert len(bounded("y " * 2500, 100)) == 100


def test_log_records_are_redacted_and_bounded(caplog: pytest.LogCaptureFixture):
    import logging

    from controller.redact import LOG_MESSAGE_MAX, RedactingFilter

    caplog.handler.addFilter(RedactingFilter())
    try:
        log = logging.getLogger("agentbox.test")
        log.warning("refresh refused: %s", '{"error": "invalid_grant", "refresh_token": "sk-ant-ort01-abc"}')
        log.warning("screen: %s", "x " * 5000)
    finally:
        caplog.handler.filters.clear()
    assert "sk-ant-ort01" not in caplog.text and "invalid_grant" in caplog.text
    assert len(caplog.records[1].getMessage()) <= LOG_MESSAGE_MAX



async def test_new_events_of_one_object_are_rate_limited_and_others_are_not():
    """A box whose messages change every pass (tab names it renames) gets a burst of new Events,
    then one per `refill_s`; another object's Events and webhook calls are not held back."""
    store, hook, clock = Store(), Notifier(), Clock()
    rec = Recorder(store, hook, clock, burst=5, refill_s=10.0)
    posted = [rec.post(BOX, "Normal", "Resumed", f"Tab n{i}: sent continue") for i in range(20)]
    assert posted == [True] * 5 + [False] * 15
    assert rec.post(OTHER, "Normal", "Resumed", "Tab main: sent continue")
    clock.now += timedelta(seconds=25)  # two tokens back
    assert [rec.post(BOX, "Normal", "Resumed", f"Tab m{i}: sent continue") for i in range(3)] == [True, True, False]
    await drain(rec)
    assert len(store.events) == 8 and len([s for s in hook.sent if s[2] == "box-a"]) == 7
    await rec.aclose()


@pytest.mark.parametrize("url, shown", [
    ("https://user:s3cret@api.example.com:8443/v1/oauth/token?code=abc#frag", "api.example.com:8443/v1/oauth/token"),
    ("http://127.0.0.1:9/api/oauth/usage?access_token=sk-ant-oat01-xyz", "127.0.0.1:9/api/oauth/usage"),
    ("https://chatgpt.com/backend-api/wham/usage", "chatgpt.com/backend-api/wham/usage"),
    ("https://host:99999/p", "host/p"),  # an impossible port is dropped, not raised
    ("not a url", "?not a url"),
])
def test_urls_in_messages_keep_host_port_and_path_only(url: str, shown: str):
    """The one URL sanitizer of the providers' messages (usage reads, refreshes, identity checks)."""
    assert url_for_message(url) == shown
