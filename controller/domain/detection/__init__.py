"""Layered screen detection: what a captured tab screen means. Pure, no I/O, ``now`` passed in.

Layers (each a small function, tested by tests/test_detection_*.py):

1. :func:`normalize_lines` strips ANSI, parses box borders (``╭ │ ╰``) and horizontal rules.
2. The profile's input parser finds the input box on the bottom (Claude's ``│ > text │`` or
   ``> text``; Codex's ``› text`` composer); everything below it is the footer.
3. :func:`join_lines` joins lines the terminal wrapped mid-sentence ("…will reset\\n at 3pm (…)").
4. Every joined line is classified against the profile's families (data, see
   :class:`controller.domain.profile.Profile`) and the user patterns.
5. The LIVE BOTTOM decides: lines below the last agent-output line (``⏺ …``, ``• Ran …``); the
   newest limit line there wins; a spinner/interrupt hint below it, or agent output after it,
   makes it stale (corpus C31, C57; field-pitfalls §5).
6. The reset instant is parsed with :mod:`controller.domain.timeparse` (zone rules, DST).

Where: :mod:`.rows` (layers 1, 3), :mod:`.classify` (layer 4), :mod:`.decide` (layers 2, 5, 6:
:func:`detect_screen`), :mod:`.patterns` (user patterns). Import from ``controller.domain.detection``;
the submodules share their underscored helpers with each other only.
"""

from __future__ import annotations

from controller.domain.detection.classify import span_raw as span_raw
from controller.domain.detection.decide import MAX_LINES, detect_screen
from controller.domain.detection.patterns import (
    MAX_PATTERN_CHARS,
    USER_PATTERN_GROUPS,
    InvalidPattern,
    UserPattern,
    compile_user_pattern,
)
from controller.domain.detection.patterns import compile_user_patterns as compile_user_patterns
from controller.domain.detection.rows import InputBox, ScreenLine, join_lines, normalize_lines
from controller.domain.detection.rows import JoinedLine as JoinedLine

__all__ = [
    "InputBox",
    "InvalidPattern",
    "ScreenLine",
    "UserPattern",
    "compile_user_pattern",
    "detect_screen",
    "join_lines",
    "normalize_lines",
    "MAX_LINES",
    "MAX_PATTERN_CHARS",
    "USER_PATTERN_GROUPS",
]
