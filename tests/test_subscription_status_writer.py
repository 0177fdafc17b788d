"""One status writer per Subscription (issue 12): the validate handler, the usage reader and the login keeper
write through the one `StatusWriter` the runtime holds for the object; each merges its own conditions by
type, so one writer's condition never erases another's, even when it acts on a stale copy of the object; a
pass that changes nothing sends no patch; no handler writes status through kopf's patch."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from controller import constants as C
from controller.handlers import subscriptions as handlers
from controller.runtime import Runtime
from controller.service.status import forget_writer, subscription_writer
from controller.service.subscriptions import SubscriptionReader, validate_subscription

from harness.reader_world import NS, reader_runtime, subscription as stale_body

pytestmark = pytest.mark.unit


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    return reader_runtime(monkeypatch)


def stored(rt: Runtime) -> dict[str, Any]:
    return rt.kube.objects[(C.SUBSCRIPTION_PLURAL, NS, "shared")]["status"]  # type: ignore[attr-defined]


def types(rt: Runtime) -> dict[str, str]:
    return {c["type"]: c["reason"] for c in stored(rt).get("conditions") or []}


async def test_the_three_writers_share_one_writer_held_in_the_runtime(rt: Runtime):
    writer = subscription_writer(rt, NS, "shared")
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    assert reader.logins._writer() is writer
    await validate_subscription(stale_body(), rt)
    await reader.tick(stale_body())
    assert rt.status_writers == {(C.SUBSCRIPTION_PLURAL, NS, "shared"): writer}
    forget_writer(rt, C.SUBSCRIPTION_PLURAL, NS, "shared")
    assert rt.status_writers == {} and subscription_writer(rt, NS, "shared") is not writer


async def test_one_writers_condition_never_erases_anothers(rt: Runtime):
    """The keeper's LoginRefreshed survives the validate handler and the reader, both acting on a copy of
    the Subscription taken before the keeper wrote (a merge patch of their whole list would erase it)."""
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    await reader.logins._writer().write({}, [{"type": "LoginRefreshed", "status": "False", "reason": "RefreshAnswerLost",
                                              "message": "lost", "lastTransitionTime": "2026-03-10T00:00:00Z"}])
    events = await validate_subscription(stale_body(), rt)
    assert events == []
    assert types(rt) == {"LoginRefreshed": "RefreshAnswerLost", C.COND_CREDENTIALS_VALID: C.R_RECONCILED}
    assert stored(rt)["observedGeneration"] == 1 and stored(rt)["threshold"]
    await reader.tick(stale_body())
    assert types(rt) == {"LoginRefreshed": "RefreshAnswerLost", C.COND_CREDENTIALS_VALID: C.R_RECONCILED,
                         C.COND_USAGE_FETCHED: C.R_USAGE_READ}
    assert stored(rt)["state"] == "Available" and stored(rt)["account"] == "acct-a"
    # and the other way round: the validate handler's verdict on a broken Secret is not undone by the
    # keeper's own write, and the reader (which reads the same Secret) agrees with it
    rt.kube.secrets[(NS, "login-shared")] = {"credentials.json": "{}"}  # type: ignore[attr-defined]
    await validate_subscription(stale_body(), rt)
    await reader.logins._writer().write({"account": "acct-a"})
    assert types(rt)[C.COND_CREDENTIALS_VALID] == C.R_INVALID_LOGIN and "LoginRefreshed" in types(rt)


async def test_a_pass_that_changes_nothing_sends_no_patch(rt: Runtime):
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    await reader.tick(stale_body())
    sent = len(rt.kube.patches)  # type: ignore[attr-defined]
    assert sent >= 1
    await reader.tick(stale_body())
    await reader.tick(stale_body())
    assert len(rt.kube.patches) == sent  # type: ignore[attr-defined]


def test_no_subscription_handler_writes_status_through_kopfs_patch():
    assert "patch" not in inspect.signature(handlers.validate).parameters
    tree = ast.parse(Path(handlers.__file__).read_text())
    attrs = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not any(a.startswith("patch.") for a in attrs)


async def test_conditions_the_store_already_holds_cost_no_request(rt: Runtime):
    """A writer whose conditions equal the stored ones and that has no field to write sends nothing (a
    restarted reader that finds its conditions already stored)."""
    cond = {"type": C.COND_USAGE_FETCHED, "status": "True", "reason": C.R_USAGE_READ, "message": "Usage read",
            "lastTransitionTime": "2026-03-10T00:00:00Z"}
    body = stale_body()
    body["status"] = {"conditions": [cond]}
    rt.kube.objects[(C.SUBSCRIPTION_PLURAL, NS, "shared")] = body  # type: ignore[attr-defined]
    writer = subscription_writer(rt, NS, "shared")
    writer.seen(body)
    assert await writer.write({}, [dict(cond, lastTransitionTime="2026-03-10T01:00:00Z")]) is False
    assert rt.kube.patches == []  # type: ignore[attr-defined]
    assert await writer.write({}, [dict(cond, status="False", reason="Throttled")]) is True
    assert len(rt.kube.patches) == 1  # type: ignore[attr-defined]
