"""Layers 1 and 3 of screen detection: a captured screen as rows (ANSI stripped, box borders and rules
parsed), and rows the terminal wrapped joined back into logical lines. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

_MAX_JOIN_ROWS = 6       # a wrapped message rarely spans more rows; keeps plain output lines apart


@dataclass(frozen=True)
class ScreenLine:
    """One physical screen row after normalization.

    Attributes:
        text: the row without ANSI, box side borders and surrounding whitespace.
        kind: "text" | "blank" | "box_top" | "box_bottom" | "rule".
        in_box: the row sat between ``│`` borders.
        index: 0-based row number on the screen.
        changed: :data:`TYPOGRAPHY` replaced something in the row (typographic apostrophes or quotes,
            Unicode spaces); ``detect --explain`` says so.
    """

    text: str
    kind: str
    in_box: bool
    index: int
    changed: bool = False


@dataclass(frozen=True)
class InputBox:
    """The agent's input area found on the live bottom.

    Attributes:
        start: first row index of the input area (box top, rule or prompt row).
        end: last row index of the input area; rows after it are the footer.
        text: the typed text ("" when empty or a placeholder is shown).
    """

    start: int
    end: int
    text: str


_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"        # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[PX^_][^\x1b]*\x1b\\"       # DCS/SOS/PM/APC
    r"|\x1b[@-Z\\-_]"                  # 2-byte
)
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BOX_TOP = re.compile(r"^[╭┌╔┏][─━═┄┈╌\s\S]*[╮┐╗┓]$")
_BOX_BOTTOM = re.compile(r"^[╰└╚┗][─━═┄┈╌\s\S]*[╯┘╝┛]$")
_RULE = re.compile(r"^[─━═╌┄┈▔▁]{8,}$")
_SIDES = "│┃║▕▏"

# One spelling for what terminals and apps print in several (field-pitfalls §1): every apostrophe form
# becomes ', every double quote form ", every Unicode space a space; zero-width characters go. The
# families then spell each word once (corpus README: "either apostrophe", "no-break spaces").
TYPOGRAPHY = str.maketrans(
    {**dict.fromkeys("\u2018\u2019\u201a\u201b\u02bc\u2032\u00b4\uff07", "'"),
     **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"'),
     **dict.fromkeys("\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                     "\u202f\u205f\u3000", " "),
     **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff", None)}
)


def normalize_lines(screen: str) -> list[ScreenLine]:
    """Split a captured screen into :class:`ScreenLine` rows.

    Strips ANSI escape sequences and control characters, converts tabs to spaces, applies
    :data:`TYPOGRAPHY` (’ ‘ ʼ → ', “ ” → ", U+00A0 and other Unicode spaces → space) and parses
    box borders so text inside ``│ … │`` is returned without them (``in_box=True``).
    Trailing blank rows are dropped.
    """
    screen = _ANSI.sub("", screen).replace("\r\n", "\n").replace("\r", "\n")
    screen = _CTRL.sub("", screen.replace("\t", "    "))
    rows: list[ScreenLine] = []
    for index, original in enumerate(screen.split("\n")):
        raw = original.translate(TYPOGRAPHY)
        row = _row(raw.strip(), index)
        rows.append(replace(row, changed=True) if raw != original else row)
    while rows and rows[-1].kind == "blank":
        rows.pop()
    return rows


def _row(s: str, index: int) -> ScreenLine:
    """One stripped row as a :class:`ScreenLine` (blank, a box border, a rule, or text)."""
    if not s:
        return ScreenLine("", "blank", False, index)
    if "─" in s[:3] + s[-3:] or "━" in s[:3] + s[-3:] or "═" in s[:3] + s[-3:]:
        if _BOX_TOP.match(s) and len(s) > 2:
            return ScreenLine(s.strip("╭┌╔┏╮┐╗┓─━═ "), "box_top", True, index)
        if _BOX_BOTTOM.match(s) and len(s) > 2:
            return ScreenLine("", "box_bottom", True, index)
        if _RULE.match(s):
            return ScreenLine("", "rule", False, index)
    return _side_parsed(s, index)


def _side_parsed(s: str, index: int) -> ScreenLine:
    if s[0] in _SIDES:
        inner = s[1:]
        if inner and inner[-1] in _SIDES:
            inner = inner[:-1]
        inner = inner.strip()
        return ScreenLine(inner, "text" if inner else "blank", True, index)
    return ScreenLine(s, "text", False, index)


@dataclass(frozen=True)
class JoinedLine:
    """A logical line: one or more physical rows joined where the terminal wrapped them.

    Attributes:
        text: the rows' texts joined by one space.
        in_box: the rows sat inside a ``│ … │`` box.
        first, last: screen indexes of its first and last row.
        rows: how many rows were joined (more than 1: the terminal wrapped it).
        changed: :data:`TYPOGRAPHY` normalised a character in one of its rows.
    """

    text: str
    in_box: bool
    first: int
    last: int
    rows: int = 1
    changed: bool = False


# A row starting like this begins a new logical line (it is not a wrapped continuation); ∴ ∷ ∵ are
# Claude Code 2.1.337's notice glyphs.
_STARTER = re.compile(
    r"^(?:[⎿●⏺∴∷∵■🖐⚠◦└├›❯>✶✻✽✢✳*$#✔✓✗✘☐☒□▪‣⏵↓↑─▌\[]"
    r"|[·•](?!\s*[a-z])"  # a separator that wrapped to the row start ("· resets 5pm") continues the line
    r"|\d+[.)]\s"
    r"|(?:ERROR|Error|Warning|WARN|Press|Enter to|Esc to|Tip:|\? for)\b)"
)


def join_lines(rows: Sequence[ScreenLine]) -> list[JoinedLine]:
    """Join rows that continue a sentence wrapped by the terminal.

    A text row is appended to the previous text row (same box side) unless it starts like a new
    item (a glyph such as ⎿ ● ⏺ ■ ⚠ • › ❯ >, a numbered option, "ERROR:", "Press …"), the previous
    row ends with "?" (a question is followed by its options), the previous row ends a sentence and
    the row starts a new one with a capital, or the logical line already spans 6 rows. Blank rows,
    borders and rules end a logical line and are not returned.
    """
    out: list[JoinedLine] = []
    current: JoinedLine | None = None
    for row in rows:
        if row.kind != "text":
            if current:
                out.append(current)
            current = None
            continue
        if (
            current is not None
            and current.in_box == row.in_box
            and not _STARTER.match(row.text)
            and not current.text.endswith("?")
            and not (current.text[-1:] in ".!" and row.text[:1].isupper())
            and current.rows < _MAX_JOIN_ROWS
        ):
            current = JoinedLine(f"{current.text} {row.text}", current.in_box, current.first, row.index,
                                 current.rows + 1, current.changed or row.changed)
            continue
        if current:
            out.append(current)
        current = JoinedLine(row.text, row.in_box, row.index, row.index, changed=row.changed)
    if current:
        out.append(current)
    return out


def _tail(joined: Sequence[JoinedLine], i: int) -> str:
    """Text of up to two logical lines that continue line ``i``'s paragraph (adjacent rows, not a
    new item): "ERROR: You've hit your usage limit for X.\nSwitch to another model now, or try
    again at Aug 8th, 2026 7:26 PM." keeps its time in the second sentence (corpus N30)."""
    parts: list[str] = []
    last = joined[i].last
    for nxt in joined[i + 1:i + 3]:
        if nxt.first != last + 1 or nxt.in_box != joined[i].in_box or _STARTER.match(nxt.text):
            break
        parts.append(nxt.text)
        last = nxt.last
    return " ".join(parts)
