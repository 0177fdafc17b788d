"""Layers 2, 5 and 6 of screen detection: the input box found, the live bottom decides what the screen means
(the newest limit line unless agent output, a human's message or a working marker follows it; prompts and
menus; the footer's status), with the ``detect --explain`` trace. Pure, no I/O, ``now`` passed in."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from controller.domain.detection.classify import _classify, _ev, _Event, _Info
from controller.domain.detection.patterns import UserPattern
from controller.domain.detection.rows import JoinedLine, ScreenLine, _tail, join_lines, normalize_lines
from controller.domain.profile import Profile
from controller.domain.types import Detection, LimitKind, TabState

MAX_LINES = 60          # only the last 60 joined lines are read (live bottom + user-pattern guard)


def detect_screen(
    profile: Profile,
    screen: str,
    now: datetime,
    tz: str,
    user_patterns: Sequence[UserPattern] = (),
    trace: list[str] | None = None,
) -> Detection:
    """Say what a tab's screen means (the corpus README's rules).

    Args:
        profile: the agent's :class:`~controller.domain.profile.Profile` (line families as data).
        screen: captured pane text (``tmux capture-pane -p``, ANSI allowed, rows may wrap).
        now: tz-aware instant the screen was seen; relative and time-only resets count from it.
        tz: the box's IANA zone, used when a line names none (Codex never does) or an invalid one.
        user_patterns: validated ``spec.detection.patterns`` (:func:`compile_user_pattern`);
            tried on lines no built-in family claims, over the last 60 joined lines only.
        trace: when a list is given, one sentence per step is appended: which family matched
            which line, which time expression was read, why an older limit line is history
            (``agentbox-controller detect --explain`` prints it). Screen text in it is untrusted.

    Returns:
        :class:`~controller.domain.types.Detection`:
        - RATE_LIMITED + USAGE/CREDITS when the newest limit line on the live bottom is not stale
          (``resets_at`` UTC or None; ``window``; ``auto_continue`` for Claude Code's native wait,
          announced above the prompt or in the footer below it; ``limit_menu``/``menu_choice`` for
          its rate-limit options menu);
        - AWAITING_INPUT for a permission prompt, approval overlay, question or menu that is not the
          limit menu (a limit line above it still fills kind/resets_at);
        - WORKING for a live spinner/status/interrupt hint, a CLI retrying by itself, or a native
          continue that fired;
        - IDLE for a visible input box with nothing of the above; UNKNOWN otherwise.
        OVERLOAD/WARNING lines set ``kind`` without making the tab rate limited.
        ``prompt_text`` is the input box text ("" empty/placeholder, None when no box is visible).

    Raises:
        ValueError: ``now`` is naive.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    note = trace.append if trace is not None else (lambda _text: None)
    rows = normalize_lines(screen)
    box = profile.find_input(rows) if profile.find_input else None
    if box is not None and box.text:
        # a bare "> You've hit your limit · …" row is a limit line, not a half-typed prompt (corpus C23)
        probe = _classify(profile, 0, JoinedLine(box.text, False, box.start, box.end), now, tz, ())
        if probe.event is not None:
            box = None
    content = rows[: _pos(rows, box.start)] if box else rows
    footer = rows[_pos(rows, box.end) + 1:] if box else []
    joined = join_lines(content)[-MAX_LINES:]
    tails = [_tail(joined, i) for i in range(len(joined))]
    infos = _details_attached([_classify(profile, i, line, now, tz, user_patterns, tails[i])
                               for i, line in enumerate(joined)])
    # the footer below the input is live status: Claude Code shows its native wait there too
    foot = [_classify(profile, -1, JoinedLine(r.text, False, r.index, r.index), now, tz, ())
            for r in footer if r.kind == "text"]
    for i in infos + foot:
        if i.event is not None:
            where = "footer" if i.idx < 0 else f"line {i.line.first + 1}"
            note(f"{where}: family {i.event.family} ({i.event.name}) matched {_quote(i.line.text)}"
                 + (f"; time expression {_quote(i.event.when_text)} -> {_iso(i.event.resets_at)}"
                    if i.event.when_text else ("; no time expression" if i.event.cls in ("usage", "credits") else ""))
                 + (f"; {i.event.why}" if i.event.why else ""))
    foot_auto = next((i for i in foot if i.event and i.event.auto), None)
    foot_cancel = any(i.event and i.event.cls == "auto_cancel" for i in foot)
    foot_limits = [i for i in foot if i.event and i.event.cls in ("usage", "credits")]

    last_progress = max((i.idx for i in infos if i.progress), default=-1)
    live = [i for i in infos if i.idx > last_progress]
    for i in infos:
        if i.event and i.event.cls in ("usage", "credits") and i.idx <= last_progress:
            note(f"line {i.line.first + 1} is history: agent output follows it "
                 f"(line {infos[last_progress].line.first + 1}: {_quote(infos[last_progress].line.text)})")
    limits = [i for i in live if i.event and i.event.cls in ("usage", "credits")]
    newest = limits[-1] if limits else None
    if newest is not None:
        echo = next((i for i in live if i.user and i.idx > newest.idx), None)
        if echo is not None:
            # the human sent a new turn after the limit line and no new limit line followed it
            note(f"line {newest.line.first + 1} is history: a message was sent after it "
                 f"(line {echo.line.first + 1}: {_quote(echo.line.text)})")
            limits = [i for i in limits if i.idx > echo.idx]
            newest = None
            last_progress = echo.idx
            live = [i for i in live if i.idx > echo.idx]
    after = [i for i in live if newest is None or i.idx > newest.idx]

    working_info = _working(profile, infos, after, footer)
    # the limit lifted and the agent goes on by itself, the turn moved to another model, or the CLI is
    # retrying a newer request by itself
    recovered = [i for i in after if i.event and i.event.cls in ("recovered", "fallback", "retrying")]
    if newest is None and foot_limits and working_info is None and not recovered:
        # no limit line above the prompt (cleared, scrolled away): the footer's limit status decides
        newest = foot_limits[-1]
        note("no limit line above the prompt: the footer's limit status decides")
    # a popup may be drawn below the input too (Codex's spend-cap question): its options count
    menu_lines = [i for i in after if i.option or i.limit_menu or i.awaiting] + \
        [i for i in foot if i.option or i.limit_menu]
    is_limit_menu = any(i.limit_menu for i in menu_lines) and (newest is not None or any(
        i.option and profile.stop_option is not None and profile.stop_option.search(i.option[1])
        for i in menu_lines))
    awaiting = None if is_limit_menu else next(
        (i for i in after + foot if i.awaiting or (i.option and i.cursor)), None)
    prompt = box.text if box else None

    if newest is not None and (working_info is not None or recovered):
        src = working_info if isinstance(working_info, str) else (
            working_info.line.text if working_info is not None else recovered[-1].line.text)
        note(f"the limit line is history: the agent is working again ({_quote(src)})")
    if newest is not None and working_info is None and not recovered:
        if newest.idx >= 0:
            block_start = max((i.idx for i in live if i.user and i.idx < newest.idx), default=last_progress)
            block = foot_limits + [i for i in limits if i.idx > block_start]  # the line above the prompt names a zone
        else:
            block = foot_limits
        # the newest line with a reset decides; one that prints its zone wins over a zoneless
        # repeat ("resets 2:50am (Asia/Muscat)" / "continuing automatically at 2:50am")
        timed = [i for i in reversed(block) if _ev(i).resets_at]
        chosen = next((i for i in timed if _ZONED.search(_ev(i).when_text)), timed[0] if timed else None)
        resets_at = _ev(chosen).resets_at if chosen else None
        relative = chosen is not None and _ev(chosen).relative
        if _ev(newest).cls == "credits":
            resets_at = None
        window = next((_ev(i).window for i in reversed(block) if _ev(i).window), None)
        auto_idx = max((i.idx for i in block if _ev(i).auto and i.idx >= 0), default=-1)
        cancelled = any(i.event and i.event.cls == "auto_cancel" and i.idx > auto_idx for i in live)
        auto = auto_idx >= 0 and not cancelled
        if foot_auto is not None and not foot_cancel:
            auto = True  # the footer is the live status: "Continuing automatically at … · Esc to cancel"
            if resets_at is None:
                resets_at, relative = _ev(foot_auto).resets_at, _ev(foot_auto).relative
        elif foot_cancel:
            auto = False
        if auto_idx >= 0 and cancelled:
            note("the native wait was cancelled or gave up after it was announced: the resume is ours")
        kind = LimitKind.CREDITS if _ev(newest).cls == "credits" else LimitKind.USAGE
        menu_choice = None
        if is_limit_menu and profile.stop_option is not None:
            menu_choice = next((i.option[0] for i in menu_lines
                                if i.option and profile.stop_option.search(i.option[1])), None)
        resting = _resting(after, foot)
        if awaiting is not None:
            note(f"a prompt or menu below the limit line waits for a person: {_quote(awaiting.line.text)}")
            note(_family(profile, newest, "awaiting_input", "a prompt below the limit line"))
            return Detection(TabState.AWAITING_INPUT, kind, resets_at, window, False, False, None,
                             prompt, awaiting.line.text, _ev(newest).name)
        name = _ev(foot_auto).name if auto and foot_auto is not None and auto_idx < 0 and newest.idx < 0 \
            else _ev(newest).name
        note(_family(profile, newest, "rate_limited",
                     *(["the limit menu (a popup in front of the input) has no 'stop and wait' option: left to a human"]
                       if is_limit_menu and menu_choice is None else []),
                     *([f"finished/background rows are not activity: {', '.join(resting)}"] if resting else [])))
        return Detection(TabState.RATE_LIMITED, kind, resets_at, window, auto, is_limit_menu,
                         menu_choice, prompt, newest.line.text, name, reset_relative=relative and resets_at is not None)

    if newest is None and is_limit_menu:
        # the options menu is open but its limit line scrolled away: still a usage stop
        menu_choice = next((i.option[0] for i in menu_lines if i.option and profile.stop_option
                            and profile.stop_option.search(i.option[1])), None)
        first = next(i for i in menu_lines if i.limit_menu)
        note("the rate-limit options menu is open without its limit line")
        note(f"family: {_agent(profile)}-limit-menu → rate_limited")
        return Detection(TabState.RATE_LIMITED, LimitKind.USAGE, None, None, False, True, menu_choice,
                         prompt, first.line.text, f"pattern:{profile.agent}/limit-menu")

    # not rate limited: the newest overload / retry / warning line on the live bottom gives the kind
    notes = [i for i in live if i.event and i.event.cls in _NOTES
             and (newest is None or i.idx > newest.idx or working_info is None)]
    notes += [i for i in foot if i.event and i.event.cls in _NOTES]
    last_note = notes[-1] if notes else None
    note_kind: LimitKind | None = None
    if last_note is not None:
        note_kind = _note_kind(_ev(last_note))
        note(f"not a stop: {_ev(last_note).family} line {_quote(last_note.line.text)}")
    evidence = last_note.line.text if last_note else None
    detected_by = _ev(last_note).name if last_note else ""
    if awaiting is not None:
        note(f"family: {_agent(profile)}-awaiting-input → awaiting_input")
        return Detection(TabState.AWAITING_INPUT, note_kind, None, None, prompt_text=prompt,
                         evidence=awaiting.line.text, detected_by=f"marker:{profile.agent}/awaiting")
    retrying = last_note is not None and _ev(last_note).cls in ("retrying", "fallback")
    if working_info is not None or recovered or retrying:
        if last_note is None or _ev(last_note).cls not in ("retrying", "fallback"):
            shown = working_info if working_info is not None else (recovered[-1] if recovered else None)
            if isinstance(shown, _Info):
                evidence = evidence or shown.line.text
                detected_by = detected_by or (
                    shown.event.name if shown.event else f"marker:{profile.agent}/working")
            elif isinstance(shown, str):
                evidence = evidence or shown
                detected_by = detected_by or f"marker:{profile.agent}/working-footer"
        note(_family(profile, last_note, "working") if last_note is not None and retrying
             else f"family: {_agent(profile)}-working-marker → working")
        return Detection(TabState.WORKING, note_kind, None, None, prompt_text=prompt,
                         evidence=evidence, detected_by=detected_by)
    state = TabState.IDLE if box is not None else TabState.UNKNOWN
    note(_family(profile, last_note, state.value) if last_note is not None
         else f"family: none → {state.value} (no limit, prompt or activity on the live bottom)")
    return Detection(state, note_kind, None, None, prompt_text=prompt, evidence=evidence, detected_by=detected_by)


