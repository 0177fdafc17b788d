"""Usage parsers against every corpus usage payload, plus nulls, unknown keys and malformed values."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from controller.providers.parse import (
    UsageParseError,
    format_utc,
    parse_anthropic_usage,
    parse_codex_429,
    parse_openai_usage,
    usage_to_json,
    window_name,
)
from controller.agents.usage_files import parse_rate_limit_event, parse_rate_limit_event_usage, parse_token_count

pytestmark = pytest.mark.unit

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "usage-payloads.jsonl"
CASES = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
NOW = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def _windows_json(usage):
    return usage_to_json(usage)["windows"]


def test_corpus_has_the_new_shapes():
    """issue 13: the limits[] shape, an event with several windows, weekly in Codex's primary slot."""
    ids = {c["id"] for c in CASES}
    assert {"NU01", "NE01", "NT01"} <= ids and len(CASES) >= 11


def test_corpus_has_every_kind():
    assert {c["kind"] for c in CASES} >= {"usage_endpoint", "rate_limit_event", "token_count", "error_429"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_payload(case):
    kind, payload, expect = case["kind"], case["payload"], case["expect"]
    if kind == "usage_endpoint":
        parse = parse_anthropic_usage if case["provider"] == "anthropic" else parse_openai_usage
        usage = parse(payload, NOW)
        assert _windows_json(usage) == expect
        assert usage.read_at == NOW.replace(microsecond=0)
    elif kind == "rate_limit_event":
        limited, window = parse_rate_limit_event(payload)
        assert limited is expect["limited"]
        assert window.name == expect["window"]
        assert format_utc(window.resets_at) == expect["resets_at"]
        named = {k: v for k, v in expect.items() if k in ("five_hour", "weekly", "monthly")}
        if named:  # an event with several windows (unifiedWindows): every one of them
            assert _windows_json(parse_rate_limit_event_usage(payload)[1]) == named
    elif kind == "token_count":
        usage = parse_token_count(payload)
        assert _windows_json(usage) == expect
    elif kind == "error_429":
        limited, resets_at, usage = parse_codex_429(payload, case.get("headers", {}))
        assert limited is expect["limited"]
        assert expect["kind"] == "usage" and limited  # usage_limit_reached: a reset lifts it
        assert format_utc(resets_at) == expect["resets_at"]
    else:  # pragma: no cover - a new kind in the corpus needs a parser
        pytest.fail(f"no parser for kind {kind}")


@pytest.mark.parametrize(
    ("seconds", "name"),
    [(18000, "five_hour"), (604800, "weekly"), (2628000, "monthly"), (2592000, "monthly"), (2678400, "monthly"),
     (3600, "3600s"), (86400, "86400s")],
)
def test_window_name(seconds, name):
    assert window_name(seconds) == name


def test_resets_at_is_utc_to_the_second():
    usage = parse_anthropic_usage(
        {"five_hour": {"utilization": 5, "resets_at": "2026-03-10T06:59:59.999+02:00"}}, NOW
    )
    w = usage.windows["five_hour"]
    assert w.resets_at == datetime(2026, 3, 10, 4, 59, 59, tzinfo=timezone.utc)
    assert w.resets_at.tzinfo is not None and w.utilization == 5.0


# ---------------------------------------------------------------------------------------------- nulls


def test_anthropic_null_windows_are_absent_not_zero():
    usage = parse_anthropic_usage(
        {"five_hour": None, "seven_day": {"utilization": None, "resets_at": None}, "seven_day_opus": None}, NOW
    )
    assert usage.windows == {}
    assert usage.read_at is not None


def test_anthropic_null_resets_at_kept_as_none():
    usage = parse_anthropic_usage({"five_hour": {"utilization": 0.0, "resets_at": None}}, NOW)
    assert usage.windows["five_hour"].utilization == 0.0
    assert usage.windows["five_hour"].resets_at is None


def test_openai_null_rate_limit_and_windows():
    assert parse_openai_usage({"plan_type": "free", "rate_limit": None}, NOW).windows == {}
    assert parse_openai_usage({}, NOW).windows == {}
    usage = parse_openai_usage(
        {"rate_limit": {"primary_window": None, "secondary_window": {"used_percent": None,
                                                                     "limit_window_seconds": 604800}}}, NOW)
    assert usage.windows == {}


def test_openai_reset_after_seconds_counts_from_now():
    usage = parse_openai_usage(
        {"rate_limit": {"primary_window": {"used_percent": 3, "limit_window_seconds": 18000,
                                           "reset_after_seconds": 600}}}, NOW)
    assert format_utc(usage.windows["five_hour"].resets_at) == "2026-01-01T12:10:00Z"


def test_openai_tertiary_monthly_window():
    usage = parse_openai_usage(
        {"rate_limit": {"primary_window": {"used_percent": 10, "limit_window_seconds": 604800, "reset_at": 1780000000},
                        "tertiary_window": {"used_percent": 50, "limit_window_seconds": 2628000,
                                            "reset_at": 1781000000}}}, NOW)
    assert set(usage.windows) == {"weekly", "monthly"}
    assert usage.windows["monthly"].utilization == 50.0


def test_token_count_null_rate_limits_is_no_data():
    usage = parse_token_count(
        {"timestamp": "2026-05-04T10:00:00.000Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": None, "rate_limits": None}})
    assert usage.windows == {}
    assert format_utc(usage.read_at) == "2026-05-04T10:00:00Z"


