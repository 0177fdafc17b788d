"""Screen profiles: the line families (data) the screen detector reads, and their shared vocabulary.

A :class:`Profile` holds compiled regex families, never code paths; the engine in
:mod:`controller.domain.detection` walks them. The agent adapters (:mod:`controller.agents`) build one
per agent CLI from the vocabulary here. Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from controller.domain.detection import InputBox, ScreenLine

__all__ = [
    "LinePattern",
    "Profile",
    "InputParser",
    "generic_profile",
    "lp",
    "FAMILY_HINT",
    "GENERIC_AWAITING",
    "GENERIC_WORKING_HINTS",
    "GENERIC_NEUTRAL",
    "MODEL_SWITCH",
    "RESET_CLAUSE",
    "SEP",
    "APOS",
    "YOU",
    "HIT",
    "OWNER",
    "SCOPE",
    "LIMIT_NOUN",
    "AUTO_CONTINUE",
    "ADVERB",
]


@dataclass(frozen=True)
class LinePattern:
    """One member of a line family.

    Attributes:
        name: short id, reported as ``detected_by = "pattern:<agent>/<name>"``.
        regex: compiled pattern searched in a joined screen line. Named groups the engine reads:
            ``when`` (text starting with the reset expression, parsed by
            :func:`controller.domain.timeparse.parse_when`), or the time parts ``epoch, year, month,
            day, hour, minute, ampm, zone, rel_days, rel_hours, rel_minutes``; ``window`` (text such as
            "5-hour", "weekly", "session" mapped to a window name).
        window: fixed window name ("five_hour" | "weekly") when the family implies one.
        anchored: when True the match must start the line (after prefix glyphs such as ⎿ ● ⏺ ■ 🖐
            ⚠ or a lead ending in ":" like "ERROR:"), and text inside quotes is refused; this keeps
            limit text quoted in the agent's own prose from counting (corpus C57).
    """

    name: str
    regex: re.Pattern[str]
    window: str | None = None
    anchored: bool = True


def lp(name: str, pattern: str, window: str | None = None, anchored: bool = True) -> LinePattern:
    """Compile a case-insensitive :class:`LinePattern` (helper for profile modules)."""
    return LinePattern(name, re.compile(pattern, re.IGNORECASE), window, anchored)


# --------------------------------------------------------------------------------------------
# The shared vocabulary of the line families (field-pitfalls §1: match families, not sentences).
# A limit stop is SUBJECT + VERB + OWNER + SCOPE + NOUN ("You've hit your weekly limit", "Your
# organization has reached its usage limit") or SCOPE + NOUN + VERB ("5-hour limit reached",
# "Claude AI usage limit reached"); its reset is any RESET_CLAUSE followed by a time expression that
# controller.domain.timeparse reads. Each profile picks its words from these pieces.

SEP = r"\s*[∙·•\-–—|:,;]\s*"       # separators seen: ∙ · - (and lookalikes)
APOS = r"['’`´]"
YOU = (r"(?:You(?:" + APOS + r"ve|" + APOS + r"re|\s+have|\s+are)?"
       r"|(?:Your\s+)?(?:workspace|organization|organisation|org|account|team|plan|enterprise)"
       r"(?:\s+(?:has|is|have))?)")
ADVERB = r"(?:\s+(?:now|already|just|officially|unfortunately|again))?"
HIT = r"(?:hit|reached|exhausted|exceeded|used\s+up|maxed\s+out|(?:run|ran)\s+out\s+of)"
OWNER = r"(?:your|the|its|their|this|all(?:\s+of)?\s+your)"
# Starts at a word's first character only: a lazy word loop tried at every position of a long word
# rescans it to its end each time (quadratic; a box's 60,000-character line held the controller ~5 s).
SCOPE = r"(?<![\w.\-/+" + APOS[1:-1] + r"])(?P<window>(?:[\w.\-/+" + APOS[1:-1] + r"]+\s+){0,4}?)"
LIMIT_NOUN = r"(?:(?:usage|rate|message|plan|request|token)\s+)?(?:limit|quota|allowance)s?\b"
# "continuing automatically", "set to continue automatically" (2.1.332, 2.1.337), "will resume automatically"
AUTO_CONTINUE = (r"(?:(?:claude(?:\s+code)?|codex|it|we|this\s+(?:task|session))\s+)?(?:(?:is|are)\s+)?(?:set\s+to\s+|going\s+to\s+|will\s+)?"
                 r"(?:continu(?:e|es|ing)|resum(?:e|es|ing))\s+automatically\b"
                 r"(?!\s+(?:at|when|on)\s+(?:the\s+|a\s+)?(?:usage\s+)?limit)")
# words that introduce the reset's time expression; the text after one is parsed by timeparse
RESET_CLAUSE = re.compile(
    r"\b(?:resets?|reset\s+(?:at|on|in)|renews?|refresh(?:es)?|try\s+again|check\s+back|(?:available|back)\s+again"
    r"|wait\s+until|until|automatically|tente\s+novamente|int[ée]ntalo\s+de\s+nuevo|vuelve\s+a\s+intentarlo"
    r"|réessayez|erneut)\b|\|",
    re.IGNORECASE,
)


InputParser = Callable[[Sequence["ScreenLine"]], "InputBox | None"]


@dataclass(frozen=True)
class Profile:
    """Everything the detector knows about one agent CLI's screen (action facts live in its agent adapter).

    Line families (tuples of :class:`LinePattern`, tried in this order for each joined line):
        retrying: the CLI retries by itself (not rate limited, state WORKING).
        fallback: the CLI switched to another model and keeps working ("Claude Opus limit reached, now
            using Sonnet 4.5", "Opus is experiencing high load, falling back to Sonnet"): state WORKING,
            kind WARNING (OVERLOAD when the pattern's name starts with "overload"). Tried before the
            limit families, so the limit words in such a line do not make it a stop.
        overload: incident/overload 429s (kind OVERLOAD, not rate limited).
        credits: out of credits / spend cap (RATE_LIMITED, kind CREDITS, no reset).
        auto_cancel: the native wait was cancelled.
        recovered: the limit lifted and the agent continues by itself (state WORKING).
        auto_continue: native automatic continue announced (RATE_LIMITED, USAGE, auto_continue).
        usage: usage-limit lines (RATE_LIMITED, USAGE).
        warnings: approaching-limit notices (kind WARNING, not rate limited).
    Markers (tuples of compiled regexes, searched in a joined line):
        working: spinner / status lines that mean the agent is running now.
        working_hints: interrupt hints ("esc to interrupt") counted in the footer below the input.
        awaiting: permission prompts, approval overlays and question footers.
        limit_menu: lines that identify the rate-limit options menu ("What do you want to do?",
            "Stop and wait for limit to reset", ...).
        stop_option: the menu option whose displayed number becomes ``menu_choice``.
        progress: agent-output glyph lines ("⏺ …", "• Ran …"); one below a limit line makes it stale.
        neutral: finished or background states that are neither output nor activity ("✻ Worked for
            3m 12s · done 2:15 AM", "2 shells running", "· 3 background tasks", a subagent's
            "failed (error type rate_limit, HTTP 429)"): they neither make a limit line stale nor
            mean the agent is working.
        user_echo: a submitted user message echoed in the transcript ("> continue", "› fix it").
    Other:
        agent: the agent name (as in ``spec.agent``).
        time_only_rule: "claude" (next occurrence, 1 h grace) or "codex" (same local date).
        find_input: parses the input box on the live bottom, or None when the agent has none known.
        working_adjacent: a ``working`` line counts only when it is the last content line above
            the input (Codex leaves a stale "esc to interrupt" above the idle prompt, herdr#352).
    Time and kind:
        reset_clause: words that introduce a reset's time expression ("resets", "try again",
            "until", "|" before an epoch); a limit line's time is the first one after them that
            :func:`controller.domain.timeparse.parse_when` reads (also in the rows that continue
            the line's paragraph).
        credits_hint: on a usage line without any time, marks a cap no reset lifts (Codex's
            "Increase your limits to continue"): kind CREDITS.
        auto_in_line: the native wait announced after a limit statement on the same line
            ("Usage limit reached · limit resets 5:13pm Continuing automatically at 5:13pm").
        family_hint: a line without a match here cannot match any family of this profile (checked
            first, for speed; :data:`FAMILY_HINT` for the built-in profiles).
    """

    agent: str
    time_only_rule: Literal["claude", "codex"] = "claude"
    retrying: tuple[LinePattern, ...] = ()
    fallback: tuple[LinePattern, ...] = ()
    overload: tuple[LinePattern, ...] = ()
    credits: tuple[LinePattern, ...] = ()
    auto_cancel: tuple[LinePattern, ...] = ()
    recovered: tuple[LinePattern, ...] = ()
    auto_continue: tuple[LinePattern, ...] = ()
    usage: tuple[LinePattern, ...] = ()
    warnings: tuple[LinePattern, ...] = ()
    working: tuple[re.Pattern[str], ...] = ()
    working_hints: tuple[re.Pattern[str], ...] = ()
    awaiting: tuple[re.Pattern[str], ...] = ()
    limit_menu: tuple[re.Pattern[str], ...] = ()
    stop_option: re.Pattern[str] | None = None
    progress: re.Pattern[str] | None = None
    neutral: tuple[re.Pattern[str], ...] = ()
    user_echo: re.Pattern[str] | None = None
    find_input: InputParser | None = None
    working_adjacent: bool = False
    reset_clause: re.Pattern[str] | None = RESET_CLAUSE
    credits_hint: re.Pattern[str] | None = None
    auto_in_line: re.Pattern[str] | None = None
    family_hint: re.Pattern[str] | None = None


# Every line a built-in family can match holds one of these words (a fast first check, not a rule).
FAMILY_HINT = re.compile(
    r"limit|usage|credit|spend|quota|automatic|continu|retry|retrying|overload|capacity|429|529|reset|"
    r"l[íi]mite|heads up|approaching|now using|wrap up|used\s+(?:over\s+)?\d|connecting|attempt|demand|"
    r"out of|allowance|falling back|fell back|switch(?:ing|ed) to|high load",
    re.IGNORECASE,
)


def _rx(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


# Markers every profile (including the generic ones) understands.
GENERIC_WORKING_HINTS = _rx(r"\b(?:esc|f\d{1,2}|ctrl\+c|ctrl-c|\^c)\s+(?:again\s+)?to\s+interrupt\b")
GENERIC_AWAITING = _rx(
    r"\bDo you want to (?:proceed|make this edit|create|allow|overwrite|delete|run)\b",
    r"\bWould you like to (?:run the following command|make the following edits|proceed|allow|grant)\b",
    r"\bPress enter to confirm or esc to (?:cancel|go back)\b",
    r"\bEnter to confirm\s*[·∙•]\s*Esc to (?:cancel|go back|exit)\b",
    r"\bEsc to cancel\s*[·∙•]\s*Tab to amend\b",
    r"\((?:y/n|yes/no)\)\s*\??\s*$",
    r"\[(?:y/n|Y/n|y/N)\]\s*\??\s*$",
)


# Background work the agent left running ("2 shells running", "· 3 background tasks", "1 bash running"):
# a count of what runs on its own, not the agent's turn (a limit line above it still decides).
GENERIC_NEUTRAL = _rx(
    r"(?:^[^\w\s]*\s*|[·∙•|]\s*)\d+\s+(?:(?:background\s+)?(?:shells?|bash(?:es)?|terminals?|commands?|tasks?|jobs?|agents?)"
    r"\s+(?:still\s+)?running|background\s+(?:shells?|bash(?:es)?|tasks?|commands?|agents?|terminals?|jobs?))\b"
    r"\s*(?:$|[·∙•(|]|\bin the background\b)",
)
# The CLI moved the turn to another model ("now using Sonnet 4.5", "falling back to Sonnet"); the imperative
# "Switch to Sonnet with /model" is a remedy printed under a stop and is not matched.
MODEL_SWITCH = r"\b(?:now\s+using|(?:is\s+)?falling\s+back\s+to|fell\s+back\s+to|switching\s+to|switched\s+to)\b"


def generic_profile(agent: str) -> Profile:
    """A profile with only the markers every agent shares (interrupt hints, permission prompts): no
    limit families, for agents without a profile of their own."""
    return Profile(
        agent=agent,
        time_only_rule="claude",
        working_hints=GENERIC_WORKING_HINTS,
        working=GENERIC_WORKING_HINTS,
        awaiting=GENERIC_AWAITING,
        neutral=GENERIC_NEUTRAL,
    )
