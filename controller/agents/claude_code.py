"""Claude Code adapter: its screen line families (Claude Code 1.x-2.1.337) and its facts (provider, login, keys).

The families are built from the shared vocabulary in :mod:`controller.domain.profile` (subject + verb
+ scope + noun, a reset clause, a time expression), not from sentences. Wordings they were checked
against come from the corpus (tests/fixtures/corpus/limit-screens.jsonl, sources per case) and
from the real CLI (2.1.328, 2.1.332, 2.1.337) against the provider emulator (notes/real-agents.md):

- ``Claude AI usage limit reached|1755615600`` (1.0.x, epoch seconds)
- ``Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).`` (1.0.x)
- ``5-hour limit reached ∙ resets 5am``, ``Weekly limit reached ∙ resets Nov 13 at 9am`` (1.0.8x-2.0)
- ``You've hit your limit · resets 10pm (America/New_York)``, ``You've hit your session limit ·
  resets 4:20am (Europe/Warsaw)``, ``You've hit your weekly limit · resets Aug 3, 7am (Europe/Zurich)``
- native wait: ``Usage limit reached · continuing automatically at 7pm · esc or type to cancel``,
  ``● Usage limit reached · set to continue automatically at 7:13am`` (2.1.332; 2.1.337 draws its notices
  with ``∷``, cycling ``∴ ∷ ∵`` while live: ``∷ Usage limit reached · …``) and the footer
  ``⚠ Usage limit reached · limit resets 5:13pm`` / ``Continuing automatically at 5:13pm · Esc to cancel``;
  cancelled or given up: ``● Automatic continue cancelled · …``, ``● Automatic continue stopped · …``
- spend caps ``You've hit your monthly spend limit`` (credits; usage when the line names a reset),
  model limits ``You've reached your Fable limit.``, ``You're out of extra usage``
- the options menu ``What do you want to do?`` / ``❯ 1. Stop and wait for limit to reset`` (order varies).
- a model fallback, never a stop: ``⏺ Claude Opus limit reached, now using Sonnet 4.5``
  (anthropics/claude-code#11390), ``Opus is experiencing high load, falling back to Sonnet`` (modelled on #44398);
  the CLI retrying: ``API Error: 529 Overloaded · Retrying in 5 seconds… (attempt 2/10)`` (#3558),
  ``✻ 529 Overloaded · Retrying in 4s · attempt 6/10`` with its ``⎿ If it persists, …`` detail (#91817).
- rows that are neither output nor activity: ``✻ Worked for 3m 12s · done 2:15 AM``, ``2 shells running``,
  ``· 3 background tasks``, ``● Agent "…" failed (error type rate_limit, HTTP 429)`` (modelled on #77591, #40712).
No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from controller.agents.adapter import STRUCTURED_MAX, AgentAdapter, StructuredSource, head_cut
from controller.agents.usage_files import statusline_output_usage, transcript_output_usage
from controller.domain.profile import (
    ADVERB,
    FAMILY_HINT,
    AUTO_CONTINUE,
    GENERIC_AWAITING,
    GENERIC_NEUTRAL,
    GENERIC_WORKING_HINTS,
    HIT,
    LIMIT_NOUN,
    MODEL_SWITCH,
    OWNER,
    SCOPE,
    SEP,
    YOU,
    Profile,
    lp,
)
from controller.domain.detection import InputBox, ScreenLine

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
_FOOTER_BAD = re.compile(r"^(?:[⏺●∴∷∵⎿✶✻✽✢✳■•›❯>]|\d{1,2}[.)]\s|What do you want|Do you want|Enter to confirm|Esc to cancel)")


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
    # the turn moved to another model and goes on (anthropics/claude-code#11390, #44398): never a stop
    fallback=(
        lp("overload-fallback", r"(?:high\s+(?:load|demand)|overloaded|at\s+capacity)\b.{0,60}?" + MODEL_SWITCH
           + r"\s+(?:Claude\s+)?(?:Sonnet|Opus|Haiku|Fable|the\s+fallback\s+model)\b", anchored=False),
        lp("model-fallback", MODEL_SWITCH + r"\s+(?:Claude\s+)?(?:Sonnet|Opus|Haiku|Fable|the\s+fallback\s+model)\b",
           anchored=False),
    ),
    overload=(
        lp("server-limiting", r"Server is temporarily limiting requests|\(not your usage limit\)|not (?:a|your) usage limit",
           anchored=False),
        lp("overloaded", r"API Error:?\s*\(?(?:529|overloaded)|overloaded_error|\bOverloaded\b"
                         r"|is experiencing high (?:load|demand)", anchored=False),
        lp("request-rejected-429",
           r"API Error:?\s*(?:Request rejected\s*)?\(?429\b|exceed your (?:account|organization)['’]s rate limit",
           anchored=False),
    ),
    # no reset lifts these, unless the line names one (then kind usage: "monthly spend limit · your
    # session limit resets 2:40pm", corpus N07)
    credits=(
        lp("out-of-credits", r"(?:" + YOU + ADVERB + r"\s+)?(?:(?:run|ran)\s+)?out\s+of\s+(?:(?:your|the|its)\s+)?"
                             r"(?:extra\s+usage|(?:usage\s+|API\s+|prepaid\s+|extra\s+usage\s+)?credits)\b"),
        lp("spend-cap", r"(?:" + YOU + ADVERB + r"\s+)?" + HIT + r"\s+" + OWNER + r"\s+(?:[\w'-]+\s+){0,2}?"
                        r"spend(?:ing)?\s+(?:cap|limit)"),
        lp("extra-usage-required", r"Extra usage is required"),
        lp("credit-balance", r"credit balance is too low"),
    ),
    auto_cancel=(
        lp("native-wait-cancelled",
           r"(?:automatic(?:ally)?|auto-?)\s*continu\w*(?:\s+(?:was|has\s+been|is))?\s+"
           r"(?:cancel+ed|stopped|disabled|turned\s+off|gave\s+up|given\s+up|abandoned|aborted|paused|off)\b"),
    ),
    recovered=(
        lp("limit-reset", r"(?:usage\s+)?limit\s+(?:has\s+)?reset\b(?:\s+early)?" + SEP + r"(?:continu|resum)\w*"),
    ),
    # the native wait: "● Usage limit reached · continuing automatically at 5:13pm · esc to cancel"
    # (2.1.328), "… · set to continue automatically at 7:13am" (2.1.332; "∷ …" in 2.1.337), the footer's
    # "Continuing automatically at 5:13pm · Esc to cancel" and, after the reset, "Continuing shortly"
    auto_continue=(
        lp("native-wait", r"(?:(?<![\w-])(?:[\w-]+\s+){0,3}?limit\s+(?:reached|hit|exhausted)" + SEP + r")?" + AUTO_CONTINUE),
        lp("native-wait", r"Continuing shortly\b"),
    ),
    usage=(
        lp("hit-your-limit", YOU + ADVERB + r"\s+" + HIT + r"\s+" + OWNER + r"\s+" + SCOPE + LIMIT_NOUN),
        lp("limit-reached", SCOPE + LIMIT_NOUN + r"(?:\s+(?:has\s+been|was|is))?\s+(?:reached|hit|exhausted|exceeded)\b"),
        lp("out-of-usage", YOU + ADVERB + r"\s+(?:(?:run|ran)\s+)?out\s+of\s+(?:usage|messages|requests)\b"),
    ),
    warnings=(
        lp("approaching", r"Approaching\s+(?:your\s+)?.{0,40}?limit", anchored=False),
        lp("wrap-up", r"Claude will wrap up the current step", anchored=False),
        lp("used-percent", r"You['’]ve used (?:over\s+)?\d+\s*%", anchored=False),
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
    neutral=(
        # a finished turn's timer: "✻ Worked for 3m 12s · done 2:15 AM", "✻ Cogitated for 22s"
        re.compile(r"^[·✢✳✶✻✽*]\s*[A-Z][\w'-]*\s+for\s+(?:\d+\s*[hms]\s*)+(?:[·∙•]\s*done\b.*)?$"),
        re.compile(r"^[·✢✳✶✻✽*]\s*\S.{0,100}[·∙•]\s*done\s+\d{1,2}(?::\d{2})?\s*(?:[AaPp]\.?[Mm]\.?)?\s*$"),
        # a subagent's or teammate's failure that repeats the 429: the main line above decides
        re.compile(r"^[●⏺]\s*(?:Agent|Task|Subagent|Teammate)\b.{0,160}?\bfail\w*\b.{0,120}?"
                   r"(?:rate[_\s-]?limit|\bHTTP\s*429\b|\b429\b)", re.IGNORECASE),
        *GENERIC_NEUTRAL,
    ),
    user_echo=re.compile(r"^[>❯]\s*\S"),
    find_input=parse_input,
    working_adjacent=False,
    family_hint=FAMILY_HINT,
    auto_in_line=re.compile(AUTO_CONTINUE + r"|Continuing shortly\b", re.IGNORECASE),
)


STATUSLINE_PATH = ".agentbox/statusline.json"
"""Where the box image's statusline helper saves Claude Code's statusline stdin (relative to $HOME)."""

# The statusline file's modification time (epoch s), then the file cut one byte past the bound.
_STATUSLINE = f'f="$HOME/$1"; [ -f "$f" ] || exit 3; stat -c %Y "$f" && {head_cut(STRUCTURED_MAX)} "$f"'
# The newest transcript's last API-error entry, from its last 4 MiB and 400 lines (a usage-limit 429 is
# recorded with `apiErrorParams.rate_limit_info`, the shape of stream-json's rate_limit_event; 2.1.328).
_TRANSCRIPT = ('f=$(ls -t "$HOME"/.claude/projects/*/*.jsonl 2>/dev/null | head -n 1); '
               '[ -n "$f" ] || exit 3; tail -c 4194304 "$f" | tail -n 400 | grep -F \'"isApiErrorMessage":true\' '
               f'| tail -n 1 | {head_cut(STRUCTURED_MAX)}')

STATUSLINE = StructuredSource(
    name="statusline",
    argv=("sh", "-c", _STATUSLINE, "sh", STATUSLINE_PATH),
    path=f"~/{STATUSLINE_PATH}",
    parse=statusline_output_usage,
    header_lines=1,
)
"""Claude Code's statusline input (``rate_limits``, 2.1.x) saved by the box's statusline helper: counts only
when a window is used up."""

TRANSCRIPT = StructuredSource(
    name="transcript",
    argv=("sh", "-c", _TRANSCRIPT, "sh"),
    path="~/.claude/projects/*/*.jsonl",
    parse=transcript_output_usage,
    unit="an API error entry",
)
"""The newest Claude Code transcript's last API-error entry (a rejected ``rate_limit_info``)."""


ADAPTER = AgentAdapter(
    name="claude-code",
    profile=PROFILE,
    provider="anthropic",
    login_file=".claude/.credentials.json",
    secret_key="credentials.json",
    continue_text="continue",
    restart_argv=None,  # it reads the login file again before every request: no restart after a switch
    interrupt_keys=("C-c", "C-c"),
    stop_keys=("Escape",),
    exit_before_login_switch=False,
    structured_sources=(STATUSLINE, TRANSCRIPT),
)