def test_token_count_resets_in_seconds_from_line_timestamp():
    usage = parse_token_count(
        {"timestamp": "2026-05-04T10:00:00.000Z", "payload": {"type": "token_count", "rate_limits": {
            "primary": {"used_percent": 12.5, "window_minutes": 10080, "resets_in_seconds": 3600}}}})
    assert _windows_json(usage) == {"weekly": {"utilization": 12.5, "resets_at": "2026-05-04T11:00:00Z"}}


def test_token_count_inner_payload_accepted():
    usage = parse_token_count({"type": "token_count", "rate_limits": {
        "primary": {"used_percent": 1, "window_minutes": 300, "resets_at": 1763483205}}})
    assert set(usage.windows) == {"five_hour"}


def test_rate_limit_event_allowed_without_utilization():
    limited, w = parse_rate_limit_event({"type": "rate_limit_event", "rate_limit_info": {
        "status": "allowed", "rateLimitType": "five_hour"}})
    assert not limited and w.name == "five_hour" and w.resets_at is None


def test_rate_limit_event_fraction_scaled_and_rejected_default():
    _, w = parse_rate_limit_event({"rate_limit_info": {"status": "allowed_warning", "rateLimitType": "seven_day",
                                                       "utilization": 0.78, "resetsAt": 1784283600}})
    assert w.utilization == pytest.approx(78.0)
    limited, w = parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                             "resetsAt": 1778565600}})
    assert limited and w.utilization == 100.0


def test_codex_429_headers_become_windows_named_by_length():
    case = next(c for c in CASES if c["kind"] == "error_429")
    _, _, usage = parse_codex_429(case["payload"], case["headers"])
    assert usage.windows["five_hour"].utilization == 100.0
    assert usage.windows["weekly"].utilization == 80.0


def test_codex_429_resets_from_headers_when_body_has_none():
    headers = {"X-Codex-Primary-Used-Percent": "100.0", "X-Codex-Primary-Window-Minutes": "10080",
               "X-Codex-Primary-Reset-At": "1778239400",
               "x-codex-secondary-used-percent": "100", "x-codex-secondary-window-minutes": "300",
               "x-codex-secondary-reset-at": "1777936568"}
    limited, resets_at, usage = parse_codex_429({"error": {"type": "usage_limit_reached"}}, headers)
    assert limited
    assert resets_at == usage.windows["weekly"].resets_at  # the latest reset of the exhausted windows wins


def test_codex_429_other_error_not_limited():
    limited, resets_at, _ = parse_codex_429({"error": {"type": "rate_limit_exceeded"}}, {})
    assert not limited and resets_at is None


def test_codex_429_resets_in_seconds_needs_now():
    body = {"error": {"type": "usage_limit_reached", "resets_in_seconds": 60}}
    assert parse_codex_429(body, {})[1] is None
    assert format_utc(parse_codex_429(body, {}, now=NOW)[1]) == "2026-01-01T12:01:00Z"


# ---------------------------------------------------------------------------------------------- unknown keys, >100


def test_unknown_keys_ignored():
    usage = parse_anthropic_usage(
        {"five_hour": {"utilization": 1, "resets_at": None, "new_field": [1, 2]}, "brand_new_window": {"x": "y"},
         "seven_day_opus": {"utilization": 99.0, "resets_at": None}, "extra_usage": "weird"}, NOW)
    assert set(usage.windows) == {"five_hour"}
    usage = parse_openai_usage(
        {"plan_type": "plus", "credits": {"balance": "1"}, "rate_limit": {"primary_window": {
            "used_percent": 1, "limit_window_seconds": 18000, "mystery": True}, "extra": 5}}, NOW)
    assert set(usage.windows) == {"five_hour"}


