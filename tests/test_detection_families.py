"""Detection by families (issue 13): wordings the corpus does not hold yet, read by the same families.

Each case is a wording a release or a report showed (or a variant the family must cover); none of
them needs a sentence-specific pattern. The time grammar is covered in tests/test_timeparse.py.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from controller.agents.registry import detect
from controller.domain.types import LimitKind, TabState

pytestmark = pytest.mark.unit

RULE = "─" * 66


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def claude(body: str, footer: str = "  ? for shortcuts", prompt: str = "") -> str:
    """A Claude Code 2.1 screen: an echoed prompt, ``body``, the ruled input, ``footer`` below it."""
    return f"❯ Draft the release notes\n{body}\n\n{RULE}\n❯ {prompt}\n{RULE}\n{footer}"


def codex(body: str, composer: str = "Ask Codex to do anything") -> str:
    return (f"› Fix the failing test\n\n• Ran go test ./...\n  └ --- FAIL: TestParseHeader (0.00s)\n\n{body}\n\n"
            f"› {composer}\n\n  gpt-5.6-sol medium · ~/src/app · Context 71% left")


def check(result, state, kind=None, resets=None, window=None, auto=False):
    ctx = result.to_json()
    assert result.state is state, ctx
    if kind is not None:
        assert result.kind is kind, ctx
    if resets is None:
        assert result.resets_at is None, ctx
    elif resets != "any":
        assert result.resets_at is not None, ctx
        assert abs((result.resets_at - at(resets)).total_seconds()) <= 60, ctx
    assert result.window == window, ctx
    assert result.auto_continue is auto, ctx


# ------------------------------------------------------------------------------ Claude Code 2.1.332

def test_claude_2_1_332_set_to_continue_automatically_is_the_native_wait():
    screen = claude("  ⎿  You've hit your 5-hour limit · resets 7:13am (UTC)\n"
                    "● Usage limit reached · set to continue automatically at 7:13am",
                    footer="  ⚠ Usage limit reached · limit resets 7:13am\n"
                           "    Continuing automatically at 7:13am · Esc to cancel\n  ? for shortcuts")
    result = detect("claude-code", screen, at("2026-12-01T06:50:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-01T07:13:00Z", "five_hour", auto=True)
    assert result.detected_by == "pattern:claude-code/native-wait"


def test_native_wait_in_the_footer_alone_is_recognised():
    """The line above the prompt may change wording or scroll away; the footer below the prompt
    (same wording in 2.1.328 and 2.1.332) still announces the wait."""
    screen = claude("  ⎿  You've hit your 5-hour limit · resets 7:13am (UTC)",
                    footer="  ⚠ Usage limit reached · limit resets 7:13am\n"
                           "    Continuing automatically at 7:13am · Esc to cancel\n  ? for shortcuts")
    check(detect("claude-code", screen, at("2026-12-01T06:50:00Z"), "UTC"),
          TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-01T07:13:00Z", "five_hour", auto=True)


def test_footer_only_native_wait_without_a_limit_line_is_rate_limited():
    """The menu choice "Wait here, then continue automatically" closes the menu; when the limit
    line is gone (cleared or scrolled), the footer still says the agent waits by itself."""
    screen = claude("⏺ Done with the first half.",
                    footer="  ⚠ Usage limit reached · limit resets 7:13am\n"
                           "    Continuing automatically at 7:13am · Esc to cancel\n  ? for shortcuts")
    result = detect("claude-code", screen, at("2026-12-01T06:50:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-01T07:13:00Z", None, auto=True)


def test_native_wait_footer_with_another_way_out():
    screen = claude("  ⎿  You've hit your session limit · resets 4pm (Europe/Berlin)",
                    footer="  ⚠ Usage limit reached · limit resets 4pm\n"
                           "    Continuing automatically at 4pm · Esc to cancel · /usage-credits to keep going now\n"
                           "  ? for shortcuts")
    check(detect("claude-code", screen, at("2026-09-01T12:00:00Z"), "UTC"),
          TabState.RATE_LIMITED, LimitKind.USAGE, "2026-09-01T14:00:00Z", "five_hour", auto=True)


@pytest.mark.parametrize("line", [
    "● Automatic continue stopped after 3 usage limit hits in a row · /rate-limit-options to re-arm",
    "● Automatic continue gave up · the limit was hit again right after the reset",
    "● Automatic continue canceled · /rate-limit-options to re-arm",
])
def test_native_wait_cancel_and_give_up_forms(line):
    screen = claude("  ⎿  You've hit your session limit · resets 2:50am (Asia/Muscat)\n"
                    "● Usage limit reached · continuing automatically at 2:50am · esc or type to cancel\n" + line)
    check(detect("claude-code", screen, at("2026-07-09T19:30:00Z"), "UTC"),
          TabState.RATE_LIMITED, LimitKind.USAGE, "2026-07-09T22:50:00Z", "five_hour", auto=False)


def test_cancelled_wait_ignores_a_stale_footer():
    screen = claude("  ⎿  You've hit your session limit · resets 2:50am (Asia/Muscat)\n"
                    "● Automatic continue cancelled · /rate-limit-options to re-arm",
                    footer="  ⚠ Usage limit reached · limit resets 2:50am\n  ? for shortcuts")
    check(detect("claude-code", screen, at("2026-07-09T19:30:00Z"), "UTC"),
          TabState.RATE_LIMITED, LimitKind.USAGE, "2026-07-09T22:50:00Z", "five_hour", auto=False)


def test_menu_option_wait_here_is_not_the_native_wait():
    screen = ("  ⎿  You've hit your 5-hour limit · resets 5:41pm (UTC)\n  What do you want to do?\n"
              "  ❯ 1. Stop and wait for limit to reset\n    2. Wait here, then continue automatically at 5:41pm\n"
              "    3. Switch to usage credits\n  Enter to confirm · Esc to cancel")
    result = detect("claude-code", screen, at("2026-12-01T17:20:00Z"), "UTC")
    assert result.state is TabState.RATE_LIMITED and result.limit_menu and result.menu_choice == 1
    assert result.auto_continue is False


# ------------------------------------------------------------------------------ Claude Code 2.1.337
# 2.1.337 draws its notices ("Usage limit reached · set to continue automatically at …", "Automatic
# continue cancelled · …") with the glyph ∷ instead of ●; while a notice is live it cycles ∴ ∷ ∵ ∷
# (real captures in tests/fixtures/real-screens/2.1.337/). Agent output keeps ● / ⏺.
FOOTER_2_1_337 = "  ⏸ manual mode on · ? for shortcuts · ← for agents"
LIMIT_2_1_337 = "  ⎿  You've hit your 5-hour limit · resets 8:09pm (UTC)\n     /upgrade to increase your usage limit.\n"


@pytest.mark.parametrize("glyph", ["∷", "∴", "∵"])
def test_claude_2_1_337_notice_glyph_set_to_continue_is_the_native_wait(glyph):
    """The wait announced above the prompt, the footer below it not (yet) showing it."""
    screen = claude(LIMIT_2_1_337 + f"\n{glyph} Usage limit reached · set to continue automatically at 8:09pm",
                    footer=FOOTER_2_1_337)
    result = detect("claude-code", screen, at("2026-12-07T20:07:56Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-07T20:09:00Z", "five_hour", auto=True)
    assert result.detected_by == "pattern:claude-code/native-wait"


def test_claude_2_1_337_notice_glyph_cancelled_wait_is_read_after_its_announcement():
    from controller.agents.claude_code import PROFILE
    from controller.domain.detection import detect_screen

    screen = claude(LIMIT_2_1_337 + "\n∷ Usage limit reached · set to continue automatically at 8:09pm\n\n"
                    "∷ Automatic continue cancelled · /rate-limit-options to wait again", footer=FOOTER_2_1_337)
    trace: list[str] = []
    result = detect_screen(PROFILE, screen, at("2026-12-07T20:07:57Z"), "UTC", trace=trace)
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-07T20:09:00Z", "five_hour", auto=False)
    assert any("native-wait-cancelled" in t and "Automatic continue cancelled" in t for t in trace), trace
    assert any("cancelled or gave up after it was announced" in t for t in trace), trace


def test_claude_2_1_337_notice_rows_are_not_joined_to_the_row_above():
    """Without blank rows between them, each ∷ notice is a line of its own: the cancel is not swallowed
    by the limit line (joined, the line would read as a limit with the wait still armed)."""
    screen = claude("  ⎿  You've hit your 5-hour limit · resets 8:09pm (UTC)\n"
                    "∷ Usage limit reached · set to continue automatically at 8:09pm\n"
                    "∷ Automatic continue cancelled · /rate-limit-options to wait again", footer=FOOTER_2_1_337)
    check(detect("claude-code", screen, at("2026-12-07T20:07:57Z"), "UTC"),
          TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-07T20:09:00Z", "five_hour", auto=False)


def test_claude_2_1_337_notice_below_an_echoed_prompt_is_not_the_input():
    """A ∷ notice below a bare ``❯ text`` row (no ruled input drawn) makes that row an echo, not the input."""
    screen = ("❯ write hello\n\n∷ Usage limit reached · set to continue automatically at 8:09pm")
    result = detect("claude-code", screen, at("2026-12-07T20:07:56Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-07T20:09:00Z", None, auto=True)
    assert result.prompt_text is None


def test_claude_2_1_337_footer_with_agents_hint_keeps_the_input():
    screen = claude("⏺ Hello! What would you like me to write?", footer=FOOTER_2_1_337, prompt="draft the notes")
    result = detect("claude-code", screen, at("2026-12-07T20:07:56Z"), "UTC")
    assert result.state is TabState.IDLE and result.prompt_text == "draft the notes", result.to_json()


# ------------------------------------------------------------------------------ Claude Code limit stops

@pytest.mark.parametrize("line,resets,window,kind", [
    ("You've hit your limit · resets 8m", "2026-05-01T10:08:00Z", None, LimitKind.USAGE),
    ("You've hit your session limit · resets in 3h 20m", "2026-05-01T13:20:00Z", "five_hour", LimitKind.USAGE),
    ("You're out of extra usage · resets 3pm (UTC)", "2026-05-01T15:00:00Z", None, LimitKind.USAGE),
    ("You're out of extra usage · /usage-credits to add more", None, None, LimitKind.CREDITS),
    ("You’ve hit your weekly limit · resets Mon 12:00am (America/New_York)", "2026-05-04T04:00:00Z", "weekly",
     LimitKind.USAGE),
    ("You've now hit your Opus weekly limit · resets Tuesday at 9am (UTC)", "2026-05-05T09:00:00Z", "weekly",
     LimitKind.USAGE),
    ("Weekly usage limit exhausted · resets May 3 at 6am (UTC)", "2026-05-03T06:00:00Z", "weekly", LimitKind.USAGE),
    ("You've used up your 5-hour limit · resets 11am (UTC)", "2026-05-01T11:00:00Z", "five_hour", LimitKind.USAGE),
    ("You've hit your monthly spend limit · your weekly limit resets May 4, 6am (UTC)", "2026-05-04T06:00:00Z",
     "weekly", LimitKind.USAGE),
])
def test_claude_limit_family(line, resets, window, kind):
    result = detect("claude-code", claude(f"  ⎿  {line}"), at("2026-05-01T10:00:00Z"), "UTC")  # a Friday
    check(result, TabState.RATE_LIMITED, kind, resets, window)


def test_limit_line_with_a_log_timestamp_prefix():
    line = "[2026-05-01 09:59:58] ERROR You've hit your session limit · resets 2pm (UTC)"
    result = detect("claude-code", claude(line), at("2026-05-01T10:00:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-05-01T14:00:00Z", "five_hour")
    line = "2026-05-01T09:59:58.120Z ERROR codex_core::codex: You've hit your usage limit. Try again at 3:05 PM."
    result = detect("codex", codex(line), at("2026-05-01T10:00:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-05-01T15:05:00Z", None)


def test_weekday_reset_across_a_dst_change():
    # Friday 2026-10-30 in New York (EDT, UTC-4); Monday 2026-11-02 is after the switch (EST, UTC-5).
    line = "  ⎿  You've hit your weekly limit · resets Mon 9am (America/New_York)"
    result = detect("claude-code", claude(line), at("2026-10-30T15:00:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-11-02T14:00:00Z", "weekly")


# ------------------------------------------------------------------------------ Codex

def test_codex_0_171_right_aligned_warning_is_not_a_stop_on_its_own():
    body = " " * 90 + "⚠ 5h limit: only <1% left · resets at 07:16 · /status"
    result = detect("codex", codex(body), at("2026-12-01T06:00:00Z"), "UTC")
    assert result.state is not TabState.RATE_LIMITED, result.to_json()
    assert result.kind is LimitKind.WARNING


def test_codex_0_171_limit_line_with_right_aligned_warning_below():
    body = ("■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
            "https://chatgpt.com/settings/usage to purchase more credits or try again\nat 7:16 AM.\n"
            + " " * 90 + "⚠ 5h limit: only <1% left · resets at 07:16 · /status")
    result = detect("codex", codex(body), at("2026-12-01T06:00:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-01T07:16:00Z", None)


def test_codex_limit_then_human_continue_and_working_again_is_not_a_stop():
    body = ("■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again at 3:05 PM.\n\n"
            "› continue\n\n"
            "• Working (4s • esc to interrupt)\n"
            + " " * 90 + "⚠ 5h limit: 2% left · resets at 20:05 · /status")
    result = detect("codex", codex(body), at("2026-05-01T15:06:00Z"), "UTC")
    assert result.state is not TabState.RATE_LIMITED, result.to_json()


def test_codex_limit_then_human_continue_then_new_limit_is_a_stop():
    body = ("■ You’ve hit your usage limit. Try again at 3:05 PM.\n\n› continue\n\n"
            "■ You’ve hit your usage limit. Try again at 3:35 PM.")
    result = detect("codex", codex(body), at("2026-05-01T15:06:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-05-01T15:35:00Z", None)


@pytest.mark.parametrize("line,resets", [
    ("■ Your organization has reached its usage limit. Please wait until Sep 14, 2026 6:43 AM or contact "
     "your workspace admin.", "2026-09-14T06:43:00Z"),
    ("■ You've reached your usage limit. Your limit resets on Sep 14th, 2026 at 6:43 AM.", "2026-09-14T06:43:00Z"),
    ("■ You've hit your usage limit. Try again at 14 Sep 2026 06:43.", "2026-09-14T06:43:00Z"),
    ("■ You've hit your weekly usage limit. Try again in 4 days 20 hours 9 minutes.", "2026-09-13T06:09:00Z"),
    ("■ You've hit your usage limit. Try again at 2026-09-14T06:43:00Z.", "2026-09-14T06:43:00Z"),
])
def test_codex_limit_family(line, resets):
    result = detect("codex", codex(line), at("2026-09-08T10:00:00Z"), "UTC")
    assert result.state is TabState.RATE_LIMITED, result.to_json()
    assert result.kind is LimitKind.USAGE
    assert abs((result.resets_at - at(resets)).total_seconds()) <= 60, result.to_json()


@pytest.mark.parametrize("agent,line", [
    ("claude-code", "  ⎿  Opus limit almost reached, now using Sonnet 4"),
    ("claude-code", "  ⎿  Usage credits required for 1M context · /usage-credits"),
    ("claude-code", "  /config  Continue automatically at usage limit   true"),
    ("codex", "⚠ Heads up, you have less than 10% of your weekly limit left. Run /status for a breakdown."),
])
def test_not_a_stop(agent, line):
    screen = claude(line) if agent == "claude-code" else codex(line)
    result = detect(agent, screen, at("2026-05-01T10:00:00Z"), "UTC")
    assert result.state is not TabState.RATE_LIMITED, result.to_json()
    assert result.auto_continue is False


def test_wait_here_chosen_in_the_menu_is_the_native_wait_even_without_the_footer():
    """Claude Code 2.1.332 after a person chose "Wait here, then continue automatically": the slash
    command echo and the agent's confirmation (real capture, footer left out)."""
    screen = ("❯ write hello\n  ⎿  You've hit your 5-hour limit · resets 10:43am (UTC)\n❯ /rate-limit-options\n"
              "  ⎿  Claude Code will continue automatically at 10:43am. Keep this session open; it may still pause "
              "for permission prompts.\n" + RULE + "\n❯\n" + RULE + "\n  ⏸ manual mode on · ? for shortcuts")
    result = detect("claude-code", screen, at("2026-12-01T10:42:00Z"), "UTC")
    check(result, TabState.RATE_LIMITED, LimitKind.USAGE, "2026-12-01T10:43:00Z", "five_hour", auto=True)