_NOTES = ("overload", "retrying", "fallback", "warning")   # events that leave the tab running
_LABELS = {"usage": "usage-limit", "credits": "spend-cap", "auto_continue": "native-wait", "fallback": "model-fallback",
           "warnings": "warning", "recovered": "limit-reset", "auto_cancel": "native-wait-cancelled",
           "user pattern": "user-pattern"}


def _agent(profile: Profile) -> str:
    return "claude" if profile.agent == "claude-code" else profile.agent


def _family(profile: Profile, info: _Info, outcome: str, *notes: str) -> str:
    """The ``detect --explain`` line naming the family that decided, how its line was read, and the outcome:
    ``family: codex-usage-limit (wrapped line joined: 2 rows) → rate_limited``,
    ``family: claude-model-fallback → working``."""
    event = _ev(info)
    label = _LABELS.get(event.family, event.family)
    if event.name.split("/")[-1].startswith("overload"):
        label += " (under load)"
    how = ([f"wrapped line joined: {info.line.rows} rows"] if info.line.rows > 1 else []) + \
        (["typographic quotes/spaces normalised"] if info.line.changed else []) + list(notes)
    return f"family: {_agent(profile)}-{label}" + (f" ({'; '.join(how)})" if how else "") + f" → {outcome}"


def _resting(after: Sequence[_Info], foot: Sequence[_Info]) -> list[str]:
    """The finished or background rows on the live bottom (quoted, at most 3), for ``--explain``."""
    return [_quote(i.line.text, 60) for i in [*after, *foot] if i.neutral][:3]


