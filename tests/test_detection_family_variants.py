"""Property tests for the five families of issue 21: each family is a class of input, not one sentence.

Every test renders one family's wording with generated variation (wraps at every word boundary and at
several pane widths, every apostrophe and quote form, no-break spaces, extra status rows, popup placements)
and asserts what the detector must conclude: state, kind, the reset to the minute, window, limit_menu.
The cases of tests/fixtures/families/limit-screens.jsonl (sources per case) run in the first test.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controller.agents.registry import detect
from controller.domain.types import Detection, LimitKind, TabState
from harness.screen_variants import (
    APOSTROPHES,
    QUOTES,
    boxed,
    claude,
    codex,
    nbsp,
    width_wraps,
    word_wraps,
)

pytestmark = pytest.mark.unit

UTC = timezone.utc
FAMILIES = Path(__file__).parent / "fixtures" / "families" / "limit-screens.jsonl"
CASES = [json.loads(line) for line in FAMILIES.read_text(encoding="utf-8").splitlines() if line.strip()]
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
FAST = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def expect(result: Detection, state: TabState, kind: LimitKind | None = None, resets: datetime | None = None,
           window: str | None = None, limit_menu: bool = False, screen: str = "") -> None:
    ctx = (result.to_json(), screen)
    assert result.state is state, ctx
    if kind is not None:
        assert result.kind is kind, ctx
    if state is TabState.RATE_LIMITED:
        if resets is None:
            assert result.resets_at is None, ctx
        else:
            assert result.resets_at is not None, ctx
            assert abs((result.resets_at - resets).total_seconds()) <= 60, ctx
        assert result.window == window, ctx
    assert result.limit_menu is limit_menu, ctx


# ------------------------------------------------------------------------------------------- the fixtures

def test_families_fixtures_cover_each_family_twice_with_sources() -> None:
    by_family: dict[str, int] = {}
    for case in CASES:
        by_family[case["family"]] = by_family.get(case["family"], 0) + 1
        assert case["source"] and ("#" in case["source"]), case["id"]
    assert sorted(by_family) == ["F1", "F2", "F3", "F4", "F5"] and min(by_family.values()) >= 2, by_family


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_families_fixture_case(case: dict) -> None:
    e = case["expect"]
    result = detect(case["agent"], case["screen"], at(case["now"]), case["tz"])
    expect(result, TabState(e["state"]), LimitKind(e["kind"]) if e.get("kind") else None,
           at(e["resets_at"]) if e.get("resets_at") else None, e.get("window"), e.get("limit_menu", False),
           f"{case['id']} ({case['source']})")


# ------------------------------------------------------------- family 1: model fallback / overload = working

MODELS = ("Opus", "Opus 4", "Opus 4.1", "Sonnet", "Sonnet 4", "Sonnet 4.5", "Haiku 4.5")
FALLBACK_LINES = (
    "⏺ Claude {m1} limit reached, now using {m2}",
    "  ⎿  {m1} limit almost reached, now using {m2}",
    "  ⎿  {m1} is experiencing high load, falling back to {m2}",
    "⏺ {m1} is experiencing high demand · falling back to {m2}",
    "  ⎿  API Error: 529 Overloaded · Retrying in {n} seconds… (attempt {a}/10)",
    "  ⎿  API Error (529 {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}})"
    " · Retrying in {n} seconds… (attempt {a}/10)",
    "✻ 529 Overloaded · Retrying in {n}s · attempt {a}/10",
)
CONTEXT = ("⏺ Read(src/parser.py)\n  ⎿  Read 214 lines (ctrl+r to expand)",
           "⏺ I'll start by reading the parser module.",
           # an older limit that the fallback supersedes (the turn went on on another model)
           "  ⎿  You've hit your Opus limit · resets 7pm (UTC)")


def fallback_screens(line: str) -> list[str]:
    screens = [line, *word_wraps(line), *width_wraps(line, indent="     ")]
    return screens


@FAST
@given(template=st.sampled_from(FALLBACK_LINES), m1=st.sampled_from(MODELS), m2=st.sampled_from(MODELS),
       n=st.integers(1, 40), a=st.integers(1, 10), context=st.sampled_from(CONTEXT),
       detail=st.booleans(), footer=st.sampled_from(["  ? for shortcuts", "  ⏵⏵ accept edits on · 1 shell running"]))
def test_family1_fallback_and_overload_are_working(template, m1, m2, n, a, context, detail, footer):
    line = template.format(m1=m1, m2=m2, n=n, a=a)
    now = at("2026-05-01T10:00:00Z")
    for body in fallback_screens(line):
        if detail:
            body += "\n  ⎿  If it persists, check https://status.claude.com."
        screen = claude(f"{context}\n\n{body}", footer=footer)
        result = detect("claude-code", screen, now, "UTC")
        expect(result, TabState.WORKING, screen=screen)
        assert result.kind in (LimitKind.WARNING, LimitKind.OVERLOAD), result.to_json()


def test_family1_a_model_limit_without_a_fallback_is_still_a_stop():
    """The guard on the other side: the same words without "now using …" stop the tab (corpus README)."""
    now = at("2026-05-01T10:00:00Z")
    for line in ("⏺ Claude Opus limit reached ∙ resets 7pm", "  ⎿  You've hit your Opus limit · resets 7pm (UTC)",
                 "  ⎿  You've hit your Opus limit · resets 7pm (UTC) · Switch to Sonnet with /model"):
        for body in (line, *word_wraps(line)):
            screen = claude(body)
            expect(detect("claude-code", screen, now, "UTC"), TabState.RATE_LIMITED, LimitKind.USAGE,
                   at("2026-05-01T19:00:00Z"), screen=screen)


# ------------------------------------------------------- families 2 and 3: Codex wording, apostrophes, wraps

CODEX_LINES = (
    "■ You{a}ve hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again at {when}.",
    "■ You{a}ve reached your usage limit. Try again at {when}.",
    "■ You{a}ve hit your usage limit. Upgrade to Plus to continue using Codex (https://chatgpt.com/explore/plus),"
    " or try again at {when}.",
    "■ You{a}ve reached your Codex usage limit. Try again at {when}.",
    "■ You{a}ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
    "https://chatgpt.com/settings/usage to purchase more credits or try again at {when}.",
    "You{a}ve hit your usage limit. Try again at {when}.",
)
CODEX_ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "America/Los_Angeles", "Australia/Adelaide")


def codex_clock(local: datetime) -> str:
    return f"{local.hour % 12 or 12}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'}"


def ordinal(day: int) -> str:
    return f"{day}{'th' if 11 <= day % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"


def codex_when(now: datetime, reset: datetime, zone: str) -> str:
    local, today = reset.astimezone(ZoneInfo(zone)), now.astimezone(ZoneInfo(zone)).date()
    if local.date() == today:
        return codex_clock(local)
    return f"{MONTHS[local.month - 1]} {ordinal(local.day)}, {local.year} {codex_clock(local)}"


@FAST
@given(template=st.sampled_from(CODEX_LINES), apostrophe=st.sampled_from(APOSTROPHES),
       zone=st.sampled_from(CODEX_ZONES), minutes=st.integers(5, 6 * 24 * 60), spaces=st.sampled_from([0, 2, 3]),
       warn=st.booleans())
def test_family2_3_codex_limit_at_any_wrap_and_apostrophe(template, apostrophe, zone, minutes, spaces, warn):
    now = at("2026-06-14T09:00:00Z")
    reset = (now + timedelta(minutes=minutes)).replace(second=0)
    local = reset.astimezone(ZoneInfo(zone))
    assume(local.replace(tzinfo=None).replace(tzinfo=ZoneInfo(zone), fold=1) == local)  # not a repeated hour
    assume(not (local.date() == now.astimezone(ZoneInfo(zone)).date() and reset - now > timedelta(hours=23)))
    line = template.format(a=apostrophe, when=codex_when(now, reset, zone))
    if spaces:
        line = nbsp(line, spaces)
    below = "\n\n  ⚠ 5h limit: only <1% left · resets at 17:19 · /status" if warn else ""
    for body in (line, *word_wraps(line), *width_wraps(line)):
        screen = codex(body + below)
        expect(detect("codex", screen, now, zone), TabState.RATE_LIMITED, LimitKind.USAGE, reset, screen=screen)


# ----------------------------------- family 4: Claude weekly limit with background shells, done timers, 429s

STATUS_ROWS = (
    "● Agent {q0}Review token refresh{q1} failed (error type rate_limit, HTTP 429 Too Many Requests)",
    "● Teammate @lint failed (error type rate_limit, HTTP 429)",
    "● Agent {q0}Implement grouping{q1} failed: Agent terminated early due to an API error (error type"
    " rate_limit, HTTP 429)",
    "✻ Worked for 3m 12s · done 2:15 AM",
    "✻ Cogitated for 1h 3m 4s · done 1:06 AM",
    "✻ Crunched for 41s",
    "● 2 shells running · ↓ to view",
    "  3 background tasks · ↓ to manage",
    "  Tip: Run /usage to see when your limits reset",
)
FOOTERS = (
    "  ? for shortcuts",
    "  ⏵⏵ accept edits on (shift+tab to cycle) · 2 shells running",
    "  ? for shortcuts · 3 background tasks",
    "  ⏵⏵ bypass permissions on · 1 shell running · ↓ to manage",
)
WEEKLY_ZONES = ("UTC", "America/New_York", "Europe/Paris", "Asia/Tokyo", "America/Los_Angeles")


def claude_clock(local: datetime) -> str:
    hour, suffix = local.hour % 12 or 12, "am" if local.hour < 12 else "pm"
    return f"{hour}{suffix}" if local.minute == 0 else f"{hour}:{local.minute:02d}{suffix}"


@FAST
@given(apostrophe=st.sampled_from(APOSTROPHES), quotes=st.sampled_from(QUOTES), zone=st.sampled_from(WEEKLY_ZONES),
       hours=st.integers(26, 6 * 24), comma=st.booleans(),
       rows=st.lists(st.sampled_from(STATUS_ROWS), min_size=1, max_size=4, unique=True),
       footer=st.sampled_from(FOOTERS), boxed_input=st.booleans(), wrap=st.sampled_from([0, 36, 60]))
def test_family4_weekly_limit_with_background_and_finished_rows(apostrophe, quotes, zone, hours, comma, rows, footer,
                                                                 boxed_input, wrap):
    now = at("2026-09-13T06:15:00Z")
    reset = (now + timedelta(hours=hours)).replace(minute=0, second=0)
    local = reset.astimezone(ZoneInfo(zone))
    date = f"{MONTHS[local.month - 1]} {local.day}" + ("," if comma else " at")
    line = f"  ⎿  You{apostrophe}ve hit your weekly limit · resets {date} {claude_clock(local)} ({zone})"
    if wrap:
        line = "\n".join(width_wraps(line.strip(), (wrap,), indent="     "))
    status = "\n\n".join(r.format(q0=quotes[0], q1=quotes[1]) for r in rows)
    screen = claude(f"⏺ Launching the review agents.\n\n{line}\n     /upgrade or /usage-credits to finish what"
                    f" you{apostrophe}re working on.\n\n{status}", footer=footer, boxed=boxed_input)
    expect(detect("claude-code", screen, now, "UTC"), TabState.RATE_LIMITED, LimitKind.USAGE, reset, "weekly",
           screen=screen)


def test_family4_finished_and_background_rows_are_not_activity_without_a_limit():
    """Without a limit line the same rows leave an idle tab idle: "done <time>" and shell counts are not a spinner."""
    screen = claude("⏺ All tests pass.\n\n● 2 shells running · ↓ to view\n\n✻ Worked for 3m 12s · done 2:15 AM",
                    footer="  ⏵⏵ accept edits on (shift+tab to cycle) · 2 shells running")
    assert detect("claude-code", screen, at("2026-09-13T06:15:00Z"), "UTC").state is TabState.IDLE


# --------------------------------------------------------- family 5: Codex spend-cap popup = credits, menu

SPEND_LINES = (
    "Your workspace has reached its spend limit. Ask an admin to raise it.",
    "You hit your spend cap set by the owner of your workspace. Ask an owner to increase your spend cap to continue.",
    "Your organization has reached its spend cap. Ask your admin to raise it.",
    "You{a}ve reached your workspace{a}s spend limit. Ask an admin to raise it.",
    "Your enterprise has hit its monthly spend limit. Contact your admin.",
)
OPTIONS = (("› 1. No", "  2. Yes"), ("› 1. No, stop here", "  2. Yes, continue with credits"))


@FAST
@given(sentence=st.sampled_from(SPEND_LINES), apostrophe=st.sampled_from(APOSTROPHES), glyph=st.sampled_from(["■ ", ""]),
       options=st.sampled_from(OPTIONS), placement=st.sampled_from(["above", "instead", "below"]),
       border=st.booleans(), hint=st.booleans())
def test_family5_spend_cap_popup_is_credits_menu_for_a_human(sentence, apostrophe, glyph, options, placement,
                                                              border, hint):
    text = glyph + sentence.format(a=apostrophe)
    rows = [text, "", "Continue anyway?", *options]
    if hint:
        rows += ["", "Press enter to confirm or esc to go back"]
    popup = boxed(rows) if border else "\n".join(rows)
    if placement == "instead":
        screen = codex(popup, composer=False)
    elif placement == "above":
        screen = codex(popup)
    else:
        screen = codex("", composer=False) + f"\n› Ask Codex to do anything\n\n{popup}\n\n" \
            "  gpt-5.6-sol medium · ~/src/app · Context 71% left"
    result = detect("codex", screen, at("2026-06-26T10:00:00Z"), "UTC")
    expect(result, TabState.RATE_LIMITED, LimitKind.CREDITS, None, None, limit_menu=True, screen=screen)
    assert result.menu_choice is None, result.to_json()  # no "stop and wait" option: nothing is pressed


def test_family5_a_continue_anyway_question_without_a_limit_is_a_question():
    screen = codex("• This will overwrite 3 files.\n\nContinue anyway?\n› 1. No\n  2. Yes\n\n"
                   "Press enter to confirm or esc to go back", composer=False)
    assert detect("codex", screen, at("2026-06-26T10:00:00Z"), "UTC").state is TabState.AWAITING_INPUT


def test_family4_weekly_line_wrapped_at_every_word_boundary():
    now, reset = at("2026-09-13T06:15:00Z"), at("2026-09-15T23:00:00Z")
    line = "  ⎿  You’ve hit your weekly limit · resets Sep 15 at 7pm (America/New_York)"
    rows = ("● Agent “Review token refresh” failed (error type rate_limit, HTTP 429 Too Many Requests)\n\n"
            "✻ Worked for 3m 12s · done 2:15 AM")
    for body in word_wraps(line):
        screen = claude(f"{body}\n\n{rows}", footer="  ⏵⏵ accept edits on (shift+tab to cycle) · 2 shells running")
        expect(detect("claude-code", screen, now, "UTC"), TabState.RATE_LIMITED, LimitKind.USAGE, reset, "weekly",
               screen=screen)


@pytest.mark.parametrize("template", [
    "  ⎿  You{a}ve hit your session limit · resets 5:20pm (UTC)",
    "  ⎿  Claude usage limit reached. Your limit will reset at 5:20pm (UTC).",
    "● Usage limit reached · continuing automatically at 5:20pm · esc or type to cancel",
    "  ⎿  You{a}ve hit your limit · resets 5:20pm (UTC) · /upgrade to keep going",
    "5-hour limit reached ∙ resets 5:20pm",
])
def test_claude_limit_lines_wrapped_anywhere_keep_their_reset(template):
    """The wrap rule is not Codex's alone: Claude Code's limit lines, wrapped at any word boundary or
    width, with any apostrophe form, keep their reset."""
    now = at("2026-05-01T10:00:00Z")
    for apostrophe in APOSTROPHES:
        line = template.format(a=apostrophe)
        for body in (line, *word_wraps(line), *width_wraps(line, indent="     ")):
            result = detect("claude-code", claude(body), now, "UTC")
            assert result.state is TabState.RATE_LIMITED, (result.to_json(), body)
            assert result.resets_at == at("2026-05-01T17:20:00Z"), (result.to_json(), body)