def test_codex_0_171_composer_above_a_warnings_footer_row():
    """Codex 0.171.0 sometimes draws "⚠ 2 warnings · f2 to view" alone on the last row (real capture):
    the composer above it is still the input box."""
    screen = ("  >_ OpenAI Codex (v0.171.0)\n     ~\n\n› write hello\n\n  gpt-5.1-codex medium · ~\n"
              + " " * 134 + "⚠ 2 warnings · f2 to view")
    result = detect("codex", screen, at("2026-12-01T10:00:00Z"), "UTC")
    assert result.state is TabState.IDLE and result.prompt_text == "write hello", result.to_json()


@pytest.mark.parametrize("agent,line,resets,window,auto", [
    ("claude-code", "⎿  You've reached your usage limit for Opus 5 · resets 3pm (UTC)", "2026-05-01T15:00:00Z", None, False),
    ("claude-code", "⎿  Session limit reached ∙ resets 4pm", "2026-05-01T16:00:00Z", "five_hour", False),
    ("claude-code", "⎿  Your weekly limit has been reached · resets Mon 9am (UTC)", "2026-05-04T09:00:00Z", "weekly", False),
    ("claude-code", "⎿  Limit reached · resets 5pm", "2026-05-01T17:00:00Z", None, False),
    ("claude-code", "⎿  You are out of usage until 5pm", "2026-05-01T17:00:00Z", None, False),
    ("claude-code", "● Usage limit hit. Resets at 17:00.", "2026-05-01T17:00:00Z", None, False),
    ("claude-code", "⎿  You’ve hit your limit · resets in 45 minutes", "2026-05-01T10:45:00Z", None, False),
    ("claude-code", "● Usage limit reached · will continue automatically at 5pm · esc to cancel", "2026-05-01T17:00:00Z",
     None, True),
    ("codex", "■ You've reached your weekly usage limit. Try again on Sep 14 at 6:43 AM.", "2026-09-14T06:43:00Z",
     "weekly", False),
    ("codex", "■ Usage limit reached for gpt-5.6-sol. Try again at 18:05.", "2026-05-01T18:05:00Z", None, False),
])
def test_wordings_a_next_release_may_print(agent, line, resets, window, auto):
    """Not seen yet: rewordings of the same parts. The families read them without a new pattern."""
    screen = claude(line) if agent == "claude-code" else codex(line)
    check(detect(agent, screen, at("2026-05-01T10:00:00Z"), "UTC"), TabState.RATE_LIMITED, LimitKind.USAGE,
          resets, window, auto)