def test_utilization_over_100_kept():
    assert parse_anthropic_usage({"five_hour": {"utilization": 112.0, "resets_at": None}}, NOW
                                 ).windows["five_hour"].utilization == 112.0
    assert parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 130, "limit_window_seconds": 18000}}},
                              NOW).windows["five_hour"].utilization == 130.0
    _, w = parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                       "utilization": 1.07}})
    assert w.utilization == pytest.approx(107.0)


# ---------------------------------------------------------------------------------------------- malformed


SECRET = "sk-ant-oat01-SECRETSECRET"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: parse_anthropic_usage({"five_hour": {"utilization": SECRET}}, NOW), "five_hour.utilization"),
        (lambda: parse_anthropic_usage({"five_hour": {"utilization": 5, "resets_at": SECRET}}, NOW),
         "five_hour.resets_at"),
        (lambda: parse_anthropic_usage({"seven_day": SECRET}, NOW), "seven_day"),
        (lambda: parse_anthropic_usage({"five_hour": {"utilization": -3}}, NOW), "five_hour.utilization"),
        (lambda: parse_anthropic_usage({"five_hour": {"utilization": True}}, NOW), "five_hour.utilization"),
        (lambda: parse_anthropic_usage([SECRET], NOW), "payload"),
        (lambda: parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 5}}}, NOW),
         "rate_limit.primary_window.limit_window_seconds"),
        (lambda: parse_openai_usage({"rate_limit": {"secondary_window": {"used_percent": SECRET,
                                                                         "limit_window_seconds": 1}}}, NOW),
         "rate_limit.secondary_window.used_percent"),
        (lambda: parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 5, "limit_window_seconds": 18000,
                                                                       "reset_at": SECRET}}}, NOW),
         "rate_limit.primary_window.reset_at"),
        (lambda: parse_openai_usage({"rate_limit": SECRET}, NOW), "rate_limit"),
        (lambda: parse_rate_limit_event({"rate_limit_info": {"status": "rejected"}}), "rate_limit_info.rateLimitType"),
        (lambda: parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                             "resetsAt": SECRET}}), "rate_limit_info.resetsAt"),
        (lambda: parse_token_count({"payload": {"rate_limits": {"primary": {"used_percent": 5}}}}),
         "payload.rate_limits.primary.window_minutes"),
        (lambda: parse_token_count({"timestamp": SECRET, "payload": {"rate_limits": None}}), "timestamp"),
        (lambda: parse_codex_429({"error": {"type": "usage_limit_reached", "resets_at": SECRET}}, {}),
         "error.resets_at"),
        (lambda: parse_codex_429({}, {"x-codex-primary-used-percent": SECRET, "x-codex-primary-window-minutes": "300"}),
         "x-codex-primary-used-percent"),
    ],
)
def test_malformed_raises_naming_field(call, field):
    with pytest.raises(UsageParseError) as ei:
        call()
    assert ei.value.field == field
    assert field in str(ei.value)
    assert SECRET not in str(ei.value)


# ---------------------------------------------------------------------------------------------- issue 13 shapes


LIMITS = [
    {"kind": "session", "percent": 34, "resets_at": "2026-08-15T07:29:59.8+02:00", "scope": None},
    {"kind": "weekly_all", "percent": 81, "resets_at": "2026-08-15T04:59:59+02:00", "scope": None},
    {"kind": "weekly_scoped", "percent": 99, "resets_at": "2026-08-16T04:59:59+02:00",
     "scope": {"model": {"id": None, "display_name": "Fable"}}},
]


def test_limits_list_per_model_entry_is_not_the_account_weekly():
    usage = parse_anthropic_usage({"limits": LIMITS}, NOW)
    assert _windows_json(usage) == {"five_hour": {"utilization": 34.0, "resets_at": "2026-08-15T05:29:59Z"},
                                    "weekly": {"utilization": 81.0, "resets_at": "2026-08-15T02:59:59Z"}}
    only_model = parse_anthropic_usage({"limits": LIMITS[2:]}, NOW)
    assert only_model.windows == {}  # no data, not the model's 99 % as the account's weekly


def test_both_anthropic_shapes_together():
    usage = parse_anthropic_usage({"five_hour": {"utilization": 30.0, "resets_at": "2026-08-15T05:29:59Z"},
                                   "seven_day": None, "limits": LIMITS}, NOW)
    assert usage.windows["five_hour"].utilization == 34.0  # the more used reading of the same window
    assert usage.windows["weekly"].utilization == 81.0     # only the limits[] shape has it


