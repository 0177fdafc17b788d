"""What a tab watcher pass no longer redoes when nothing it depends on changed (bench/scale.py: a thousand
passes at a reset): the spec is validated, its patterns compiled and its template hashed once per spec
generation, and a new generation is seen at once."""

from __future__ import annotations

from typing import Any

import pytest

from controller.models import AgentBoxSpec
from controller.service.tabs import BoxWatcher

pytestmark = pytest.mark.unit


def body(generation: int | None, uid: str = "u1", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "box-a", "uid": uid, "generation": generation},
            "spec": {"agent": "claude-code", "subscription": "s1",
                     "template": {"spec": {"containers": [{"name": "box", "image": "img:1"}]}}, **spec}}


def watcher() -> BoxWatcher:
    w = BoxWatcher.__new__(BoxWatcher)
    w._spec_key, w._spec_parts = None, None
    return w


def test_the_spec_is_parsed_once_per_generation_and_a_new_generation_is_seen(monkeypatch) -> None:
    calls = []
    validate = AgentBoxSpec.model_validate

    def counting(data: Any, *a: Any, **kw: Any) -> AgentBoxSpec:
        calls.append(1)
        return validate(data, *a, **kw)
    monkeypatch.setattr(AgentBoxSpec, "model_validate", counting)
    w = watcher()
    first = w._parse_spec(body(1))
    assert first is not None and first[2].subscription == "s1"
    for _ in range(5):
        assert w._parse_spec(body(1)) is first
    assert len(calls) == 1, "an unchanged generation is not validated again"

    changed = w._parse_spec(body(2, subscription="s2", detection={"patterns": [{"regex": "(", "kind": "usage"}]}))
    assert changed is not None and changed[2].subscription == "s2" and len(calls) == 2
    assert changed[3][1], "the new spec's invalid pattern is reported"
    assert changed[4] == first[4], "same template, same hash"
    assert w._parse_spec(body(2, uid="u2"))[2].subscription == "s1", "another object: parsed again"
    assert w._parse_spec(body(3, agent="nope")) is None, "an invalid spec"
    assert w._parse_spec(body(None))[2].subscription == "s1"
    assert w._parse_spec(body(None, subscription="s3"))[2].subscription == "s3", "no generation: never cached"
