"""Claude Code profile: line families as Claude Code 1.x-2.1.328 prints them, plus action data.

Wordings come from the corpus (tests/fixtures/corpus/limit-screens.jsonl, sources per case) and
from the real CLI (2.1.328) against the provider emulator (notes/real-agents.md):

- ``Claude AI usage limit reached|1755615600`` (1.0.x, epoch seconds)
- ``Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).`` (1.0.x)
- ``5-hour limit reached ∙ resets 5am``, ``Weekly limit reached ∙ resets Nov 13 at 9am`` (1.0.8x-2.0)
- ``You've hit your limit · resets 10pm (America/New_York)``, ``You've hit your session limit ·
  resets 4:20am (Europe/Warsaw)``, ``You've hit your weekly limit · resets Aug 3, 7am (Europe/Zurich)``
- native wait: ``Usage limit reached · continuing automatically at 7pm · esc or type to cancel`` and
  ``⚠ Usage limit reached · limit resets 5:13pm`` / ``Continuing automatically at 5:13pm · Esc to cancel``
- the options menu ``What do you want to do?`` / ``❯ 1. Stop and wait for limit to reset`` (order varies).
No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from controller.agents.base import GENERIC_AWAITING, GENERIC_WORKING_HINTS, Profile, lp
from controller.domain.detection import InputBox, ScreenLine

SEP = r"\s*[∙·•\-–—|]\s*"           # separators seen: ∙ · - (and a few lookalikes)
APOS = r"['’]"
WHEN = r"(?P<when>\S.*)"
# words that may precede "limit": "5-hour", "weekly", "session", "Opus weekly", "usage", ...
WINDOW_WORDS = (
    r"(?P<window>(?:(?:5-hour|5h|five-hour|weekly|session|daily|monthly|usage|opus|sonnet|haiku|"
    r"model|claude|max|pro|extra)\s+){0,3})"
)

_PROMPT = re.compile(r"^[>❯](?:\s+(?P<text>.*))?$")
_NUMBERED = re.compile(r"^[>❯]\s*\d{1,2}[.)]\s")
_PLACEHOLDER = re.compile(r'^Try\s+["“].*["”]$|^Press up to edit queued messages$', re.IGNORECASE)


def parse_input(rows: Sequence[ScreenLine]) -> InputBox | None:
    """Find Claude Code's input box on the bottom rows.

    Accepts the boxed prompt ``╭─╮ / │ > text │ / ╰─╯`` (1.x-2.0), the ruled prompt
    ``──── / > text / ────`` (2.1) and a bare ``> text`` row followed only by footer rows.
    Only the last box on the screen is considered (a permission box hides the input), and only
    when the rows below it are footer rows (an echoed prompt box above output or a menu is not
    the input).

    Returns:
        :class:`InputBox` (text "" when empty or a ``Try "…"`` placeholder) or None.
    """
    if not rows:
        return None
    last = len(rows) - 1
    # boxed prompt: the last box must be within the bottom 16 rows
    for pos in range(last, max(-1, last - 16), -1):
        if rows[pos].kind != "box_bottom":
            continue
        top = pos - 1
        while top >= 0 and rows[top].in_box and rows[top].kind in ("text", "blank"):
            top -= 1
        if top < 0 or rows[top].kind != "box_top":
            return None
        inner = [r for r in rows[top + 1:pos] if r.kind == "text"]
        tail = [r for r in rows[pos + 1:] if r.kind == "text"]
        if any(_FOOTER_BAD.match(r.text) for r in tail):
            return None  # output or a menu below the box: it is an echoed prompt, not the input
        if inner and _PROMPT.match(inner[0].text) and not _NUMBERED.match(inner[0].text):
            return InputBox(rows[top].index, rows[pos].index, _text(inner))
        return None
    # ruled or bare prompt
    for pos in range(last, max(-1, last - 8), -1):
        row = rows[pos]
        if row.kind != "text" or row.in_box:
            continue
        if not _PROMPT.match(row.text) or _NUMBERED.match(row.text):
            continue
        end = pos
        while end + 1 <= last and rows[end + 1].kind == "text" and not _FOOTER_START.match(rows[end + 1].text) \
                and rows[end + 1].text[:1] not in "⏵?":
            end += 1
        start = pos - 1 if pos > 0 and rows[pos - 1].kind == "rule" else pos
        if end + 1 <= last and rows[end + 1].kind == "rule":
            end += 1
            return InputBox(rows[start].index, rows[end].index, _text(rows[pos:end]))
        tail = [r for r in rows[end + 1:] if r.kind == "text"]
        if len(tail) <= 3 and not any(_FOOTER_BAD.match(r.text) for r in tail):
            return InputBox(rows[start].index, rows[end].index, _text(rows[pos:end + 1]))
        return None
    return None


_FOOTER_START = re.compile(r"^(?:\?\s+for shortcuts|⏵|esc to|Continuing shortly|[─━]{3,})", re.IGNORECASE)
_FOOTER_BAD = re.compile(r"^(?:[⏺●⎿✶✻✽✢✳■•›❯>]|\d{1,2}[.)]\s|What do you want|Do you want|Enter to confirm|Esc to cancel)")


def _text(rows: Sequence[ScreenLine]) -> str:
    parts: list[str] = []
    for i, row in enumerate(rows):
        if row.kind != "text":
            continue
        if i == 0:
            m = _PROMPT.match(row.text)
            parts.append((m.group("text") or "") if m else row.text)
        else:
            parts.append(row.text)
    text = " ".join(p.strip() for p in parts if p.strip())
    return "" if _PLACEHOLDER.match(text) else text


PROFILE = Profile(
    agent="claude-code",
    time_only_rule="claude",
    retrying=(
        lp("retrying", r"\bRetrying in\s+\d+\s*(?:s|sec|secs|seconds?)\b", anchored=False),
        lp("retry-attempt", r"\(attempt\s+\d+\s*/\s*\d+\)", anchored=False),
    ),
    overload=(
        lp("server-limiting", r"Server is temporarily limiting requests|\(not your usage limit\)", anchored=False),
        lp("overloaded", r"API Error:?\s*\(?(?:529|overloaded)|overloaded_error|\bOverloaded\b", anchored=False),
        lp("request-rejected-429",
           r"API Error:?\s*(?:Request rejected\s*)?\(?429\b|exceed your (?:account|organization)['’]s rate limit",
           anchored=False),
    ),
    credits=(
        lp("out-of-credits", r"(?:Your\s+(?:workspace|organization|account)\s+is\s+|You['’]re\s+|You are\s+)?"
                             r"out of (?:usage |extra usage |API )?credits"),
        lp("spend-cap", r"(?:You['’]ve\s+)?hit your (?:monthly |org(?:anization)? )?spend(?:ing)? (?:cap|limit)"),
        lp("extra-usage-required", r"Extra usage is required"),
        lp("credit-balance", r"credit balance is too low"),
    ),
    auto_cancel=(
        lp("auto-cancelled", r"Automatic continue cancelled"),
    ),
    recovered=(
        lp("limit-reset", r"Usage limit reset" + SEP + r"Continuing automatically"),
    ),
    auto_continue=(
        lp("native-wait", r"Usage limit reached" + SEP + r"continuing automatically at\s+" + WHEN),
        lp("native-wait-continuing", r"Continuing automatically at\s+" + WHEN, anchored=False),
        lp("native-wait-shortly", r"^Continuing shortly" + SEP + r"Esc", anchored=False),
    ),
    usage=(
        lp("claude-ai-epoch", r"Claude(?:\s+AI|\s+Max|\s+Pro)?\s+usage limit reached\s*\|\s*(?P<epoch>\d{9,11})"),
        lp("claude-usage-limit", r"Claude(?:\s+AI|\s+Max|\s+Pro)?\s+usage limit reached\b[.!]?"
                                 r"(?:\s*Your limit will reset at\s+" + WHEN + r")?"),
        lp("limit-reached", WINDOW_WORDS + r"limit reached\b(?:" + SEP + r"(?:limit\s+)?resets?(?:\s+at)?\s+" + WHEN + r")?"),
        lp("hit-your-limit", r"You(?:" + APOS + r"ve|\s+have)\s+hit your\s+" + WINDOW_WORDS + r"limit\b"
                             r"(?:" + SEP + r"resets?(?:\s+at)?\s+" + WHEN + r")?"),
        lp("reached-your-limit", r"You(?:" + APOS + r"ve|\s+have)\s+reached your\s+" + WINDOW_WORDS + r"limit\b"
                                 r"(?:" + SEP + r"resets?(?:\s+at)?\s+" + WHEN + r")?"),
    ),
    warnings=(
        lp("approaching", r"Approaching\s+(?:your\s+)?.{0,40}?limit", anchored=False),
        lp("wrap-up", r"Claude will wrap up the current step", anchored=False),
        lp("used-percent", r"You['’]ve used (?:over\s+)?\d+\s*%", anchored=False),
        lp("model-fallback", r"\bnow using (?:Sonnet|Opus|Haiku)\b", anchored=False),
    ),
    working=(
        # spinner: "✶ Composing… (1m 44s · ↓ 3.4k tokens · esc to interrupt)"
        re.compile(r"^[·✢✳✶✻✽*]\s*[A-Z][\w'-]*(?:\s+[\w'-]+){0,3}(?:…|\.\.\.)\s*(?:\(|$)"),
        *GENERIC_WORKING_HINTS,
    ),
    working_hints=GENERIC_WORKING_HINTS,
    awaiting=GENERIC_AWAITING,
    limit_menu=(
        re.compile(r"^What do you want to do\?", re.IGNORECASE),
        re.compile(r"Stop and wait for (?:the )?limit to reset", re.IGNORECASE),
        re.compile(r"Wait here, then continue automatically", re.IGNORECASE),
        re.compile(r"Switch to usage credits|Add funds to continue with extra usage", re.IGNORECASE),
    ),
    stop_option=re.compile(r"Stop and wait for (?:the )?limit to reset", re.IGNORECASE),
    progress=re.compile(r"^[⏺●⎿]\s*\S"),
    user_echo=re.compile(r"^[>❯]\s*\S"),
    find_input=parse_input,
    working_adjacent=False,
    continue_text="continue",
    restart_argv=None,
    credential_path="~/.claude/.credentials.json",
    credential_secret_key="credentials.json",
)
