"""0 false stops (issue 21): no screen that means working or awaiting input is read as rate limited.

Runs the shared corpus, the families fixtures and generated working/awaiting screens (model fallback and
overload notices at every wrap, retry rows with their detail, permission prompts and approval overlays,
"Continue anyway?" questions without a limit, limit text quoted in the agent's prose in every quote form,
old limit lines followed by output and finished/background rows) and asserts none is a stop.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from controller.agents.registry import detect
from controller.domain.types import TabState
from harness.screen_variants import APOSTROPHES, QUOTES, claude, codex, width_wraps, word_wraps

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime.fromisoformat("2026-05-01T10:00:00+00:00")


def _cases(name: str) -> list[dict]:
    path = FIXTURES / name / "limit-screens.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _not_a_stop(case: dict) -> bool:
    e = case["expect"]
    return e.get("state") in ("working", "awaiting_input") or e.get("state_not") == "rate_limited"


FIXTURE_CASES = [c for c in _cases("corpus") + _cases("families") if _not_a_stop(c)]


def generated() -> list[tuple[str, str, str]]:
    """(id, agent, screen) of screens that mean working or awaiting input."""
    out: list[tuple[str, str, str]] = []
    fallback = ["⏺ Claude Opus limit reached, now using Sonnet 4.5", "⏺ Claude Opus 4 limit reached, now using Sonnet 4",
                "  ⎿  Opus is experiencing high load, falling back to Sonnet",
                "  ⎿  Opus limit almost reached, now using Sonnet 4",
                "  ⎿  API Error: 529 Overloaded · Retrying in 5 seconds… (attempt 2/10)",
                "✻ 529 Overloaded · Retrying in 4s · attempt 6/10\n  ⎿  If it persists, check https://status.claude.com.",
                "  ⎿  API Error (429 rate_limit_error) · Retrying in 12 seconds… (attempt 2/10)"]
    for n, line in enumerate(fallback):
        first = line.split("\n")[0]
        rest = line[len(first):]
        for k, body in enumerate([first, *word_wraps(first), *width_wraps(first, indent="     ")]):
            for old in ("", "  ⎿  You've hit your Opus limit · resets 7pm (UTC)\n\n"):
                out.append((f"fallback-{n}-{k}-{bool(old)}", "claude-code", claude(old + body + rest)))
    for n, (q0, q1) in enumerate(QUOTES):
        for m, a in enumerate(APOSTROPHES):
            quoted = f"⏺ The log says {q0}You{a}ve hit your limit · resets 5pm (UTC){q1}, so I will retry later."
            out.append((f"quoted-claude-{n}-{m}", "claude-code", claude(quoted)))
            out.append((f"quoted-codex-{n}-{m}", "codex", codex(
                f"• The CI log printed {q0}You{a}ve hit your usage limit. Try again at 5:19 PM.{q1} earlier.")))
    for n, rows in enumerate(("● 2 shells running · ↓ to view", "✻ Worked for 3m 12s · done 2:15 AM",
                              "● Agent \"lint\" failed (error type rate_limit, HTTP 429)")):
        # an old limit line, then the agent's own output: history, whatever finished rows follow
        out.append((f"history-{n}", "claude-code", claude(
            "  ⎿  You've hit your limit · resets 5pm (UTC)\n\n⏺ Usage limit reset · Continuing automatically\n\n"
            f"⏺ All 42 tests pass.\n\n{rows}\n\n✶ Considering… (8s · esc to interrupt)")))
    out.append(("claude-permission", "claude-code",
                "⏺ Bash(rm -rf build)\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. No\n\n Esc to cancel · Tab to amend"))
    out.append(("codex-approval", "codex", codex(
        "Would you like to run the following command?\n\n  $ rm -rf build\n\n› 1. Yes, proceed (y)\n"
        "  3. No, and tell Codex what to do differently (esc)\n\n  Press enter to confirm or esc to cancel",
        composer=False)))
    out.append(("codex-continue-anyway", "codex", codex(
        "• This will overwrite 3 files.\n\nContinue anyway?\n› 1. No\n  2. Yes", composer=False)))
    out.append(("codex-fallback-stale-warning", "codex", codex(
        "• Working (12s • esc to interrupt)")))
    return out


GENERATED = generated()


@pytest.mark.parametrize("case", FIXTURE_CASES, ids=[c["id"] for c in FIXTURE_CASES])
def test_fixture_screen_that_is_not_a_stop_is_not_read_as_one(case: dict) -> None:
    result = detect(case["agent"], case["screen"], datetime.fromisoformat(case["now"].replace("Z", "+00:00")),
                    case["tz"])
    assert result.state is not TabState.RATE_LIMITED, (case["id"], case["source"], result.to_json())


def test_generated_working_and_awaiting_screens_are_never_stops() -> None:
    assert len(GENERATED) > 150
    stops = [(name, detect(agent, screen, NOW, "UTC").to_json()) for name, agent, screen in GENERATED
             if detect(agent, screen, NOW, "UTC").state is TabState.RATE_LIMITED]
    assert stops == [], stops[:3]


def test_fixture_cases_cover_working_and_awaiting() -> None:
    states = {c["expect"].get("state") for c in FIXTURE_CASES}
    assert {"working", "awaiting_input"} <= states, states
