"""The one time-expression grammar (controller/domain/timeparse.py): every form, zones, bounds."""

from __future__ import annotations

from datetime import datetime

import pytest

from controller.domain.timeparse import parse_when, parse_when_span

pytestmark = pytest.mark.unit

NOW = datetime.fromisoformat("2026-05-01T10:00:00+00:00")  # a Friday


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("text,tz,expected", [
    # clocks, with/without minutes and am/pm, 24-hour
    ("5pm", "UTC", "2026-05-01T17:00:00Z"),
    ("5:30 a.m.", "UTC", "2026-05-02T05:30:00Z"),
    ("07:16 · /status", "UTC", "2026-05-02T07:16:00Z"),
    # dates either order, with/without year, ordinals, "at"/comma, clock first
    ("Oct 13 at 6am (Europe/Paris)", "UTC", "2026-10-13T04:00:00Z"),
    ("Sep 14th, 2026 at 6:43 AM", "UTC", "2026-09-14T06:43:00Z"),
    ("14 Sep 2026 06:43", "UTC", "2026-09-14T06:43:00Z"),
    ("14th of Sep, 6:43 AM", "UTC", "2026-09-14T06:43:00Z"),
    ("7:26 PM on Aug 8", "Europe/Berlin", "2026-08-08T17:26:00Z"),
    # weekdays and today/tomorrow
    ("Mon 12:00am (America/New_York)", "UTC", "2026-05-04T04:00:00Z"),
    ("Tuesday at 9am", "UTC", "2026-05-05T09:00:00Z"),
    ("Fri 11am", "UTC", "2026-05-01T11:00:00Z"),
    ("tomorrow at 9am", "Asia/Tokyo", "2026-05-02T00:00:00Z"),
    # relative forms in any unit combination
    ("8m", "UTC", "2026-05-01T10:08:00Z"),
    ("3h 20m", "UTC", "2026-05-01T13:20:00Z"),
    ("in 4 days 20 hours 9 minutes", "UTC", "2026-05-06T06:09:00Z"),
    ("1d 2h", "UTC", "2026-05-02T12:00:00Z"),
    # epochs (seconds, milliseconds), ISO 8601 with offsets, zones and offsets
    ("|1755615600", "UTC", "2025-08-19T15:00:00Z"),
    ("|1755615600000", "UTC", "2025-08-19T15:00:00Z"),
    ("2026-09-14T06:43:00+02:00", "UTC", "2026-09-14T04:43:00Z"),
    ("2026-09-14 06:43 UTC", "Asia/Tokyo", "2026-09-14T06:43:00Z"),
    ("5pm UTC+2", "UTC", "2026-05-01T15:00:00Z"),
    ("5pm (GMT-05:00)", "UTC", "2026-05-01T22:00:00Z"),
    ("5pm (Etc/GMT+5)", "UTC", "2026-05-01T22:00:00Z"),
])
def test_grammar(text, tz, expected):
    assert parse_when(text, NOW, tz) == at(expected)


def test_weekday_uses_the_offset_of_the_reset_date():
    # seen Friday 2026-10-30 (EDT); Monday 2026-11-02 is EST
    assert parse_when("Mon 9am (America/New_York)", at("2026-10-30T15:00:00Z"), "UTC") == at("2026-11-02T14:00:00Z")


@pytest.mark.parametrize("now,tz,expected", [
    # the same local date, even when passed (Codex prints a date for any other day)
    ("2026-12-02T10:00:00Z", "UTC", "2026-12-02T23:59:00Z"),
    ("2026-12-02T23:59:40Z", "UTC", "2026-12-02T23:59:00Z"),
    # read just after local midnight, the line printed before it: the reset that just passed, not one a
    # day later (the tab would have waited 24 h)
    ("2026-12-03T00:00:30Z", "UTC", "2026-12-02T23:59:00Z"),
    ("2026-12-03T00:58:59Z", "UTC", "2026-12-02T23:59:00Z"),
    # more than an hour after it: the same local date again
    ("2026-12-03T00:59:01Z", "UTC", "2026-12-03T23:59:00Z"),
    # local midnight in the box's zone (New York, EST = UTC-5)
    ("2026-12-03T05:00:30Z", "America/New_York", "2026-12-03T04:59:00Z"),
    ("2026-12-03T04:59:40Z", "America/New_York", "2026-12-03T04:59:00Z"),
])
def test_codex_time_only_is_the_same_local_date_with_an_hour_of_grace_across_midnight(now, tz, expected):
    assert parse_when("11:59 PM", at(now), tz, "codex") == at(expected)