def test_codex_heads_up_wordings_are_warnings():
    for line in ("⚠ Heads up: you've used 95% of your 5h limit · resets at 17:19",
                 "⚠ Heads up, you have less than 10% of your weekly limit left. Run /status for a breakdown."):
        result = detect("codex", codex(line), at("2026-05-01T10:00:00Z"), "UTC")
        assert result.state is TabState.IDLE and result.kind is LimitKind.WARNING, (line, result.to_json())


def test_the_family_hint_only_skips_lines_no_family_matches():
    """The fast first check (Profile.family_hint) never changes a verdict: every corpus screen and
    every captured real screen reads the same with it switched off."""
    import dataclasses
    import json
    import pathlib

    from controller.agents.registry import get_profile
    from controller.domain.detection import detect_screen

    fixtures = pathlib.Path(__file__).parent / "fixtures"
    cases = [(c["agent"], c["screen"], at(c["now"]), c["tz"])
             for c in map(json.loads, (fixtures / "corpus" / "limit-screens.jsonl").read_text().splitlines())]
    for folder in (fixtures / "real-screens").iterdir():
        if folder.is_dir():
            for name, meta in json.loads((folder / "screens.json").read_text()).items():
                cases.append((meta["agent"], (folder / name).read_text(), at(meta["now"]), meta["tz"]))
    assert len(cases) > 80
    for agent, screen, now, tz in cases:
        profile = get_profile(agent)
        assert profile.family_hint is not None
        plain = dataclasses.replace(profile, family_hint=None)
        assert detect_screen(profile, screen, now, tz) == detect_screen(plain, screen, now, tz), screen
