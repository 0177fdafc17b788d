"""The metrics module: one prefix, suffix conventions, a version info metric, no secret or
high-cardinality labels, and the series of a deleted object removed."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from controller import __version__
from controller import metrics as M

pytestmark = pytest.mark.unit

# Labels that would carry a secret, an identity or unbounded values (a tab's text, a time).
FORBIDDEN_LABELS = {"token", "access_token", "account", "account_id", "email", "user", "secret", "credentials",
                    "message", "text", "line", "evidence", "tab", "pod", "resets_at", "time", "url"}
# Every label in use, on purpose: object names the user chose, or small closed sets.
ALLOWED_LABELS = {"namespace", "box", "subscription", "agent", "result", "reason", "window", "state", "source",
                  "kind", "provider", "version", "action", "step"}  # action, step: closed enums (journal)


def families():
    return list(M.REGISTRY.collect())


def test_every_metric_has_the_prefix_and_the_suffix_conventions():
    for fam in families():
        assert fam.name.startswith(M.PREFIX), fam.name
        if fam.type == "counter":
            assert all(s.name.startswith(fam.name) for s in fam.samples)
            assert fam.name + "_total" in {s.name for s in fam.samples} or not fam.samples
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), fam.name


def test_build_info_carries_the_version():
    text = generate_latest(M.REGISTRY).decode()
    assert f'agentbox_build_info{{version="{__version__}"}} 1.0' in text


def test_labels_are_owned_and_never_secret():
    for metric, names in M._LABELS.items():
        assert not set(names) & FORBIDDEN_LABELS, (metric, names)
        assert set(names) <= ALLOWED_LABELS, (metric, names)


def test_metrics_issue_5_needs_exist_with_their_labels():
    expected = {
        M.SWITCHES: ("namespace", "box", "reason"),
        M.RESERVE_STOPS: ("namespace", "subscription", "window"),
        M.ROTATION_GROUP_EXHAUSTED: ("namespace", "box"),
        M.SUBSCRIPTION_UTILIZATION: ("namespace", "subscription", "window"),
        M.SUBSCRIPTION_RESET: ("namespace", "subscription", "window"),
        M.SUBSCRIPTION_STATE: ("namespace", "subscription", "state"),
    }
    for metric, labels in expected.items():
        assert M._LABELS[metric] == labels


def _series(metric_name: str, **labels: str) -> list[dict[str, str]]:
    out = []
    for fam in families():
        for s in fam.samples:
            if s.name.startswith(metric_name) and all(s.labels.get(k) == v for k, v in labels.items()):
                out.append(s.labels)
    return out


def test_forget_box_removes_every_series_of_the_box_only():
    M.TABS_NEEDING_HUMAN.labels("ns-f", "gone").set(1)
    M.TABS_RATE_LIMITED.labels("ns-f", "gone").set(2)
    M.RESUMES.labels("ns-f", "gone", "codex", "ok").inc()
    M.SWITCHES.labels("ns-f", "gone", "limit").inc()
    M.ROTATION_GROUP_EXHAUSTED.labels("ns-f", "gone").set(1)
    M.TABS_RATE_LIMITED.labels("ns-f", "kept").set(1)
    M.RESUMES.labels("other-ns", "gone", "codex", "ok").inc()

    M.forget_box("ns-f", "gone")

    assert _series("agentbox_", namespace="ns-f", box="gone") == []
    assert _series("agentbox_tabs_rate_limited", namespace="ns-f", box="kept")
    assert _series("agentbox_resumes", namespace="other-ns", box="gone")
    M.forget_box("ns-f", "gone")  # idempotent
    M.forget_box("ns-f", "kept")
    M.forget_box("other-ns", "gone")


def test_forget_subscription_removes_every_series_of_the_subscription():
    M.set_subscription_state("ns-s", "claude-a", "Reserved")
    M.SUBSCRIPTION_UTILIZATION.labels("ns-s", "claude-a", "five_hour").set(81)
    M.SUBSCRIPTION_RESET.labels("ns-s", "claude-a", "five_hour").set(1.7e9)
    M.RESERVE_STOPS.labels("ns-s", "claude-a", "five_hour").inc()
    M.set_subscription_state("ns-s", "claude-b", "Available")

    states = {s["state"]: s for s in _series("agentbox_subscription_state", namespace="ns-s", subscription="claude-a")}
    assert set(states) == set(M.SUBSCRIPTION_STATES)
    text = generate_latest(M.REGISTRY).decode()
    assert 'agentbox_subscription_state{namespace="ns-s",state="Reserved",subscription="claude-a"} 1.0' in text
    assert 'agentbox_subscription_state{namespace="ns-s",state="Available",subscription="claude-a"} 0.0' in text

    M.forget_subscription("ns-s", "claude-a")

    assert _series("agentbox_", namespace="ns-s", subscription="claude-a") == []
    assert _series("agentbox_subscription_state", namespace="ns-s", subscription="claude-b")
    M.forget_subscription("ns-s", "claude-b")


async def test_every_owned_exec_is_counted_the_login_keepers_too():
    """The one exec path (`owned_exec`, used by the tab watcher, box files and the login keeper) counts every
    call by result; a pod the box does not own is refused before any call and counts nothing."""
    from types import SimpleNamespace

    from controller.kube.exec import owned_exec, owned_exec_open
    from controller.kube.objects import NotOwned

    def value(result: str) -> float:
        return M.REGISTRY.get_sample_value("agentbox_exec_calls_total", {"result": result}) or 0.0

    pod = {"metadata": {"namespace": "ns", "name": "box-0", "ownerReferences": [
        {"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentBox", "name": "box", "uid": "u-1", "controller": True}]}}
    calls: list[tuple] = []

    async def transport(namespace, name, container, argv, stdin=None):
        calls.append((namespace, name, container, argv, stdin))
        if argv[0] == "boom":
            raise OSError("connection reset")
        return SimpleNamespace(rc=0 if argv[0] == "true" else 4, stdout="", stderr="")

    async def opener(namespace, name, container, argv):
        return object()

    before = {r: value(r) for r in ("ok", "nonzero", "error", "stream")}
    run = owned_exec(transport, pod, "u-1", "box", "agent")
    await run(["true"])
    await run(["sh", "-c", "exit 4", "sh"], stdin="login text")  # the login keeper's replace: stdin
    with pytest.raises(OSError):
        await run(["boom"])
    await owned_exec_open(opener, pod, "u-1", "box", "agent")(["tmux", "-C", "attach"])
    assert [value(r) - before[r] for r in ("ok", "nonzero", "error", "stream")] == [1, 1, 1, 1]
    assert calls[1] == ("ns", "box-0", "agent", ["sh", "-c", "exit 4", "sh"], "login text")
    with pytest.raises(NotOwned):
        owned_exec(transport, pod, "u-other", "box", "agent")
    assert len(calls) == 3