@pytest.mark.parametrize("text,now,tz,expected", [
    # a date without a year, read just after local midnight: the reset that just passed, not a year later
    ("Dec 8, 11:59pm (UTC)", "2026-12-09T00:01:21Z", "UTC", "2026-12-08T23:59:00Z"),
    ("Dec 7, 11:58pm (America/New_York)", "2026-12-08T05:00:02Z", "UTC", "2026-12-08T04:58:00Z"),
    ("Dec 31, 11:59pm (UTC)", "2027-01-01T00:30:00Z", "UTC", "2026-12-31T23:59:00Z"),
    # more than an hour after it, or a date before yesterday: the next such date, as before
    ("Dec 8, 11:59pm (UTC)", "2026-12-09T01:00:00Z", "UTC", "2027-12-08T23:59:00Z"),
    ("Dec 7, 11:59pm (UTC)", "2026-12-09T00:01:00Z", "UTC", "2027-12-07T23:59:00Z"),
    ("Dec 9, 1am (UTC)", "2026-12-09T22:00:00Z", "UTC", "2026-12-09T01:00:00Z"),
    # a weekday, read just after local midnight (2026-12-08 is a Tuesday): last night's, not next week's
    ("Mon 11:59pm (UTC)", "2026-12-08T00:01:00Z", "UTC", "2026-12-07T23:59:00Z"),
    ("Mon 11:59pm (UTC)", "2026-12-08T01:00:00Z", "UTC", "2026-12-14T23:59:00Z"),
])
def test_a_reset_just_passed_keeps_its_date_across_local_midnight(text, now, tz, expected):
    assert parse_when(text, at(now), tz) == at(expected)


@pytest.mark.parametrize("text,now,expected", [
    # New York falls back at 2:00 EDT (06:00Z) on 2026-11-01: 1:00-1:59 is shown twice
    ("1:05am", "2026-11-01T06:07:05Z", "2026-11-01T06:05:00Z"),   # the 1:05 EST just passed, not tomorrow's
    ("1am", "2026-11-01T06:05:35Z", "2026-11-01T06:00:00Z"),
    ("1:30am", "2026-11-01T05:10:00Z", "2026-11-01T05:30:00Z"),   # during EDT: the first 1:30 (EDT)
    ("1:30am", "2026-11-01T06:20:00Z", "2026-11-01T05:30:00Z"),   # the first passed 50 min ago: re-check now
    # spring forward on 2026-03-08: 2:30 never shows (no agent prints it); read as before, 3:30 EDT
    ("2:30am", "2026-03-08T06:00:00Z", "2026-03-08T07:30:00Z"),
])
def test_a_clock_in_the_repeated_dst_hour_is_never_read_a_day_late(text, now, expected):
    assert parse_when(text + " (America/New_York)", at(now), "UTC") == at(expected)


def test_span_names_what_was_read():
    assert parse_when_span("5pm (UTC) · /upgrade", NOW, "UTC")[1] == "5pm (UTC)"
    assert parse_when_span(" at 3:05 PM.", NOW, "UTC")[1] == "at 3:05 PM."
    assert parse_when_span("later", NOW, "UTC") == (None, "")


@pytest.mark.parametrize("text", [
    "later", "more than 24 hours out", "13pm", "Feb 30 at 9am", "in 99999999 days", "|99999999999999",
    "Sep 14, 9999 6:43 AM", "1999-01-01 10:00", "25:00", "",
])
def test_impossible_or_absurd_times_are_none(text):
    assert parse_when(text, NOW, "UTC") is None


def test_is_relative_names_the_forms_that_count_from_now():
    """A relative reset reads later at every later ``now`` (the planner keeps its first reading)."""
    from controller.domain.timeparse import is_relative

    for span in ("in 3 hours 2 minutes", "8m", "3h 20m", "in 5 days 22 hours 11 minutes", "after 5 minutes"):
        assert is_relative(span), span
    for span in ("5:13pm (UTC)", "at 11:59 PM", "Mon 12:00am", "Dec 8, 11:59pm", "2026-04-21 02:53", "|1755615600",
                 "21 de abr. de 2026 02:53", "8pm", "12am", ""):
        assert not is_relative(span), span