def test_rate_limit_event_per_model_type_is_not_weekly():
    limited, w = parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "seven_day_opus",
                                                             "resetsAt": 1778565600}})
    assert limited and w.name == "weekly_opus"


def test_rate_limit_event_several_windows_as_a_list_and_rejected():
    limited, usage = parse_rate_limit_event_usage({"rate_limit_info": {
        "status": "rejected", "rateLimitType": "seven_day", "resetsAt": 1789308000,
        "unifiedWindows": [{"rateLimitType": "five_hour", "utilization": 0.4, "resetsAt": 1788868200},
                           {"rateLimitType": "seven_day", "utilization": 0.98, "resetsAt": 1789308000}]}})
    assert limited
    assert usage.windows["weekly"].utilization == 100.0  # rejected: exhausted whatever the fraction said
    assert usage.windows["five_hour"].utilization == pytest.approx(40.0)


@pytest.mark.parametrize(("call", "field"), [
    (lambda: parse_anthropic_usage({"five_hour": {"utilization": float("nan")}}, NOW), "five_hour.utilization"),
    (lambda: parse_anthropic_usage({"five_hour": {"utilization": float("inf")}}, NOW), "five_hour.utilization"),
    (lambda: parse_anthropic_usage({"five_hour": {"utilization": 1e300}}, NOW), "five_hour.utilization"),
    (lambda: parse_anthropic_usage({"limits": [{"kind": "session", "percent": -1}]}, NOW), "limits[0].percent"),
    (lambda: parse_anthropic_usage({"limits": "x"}, NOW), "limits"),
    (lambda: parse_anthropic_usage({"five_hour": {"utilization": 5, "resets_at": "9999-12-31T23:59:59-02:00"}}, NOW),
     "five_hour.resets_at"),
    (lambda: parse_anthropic_usage({"five_hour": {"utilization": 5, "resets_at": "9999-12-31T23:59:59+00:00"}}, NOW),
     "five_hour.resets_at"),
    (lambda: parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 5, "limit_window_seconds": 18000,
                                                                   "reset_after_seconds": 1e300}}}, NOW),
     "rate_limit.primary_window.reset_after_seconds"),
    (lambda: parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 5, "limit_window_seconds": 18000,
                                                                   "reset_after_seconds": -5}}}, NOW),
     "rate_limit.primary_window.reset_after_seconds"),
    (lambda: parse_openai_usage({"rate_limit": {"primary_window": {"used_percent": 5, "limit_window_seconds": 1e300}}},
                                NOW), "rate_limit.primary_window.limit_window_seconds"),
    (lambda: parse_token_count({"timestamp": "2026-05-04T10:00:00Z", "payload": {"rate_limits": {"primary": {
        "used_percent": 5, "window_minutes": 300, "resets_in_seconds": 1e300}}}}),
     "payload.rate_limits.primary.resets_in_seconds"),
    (lambda: parse_token_count({"payload": {"rate_limits": {"primary": {
        "used_percent": 5, "window_minutes": 1e300}}}}), "payload.rate_limits.primary.window_minutes"),
    (lambda: parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                         "resetsAt": 253402300800}}), "rate_limit_info.resetsAt"),
    (lambda: parse_rate_limit_event({"rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                         "resetsAt": -5}}), "rate_limit_info.resetsAt"),
    (lambda: parse_codex_429({"error": {"type": "usage_limit_reached", "resets_in_seconds": 1e300}}, {}, now=NOW),
     "error.resets_in_seconds"),
    (lambda: parse_codex_429({}, {"x-codex-primary-used-percent": "nan", "x-codex-primary-window-minutes": "300"}),
     "x-codex-primary-used-percent"),
    (lambda: parse_codex_429({}, {"x-codex-primary-used-percent": "5", "x-codex-primary-window-minutes": "1e999"}),
     "x-codex-primary-window-minutes"),
])
def test_out_of_range_numbers_raise_the_parse_error_not_a_crash(call, field):
    with pytest.raises(UsageParseError) as ei:
        call()
    assert ei.value.field == field


def test_json_with_1e999_and_nan_is_a_parse_error():
    body = json.loads('{"five_hour": {"utilization": 1e999, "resets_at": null}}')
    with pytest.raises(UsageParseError):
        parse_anthropic_usage(body, NOW)
    body = json.loads('{"five_hour": {"utilization": NaN}}')
    with pytest.raises(UsageParseError):
        parse_anthropic_usage(body, NOW)
