"""Codex CLI adapter: its screen line families (Codex 0.x up to 0.171.0) and its facts (provider, login, keys).

The families come from the shared vocabulary in :mod:`controller.domain.profile`; the time after
"try again" is read by the one grammar of :mod:`controller.domain.timeparse`.

Wordings come from the corpus (tests/fixtures/corpus/limit-screens.jsonl) and from the real CLI
against the provider emulator (notes/real-agents.md). Codex never prints a zone: times are the
box's local time, and a time without a date is on the same local date (``time_only_rule="codex"``).

- ``■ You’ve hit your usage limit. Upgrade to Pro (…) or try again in 5 days 22 hours 11 minutes.``
- ``… or try again at 5:19 PM.`` / ``… at Mar 10th, 2026 3:39 AM.`` / ``… at Aug 20, 2026, 7:38 AM.``
- prefixes ``■``, ``🖐``, ``ERROR:``, ``Error running remote compact task:``
- localized (optional): ``Você atingiu seu limite de uso … tente novamente em 21 de abr. de 2026 02:53``
- model-scoped: ``ERROR: You've hit your usage limit for GPT-5.3-Codex-Spark.`` / ``Switch to another
  model now, or try again at Aug 8th, 2026 7:26 PM.`` (the time in the next sentence)
- the workspace owner's cap: ``Usage limit reached. … Increase your limits to continue`` (credits)
- warning, never a stop: ``⚠ 5h limit: only <1% left · resets at 07:16 · /status`` (0.171.0 right-aligned)
- overload: ``exceeded retry limit, last status: 429 Too Many Requests`` (openai/codex#26057)
- approval overlay: ``Would you like to run the following command?`` / ``› 1. Yes, proceed (y)``.
- the workspace spend-cap popup (credits, ``limit_menu``, default No): ``Your workspace has reached its spend
  limit. Ask an admin to raise it.`` / ``Continue anyway?`` / ``› 1. No`` / ``2. Yes``
  (modelled on Anantys-oss/koan#2156, openai/codex#27598).
No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from controller.agents.adapter import STRUCTURED_MAX, AgentAdapter, StructuredSource, head_cut
from controller.agents.usage_files import rollout_output_usage
from controller.domain.profile import (
    ADVERB,
    FAMILY_HINT,
    GENERIC_AWAITING,
    GENERIC_WORKING_HINTS,
    HIT,
    LIMIT_NOUN,
    OWNER,
    SCOPE,
    YOU,
    Profile,
    lp,
)
from controller.domain.detection import InputBox, ScreenLine


# Placeholders Codex shows in an empty composer (codex-rs/tui chat composer prompts).
PLACEHOLDERS = (
    "Ask Codex to do anything",
    "Explain this codebase",
    "Summarize recent commits",
    "Implement {feature}",
    "Find and fix a bug in @filename",
    "Write tests for @filename",
    "Improve documentation in @filename",
    "Run /review on my current changes",
    "Use /skills to list available skills",
)
_PLACEHOLDER = re.compile(
    r"^(?:" + "|".join(re.escape(p) for p in PLACEHOLDERS) + r")$", re.IGNORECASE
)
_COMPOSER = re.compile(r"^[›▌](?:\s+(?P<text>.*))?$")
_NUMBERED = re.compile(r"^[›▌]\s*\d{1,2}[.)]\s")
_FOOTER = re.compile(
    r"context left|for shortcuts|⏎|\bsend\b.*\bnewline\b|tab to queue|to interrupt|"
    r"\bwarnings?\s*·\s*f\d{1,2} to view|"  # 0.171: "⚠ 2 warnings · f2 to view" alone on the last row
    r"^\s*(?:gpt|o\d|codex)-[\w.-]+\s",
    re.IGNORECASE,
)
_OUTPUT = re.compile(r"^[•◦■⚠🖐└├✔✗─]")


def parse_input(rows: Sequence[ScreenLine]) -> InputBox | None:
    """Find the Codex composer (``› text``; older ``▌ text``) on the bottom rows.

    The composer is the last ``›`` row that is not a numbered menu option, followed only by its own
    wrapped continuation rows and footer rows (model · context left · cwd, key hints).

    Returns:
        :class:`InputBox` (text "" for an empty composer or a placeholder such as
        "Ask Codex to do anything") or None when no composer is visible (e.g. an approval overlay).
    """
    if not rows:
        return None
    last = len(rows) - 1
    for pos in range(last, max(-1, last - 10), -1):
        row = rows[pos]
        if row.kind != "text":
            continue
        if not _COMPOSER.match(row.text) or _NUMBERED.match(row.text):
            if _OUTPUT.match(row.text) and not _FOOTER.search(row.text):
                return None  # output below any composer candidate: no composer on the bottom
            continue
        end = pos
        while end + 1 <= last and rows[end + 1].kind == "text" and not _FOOTER.search(rows[end + 1].text) \
                and not _OUTPUT.match(rows[end + 1].text):
            end += 1
        tail = [r for r in rows[end + 1:] if r.kind == "text"]
        if len(tail) > 4 or any(_OUTPUT.match(r.text) and not _FOOTER.search(r.text) for r in tail):
            return None
        m = _COMPOSER.match(row.text)
        parts = [(m.group("text") or "") if m else ""] + [r.text for r in rows[pos + 1:end + 1]]
        text = " ".join(p.strip() for p in parts if p.strip())
        return InputBox(row.index, rows[end].index, "" if _PLACEHOLDER.match(text) else text)
    return None


PROFILE = Profile(
    agent="codex",
    time_only_rule="codex",
    retrying=(
        lp("stream-retrying", r"\bretrying\s+\d+\s*/\s*\d+", anchored=False),
        lp("reconnecting", r"\bRe-?connecting\.{0,3}\s*\d+\s*/\s*\d+", anchored=False),
    ),
    overload=(
        lp("exceeded-retry-limit", r"exceeded retry limit", anchored=False),
        lp("server-overloaded", r"server_is_overloaded|\bserver (?:is )?overloaded\b|experiencing high demand"
                                r"|model is at capacity|not (?:a|your) usage limit", anchored=False),
    ),
    credits=(
        lp("out-of-credits", r"(?:" + YOU + ADVERB + r"\s+)?(?:(?:run|ran)\s+)?out\s+of\s+(?:(?:your|the|its)\s+)?"
                             r"(?:extra\s+usage|(?:usage\s+|API\s+|prepaid\s+)?credits)\b"),
        lp("spend-cap", r"(?:" + YOU + ADVERB + r"\s+)?" + HIT + r"\s+" + OWNER + r"\s+(?:[\w'-]+\s+){0,2}?"
                        r"spend(?:ing)?\s+(?:cap|limit)"),
        lp("quota-exceeded", r"Quota exceeded|insufficient_quota|credit balance is too low"),
    ),
    usage=(
        lp("hit-usage-limit", YOU + ADVERB + r"\s+" + HIT + r"\s+" + OWNER + r"\s+" + SCOPE + LIMIT_NOUN),
        lp("usage-limit-reached", SCOPE + LIMIT_NOUN + r"(?:\s+(?:has\s+been|was|is))?\s+(?:reached|hit|exhausted|exceeded)\b"),
        lp("usage-limit-reached", r"\busage_limit_reached\b", anchored=False),
        lp("pt-limite-de-uso", r"Voc[êe] atingiu (?:o\s+)?seu limite de uso"),
        lp("es-limite-de-uso", r"(?:Has alcanzado|Alcanzaste) (?:tu|el) l[íi]mite de uso"),
    ),
    warnings=(
        lp("heads-up", r"Heads up[,:]?\s+you(?:['’]ve| have)\s+(?:used\s+(?:over\s+)?|less\s+than\s+)\d+\s*%",
           anchored=False),
        lp("limit-left", r"(?<![\w.-])(?:5h|weekly|monthly|daily|[\w.-]+)\s+limit:\s*(?:only\s+)?[<>]?\s*\d+(?:\.\d+)?\s*%\s+left",
           anchored=False),
        lp("approaching", r"Approaching (?:your )?(?:rate|usage)? ?limits?", anchored=False),
    ),
    working=(
        # bottom-pane status: "• Working (12s • esc to interrupt)", "Working (4s)", "◦ Thinking (1m 02s • f12 to interrupt)"
        re.compile(r"^[•◦·]?\s*[A-Z][\w-]*(?:\s+[\w-]+){0,3}\s*\(\s*(?:\d+\s*[hms]\s*)+(?:[•·].*)?\)\s*$"),
        *GENERIC_WORKING_HINTS,
    ),
    working_hints=GENERIC_WORKING_HINTS,
    awaiting=GENERIC_AWAITING,
    # the workspace spend-cap popup in front of the composer ("Your workspace has reached its spend limit.
    # Ask an admin to raise it." / "Continue anyway?" / "› 1. No" / "2. Yes"): counts only under a live
    # limit line; it has no "stop and wait" option, so it is left to a human
    limit_menu=(
        re.compile(r"^Continue (?:anyway|with (?:usage )?credits|using credits)\?", re.IGNORECASE),
    ),
    stop_option=None,
    progress=re.compile(r"^(?:[•◦└├✔✗]\s*\S|■\s*\S|─\s*Worked for)"),
    user_echo=re.compile(r"^›\s*\S"),
    find_input=parse_input,
    working_adjacent=True,
    family_hint=FAMILY_HINT,
    # a usage line with no time at all and this remedy is the workspace owner's cap (corpus N31)
    credits_hint=re.compile(r"Increase your limits|(?:ask|contact) your (?:workspace )?(?:admin|owner)", re.IGNORECASE),
)


# The newest rollout file's last token_count event, from the file's last 4 MiB.
_ROLLOUT = ('f=$(ls -t "$HOME"/.codex/sessions/*/*/*/rollout-*.jsonl 2>/dev/null | head -n 1); '
            '[ -n "$f" ] || exit 3; tail -c 4194304 "$f" | grep -F \'"token_count"\' | tail -n 1 | '
            f'{head_cut(STRUCTURED_MAX)}')

ROLLOUT = StructuredSource(
    name="rollout",
    argv=("sh", "-c", _ROLLOUT, "sh"),
    path="~/.codex/sessions/*/*/*/rollout-*.jsonl",
    parse=rollout_output_usage,
    unit="a token_count event",
)
"""The last ``token_count`` event of Codex's newest rollout (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``,
Codex CLI 0.1xx)."""


ADAPTER = AgentAdapter(
    name="codex",
    profile=PROFILE,
    provider="openai",
    login_file=".codex/auth.json",
    secret_key="auth.json",
    continue_text="continue",
    restart_argv=("codex", "resume", "--last"),  # it reads auth.json at start only
    interrupt_keys=("C-c", "C-c"),  # the first Ctrl-C clears the composer, the second exits
    stop_keys=("Escape",),
    exit_before_login_switch=True,  # a running Codex refuses another account's auth.json
    structured_sources=(ROLLOUT,),
)