def _note_kind(event: _Event) -> LimitKind:
    """The kind a note gives a tab that is not stopped: a warning or a model fallback record only
    (WARNING); an overload, a retry or a fallback forced by load is an incident (OVERLOAD)."""
    if event.cls == "warning" or (event.cls == "fallback" and not event.name.split("/")[-1].startswith("overload")):
        return LimitKind.WARNING
    return LimitKind.OVERLOAD


def _details_attached(infos: list[_Info]) -> list[_Info]:
    """A ``⎿`` row right under a retry, overload, fallback or warning line is that line's detail
    ("✻ 529 Overloaded · Retrying in 4s" / "⎿ If it persists, check status.claude.com",
    anthropics/claude-code#91817), not new agent output: it does not make the line history."""
    for prev, info in zip(infos, infos[1:]):
        if info.progress and info.line.text.startswith("⎿") and info.line.first == prev.line.last + 1 \
                and prev.event is not None and prev.event.cls in _NOTES:
            info.progress = False
    return infos


_ZONED = re.compile(r"\([A-Za-z][^)]*\)|\b(?:UTC|GMT)\b|[+-]\d{2}:?\d{2}\b|\d\s?Z\b|^\|")


def _quote(text: str, limit: int = 160) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f'"{text}"'


def _iso(instant: datetime | None) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ") if instant is not None else "none"


def _pos(rows: Sequence[ScreenLine], index: int) -> int:
    """List position of the row with screen index ``index``."""
    for pos, row in enumerate(rows):
        if row.index == index:
            return pos
    return len(rows)


def _working(
    profile: Profile,
    infos: Sequence[_Info],
    after: Sequence[_Info],
    footer: Sequence[ScreenLine],
) -> _Info | str | None:
    """A live working marker: an interrupt hint in the footer, or a spinner/status line below the
    newest limit line (Codex: only the last content line above the input counts)."""
    for row in footer:
        if any(p.search(row.text) for p in profile.working_hints):
            return row.text
    candidates = [i for i in after if i.working]
    if not candidates:
        return None
    if profile.working_adjacent:
        # the last content line above the input, skipping notes drawn under it (Codex 0.171's
        # right-aligned "⚠ 5h limit: … left" warning)
        content = [i for i in infos if not (i.event and i.event.cls in ("warning", "overload"))]
        return candidates[-1] if content and candidates[-1] is content[-1] else None
    recent = {i.idx for i in infos[-12:]}
    return next((i for i in reversed(candidates) if i.idx in recent), None)
