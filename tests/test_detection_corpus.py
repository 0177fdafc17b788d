"""Every case of tests/fixtures/corpus/limit-screens.jsonl through the detector (corpus README rules)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from controller.agents.registry import detect

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "limit-screens.jsonl"
CASES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_corpus_is_complete() -> None:
    assert len(CASES) >= 62  # the shared corpus as of issue 13 (N01-N40 added)
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert all(case.get("source") for case in CASES)


@pytest.mark.unit
@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_corpus_case(case: dict) -> None:
    expect = case["expect"]
    result = detect(case["agent"], case["screen"], _instant(case["now"]), case["tz"])
    context = f"{case['id']} ({case['source']}): {result.to_json()}"

    if "state" in expect:
        assert result.state.value == expect["state"], context
    if "state_not" in expect:
        assert result.state.value != expect["state_not"], context
    if "kind" in expect:
        assert (result.kind.value if result.kind else None) == expect["kind"], context
    if "resets_at" in expect:
        if expect["resets_at"] is None:
            assert result.resets_at is None, context
        else:
            assert result.resets_at is not None, context
            assert result.resets_at.utcoffset().total_seconds() == 0, context
            assert abs((result.resets_at - _instant(expect["resets_at"])).total_seconds()) <= 60, context
    if expect.get("state") == "rate_limited":
        # the README: window is given "where the line says which"; otherwise the line names none
        assert result.window == expect.get("window"), context
        assert result.evidence, context
        assert result.detected_by.startswith("pattern:"), context
    assert result.auto_continue is expect.get("auto_continue", False), context
    assert result.limit_menu is expect.get("limit_menu", False), context
    if result.limit_menu:
        assert result.menu_choice is not None, context
