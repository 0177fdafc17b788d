"""Screen variants for the detection families of issue 21 (pure text builders, no I/O).

Each builder returns the text of a tab as ``tmux capture-pane -p`` would give it. The variants are the ones the
families must survive: a limit line wrapped at any word boundary or by a pane of a given width, every
apostrophe and quote form, no-break spaces, extra status rows (background shells, finished timers, subagent
429s, tips), and popups above, below or in place of the composer, with or without a border.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence

RULE = "─" * 66
APOSTROPHES = ("'", "\u2019", "\u2018", "\u02bc", "\u00b4")  # ' ’ ‘ ʼ ´
QUOTES = (('"', '"'), ("\u201c", "\u201d"), ("\u201e", "\u201c"))  # "…" “…” „…“
WIDTHS = (28, 36, 44, 60, 80, 120)


def word_wraps(line: str) -> Iterator[str]:
    """``line`` broken onto two rows at each word boundary in turn (the prefix glyph stays on row 1)."""
    words = line.split(" ")
    for k in range(1, len(words)):
        head, tail = " ".join(words[:k]), " ".join(words[k:])
        if head.strip() and tail.strip() and head.strip() not in "■●⏺⎿":
            yield f"{head}\n{tail}"


def width_wraps(line: str, widths: Sequence[int] = WIDTHS, indent: str = "") -> Iterator[str]:
    """``line`` as a pane of each width wraps it (at word boundaries; continuation rows get ``indent``)."""
    for width in widths:
        yield "\n".join(textwrap.wrap(line, width=width, subsequent_indent=indent, break_long_words=False,
                                      break_on_hyphens=False))


def nbsp(line: str, every: int = 2) -> str:
    """Every ``every``-th space (not one that ends a URL) as a no-break space (U+00A0)."""
    words = line.split(" ")
    return words[0] + "".join(("\u00a0" if i % every == 0 and "http" not in words[i - 1] else " ") + word
                              for i, word in enumerate(words[1:], 1))


def claude(body: str, footer: str = "  ? for shortcuts", boxed: bool = False) -> str:
    """A Claude Code screen: an echoed task, ``body``, the input (ruled 2.1 or boxed 2.0) and ``footer``."""
    head = "❯ Refactor the parser module and add tests\n\n"
    if boxed:
        box = f"╭{'─' * 60}╮\n│ > {' ' * 57}│\n╰{'─' * 60}╯"
        return f"{head}{body}\n\n{box}\n{footer}"
    return f"{head}{body}\n\n{RULE}\n❯ \n{RULE}\n{footer}"


def codex(body: str, composer: bool = True, footer: str = "  gpt-5.6-sol medium · ~/src/app · Context 71% left") -> str:
    """A Codex screen: an echoed task, a finished tool call, ``body``, then the composer and its footer."""
    head = "› Fix the failing test\n\n• Ran go test ./...\n  └ --- FAIL: TestParseHeader (0.00s)\n\n"
    tail = f"\n\n› Ask Codex to do anything\n\n{footer}" if composer else ""
    return f"{head}{body}{tail}"


def boxed(rows: Sequence[str], width: int = 60) -> str:
    """``rows`` inside a ``╭─╮ │ … │ ╰─╯`` border (rows longer than the box are wrapped into it)."""
    inner: list[str] = []
    for row in rows:
        inner.extend(textwrap.wrap(row, width=width - 4) or [""])
    body = "\n".join(f"│ {r.ljust(width - 4)} │" for r in inner)
    return f"╭{'─' * (width - 2)}╮\n{body}\n╰{'─' * (width - 2)}╯"
