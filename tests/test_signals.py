"""Layered detection: structured data first, then line patterns (pure)."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from controller.domain.signals import last_lines, merge, redact
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window
from controller.agents.usage_files import parse_statusline, parse_token_count
from controller.domain.usagejson import UsageParseError

pytestmark = pytest.mark.unit
NOW = datetime(2026, 9, 12, 14, 0, tzinfo=timezone.utc)
RESET = datetime(2026, 9, 12, 18, 0, 37, tzinfo=timezone.utc)
FULL = Usage({"five_hour": Window("five_hour", 100.0, RESET)}, read_at=NOW)


def test_exact_structured_reset_replaces_the_minute_rounded_line():
    det = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, RESET.replace(second=0), None,
                    evidence="You've hit your limit · resets 6pm (UTC)", detected_by="pattern:claude-code/hit")
    out = merge(det, FULL, "statusline", NOW)
    assert out.resets_at == RESET and out.window == "five_hour"
    assert out.detected_by == "structured:statusline+pattern:claude-code/hit"


def test_idle_tab_of_an_exhausted_account_is_rate_limited_without_a_line():
    out = merge(Detection(TabState.IDLE, prompt_text=""), FULL, "statusline", NOW)
    assert out.state == TabState.RATE_LIMITED and out.resets_at == RESET
    assert out.detected_by == "structured:statusline" and out.prompt_text == ""


@pytest.mark.parametrize("det", [
    Detection(TabState.WORKING),
    Detection(TabState.AWAITING_INPUT),
])
def test_working_and_prompts_are_left_as_the_screen_says(det):
    assert merge(det, FULL, "statusline", NOW).state == det.state


def test_a_warning_that_ended_the_turn_is_a_limit_when_the_window_is_full():
    """The ~95 % notice ends the turn without a banner (field-pitfalls §2): only structured data catches it."""
    det = Detection(TabState.IDLE, kind=LimitKind.WARNING, evidence="Approaching your 5-hour usage limit")
    assert merge(det, FULL, "statusline", NOW).state == TabState.RATE_LIMITED


def test_past_reset_or_below_100_is_not_a_limit():
    past = Usage({"five_hour": Window("five_hour", 100.0, NOW - timedelta(seconds=1))}, read_at=NOW)
    assert merge(Detection(TabState.IDLE), past, "x", NOW).state == TabState.IDLE
    assert merge(Detection(TabState.IDLE), Usage({"five_hour": Window("five_hour", 99.0, RESET)}), "x", NOW).state \
        == TabState.IDLE
    assert merge(Detection(TabState.IDLE), None, "x", NOW).state == TabState.IDLE


def test_statusline_payload():
    usage = parse_statusline({"model": {"id": "x"}, "rate_limits": {
        "five_hour": {"used_percentage": 100, "resets_at": int(RESET.timestamp())},
        "seven_day": {"used_percentage": 42.5, "resets_at": int(RESET.timestamp()) + 86400}}}, NOW)
    assert usage.windows["five_hour"].utilization == 100.0 and usage.windows["five_hour"].resets_at == RESET
    assert usage.windows["weekly"].utilization == 42.5
    assert parse_statusline({"session_id": "s"}, NOW).windows == {}
    with pytest.raises(UsageParseError, match="rate_limits.five_hour.used_percentage"):
        parse_statusline({"rate_limits": {"five_hour": {"used_percentage": "lots"}}}, NOW)


def test_every_token_count_payload_of_the_corpus_feeds_the_merge():
    corpus = Path(__file__).parent / "fixtures" / "corpus" / "usage-payloads.jsonl"
    cases = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    for case in (c for c in cases if c["kind"] == "token_count"):
        usage = parse_token_count(case["payload"])
        assert set(usage.windows) == set(case["expect"])


def test_redaction_of_token_like_text():
    text = "key sk-ant-oat01-abcdefghijklmnop and eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig ok"
    out = redact(text)
    assert "sk-ant" not in out and "eyJ" not in out and out.endswith("ok")
    assert last_lines("a\n\nb\nc", 2) == "b | c"


def test_claude_transcript_usage_limit_entry_of_the_real_cli():
    """Claude Code 2.1.328 records the usage-limit 429 in its transcript with the rate_limit_info of
    stream-json's rate_limit_event (captured from the real CLI against the provider emulator)."""
    from controller.agents.usage_files import transcript_usage

    path = Path(__file__).parent / "fixtures" / "real-transcripts" / "claude-2.1.328-usage-limit.jsonl"
    line = path.read_text().splitlines()[0]
    usage = transcript_usage(line, NOW)
    info = json.loads(line)["apiErrorParams"]["rate_limit_info"]
    window = usage.windows["five_hour"]
    assert window.utilization == 100.0 and int(window.resets_at.timestamp()) == info["resetsAt"]
    assert transcript_usage('{"isApiErrorMessage":true,"error":"unknown"}', NOW) is None
    assert transcript_usage("not json", NOW) is None
