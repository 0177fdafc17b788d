"""One status writer per AgentBox: the reconcile handler and the tab watcher write the box's status through
the same `StatusWriter` (held by the runtime), never through kopf's patch; each keeps the other's
conditions (merged by type) and a write is never skipped because another writer changed status since.

Against the emulated API server over the controller's own REST transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import kopf
import kubernetes.client
import pytest
import pytest_asyncio

from agentbox_sim.kube import KubeEmulator
from controller import constants as C
from controller.conditions import set_condition
from controller.domain.box import READY_REASONS
from controller.handlers.boxes import reconcile
from controller.kube.objects import Kube
from controller.kube.rest import Rest
from controller.runtime import Runtime
from controller.service.status import StatusWriter, box_writer
from controller.settings import Settings, utcnow

pytestmark = pytest.mark.component

NS = "default"
BOXES = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{NS}/{C.AGENTBOX_PLURAL}"
GUARDS = {C.COND_READY: READY_REASONS}


@pytest_asyncio.fixture
async def rt(kube: KubeEmulator) -> AsyncIterator[Runtime]:
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.url
    rest = Rest(cfg)
    try:
        yield Runtime(settings=Settings(), kube=Kube(rest), usage=None)
    finally:
        await rest.aclose()


async def _box(rt: Runtime, **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND, "metadata": {"name": "box-a", "namespace": NS},
            "spec": {"agent": "claude-code", "template": {"spec": {"containers": [{"name": "box", "image": "x"}]}},
                     **spec}}
    await rt.kube.rest.request("POST", BOXES, body=body)
    return await _stored(rt)


async def _stored(rt: Runtime) -> dict[str, Any]:
    obj = await rt.kube.get_custom(C.AGENTBOX_PLURAL, NS, "box-a")
    assert obj is not None
    return obj


def _conds(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or []}


def _watcher_conditions(ready: bool = True) -> list[dict[str, Any]]:
    now = utcnow()
    conds = set_condition([], C.COND_READY, ready, C.R_RECONCILED, "Pod running; tabs are watched", now, 1)
    conds = set_condition(conds, C.COND_RATE_LIMITED, True, C.R_WAITING_FOR_RESET, "1 tab(s) wait", now, 1)
    return set_condition(conds, C.COND_NEEDS_ATTENTION, False, C.R_ALL_CLEAR, "No tab needs a human", now, 1)


async def test_reconcile_writes_through_the_boxs_one_writer_not_kopfs_patch(rt: Runtime) -> None:
    obj = await _box(rt)  # no spec.subscription for claude-code: the reconcile reports InvalidSpec
    patch = kopf.Patch()
    await reconcile(body=kopf.Body(obj), memo=kopf.Memo(runtime=rt), patch=patch)
    assert not patch.get("status"), "the handler writes no status through kopf's patch (a second writer)"
    writer = rt.status_writers[(C.AGENTBOX_PLURAL, NS, "box-a")]
    assert box_writer(rt, NS, "box-a") is writer  # the watcher's writer is the same object
    stored = await _stored(rt)
    assert stored["status"]["state"] == "Error" and stored["status"]["observedGeneration"] == 1  # one patch
    assert _conds(stored)[C.COND_READY] == ("False", C.R_INVALID_SPEC)


async def test_the_conditions_of_one_writer_never_erase_the_others(rt: Runtime) -> None:
    obj = await _box(rt)
    memo = kopf.Memo(runtime=rt)
    watcher = box_writer(rt, NS, "box-a")
    watcher.seen(obj)
    # The watcher writes its conditions (its Ready only under READY_REASONS; none is stored yet).
    await watcher.write({"state": "RateLimited"}, _watcher_conditions(), GUARDS)
    # The reconcile then finds a failure of its own: Ready False InvalidSpec, the watcher's types kept.
    await reconcile(body=kopf.Body(await _stored(rt)), memo=memo)
    conds = _conds(await _stored(rt))
    assert conds[C.COND_READY] == ("False", C.R_INVALID_SPEC)
    assert conds[C.COND_RATE_LIMITED] == ("True", C.R_WAITING_FOR_RESET)
    assert conds[C.COND_NEEDS_ATTENTION] == ("False", C.R_ALL_CLEAR)
    # The watcher's next pass keeps the reconcile's Ready (guarded) and its own types.
    await watcher.write({"state": "RateLimited"}, _watcher_conditions(ready=False), GUARDS)
    conds = _conds(await _stored(rt))
    assert conds[C.COND_READY] == ("False", C.R_INVALID_SPEC) and conds[C.COND_RATE_LIMITED][0] == "True"


async def test_a_write_is_not_skipped_after_another_writer_changed_status(rt: Runtime) -> None:
    """With one writer per object its 'nothing changed since my last write' check sees every write: the
    watcher's unchanged snapshot is written again after the reconcile changed the same fields."""
    obj = await _box(rt)
    writer = box_writer(rt, NS, "box-a")
    writer.seen(obj)
    assert await writer.write({"state": "Running"}, _watcher_conditions(), GUARDS)
    await reconcile(body=kopf.Body(await _stored(rt)), memo=kopf.Memo(runtime=rt))  # state: Error
    assert (await _stored(rt))["status"]["state"] == "Error"
    assert await writer.write({"state": "Running"}, _watcher_conditions(), GUARDS)
    assert (await _stored(rt))["status"]["state"] == "Running"
    # A second writer of the same object (what the handler used to build) would have skipped it:
    other = StatusWriter(rt.kube, C.AGENTBOX_PLURAL, NS, "box-a", utcnow)
    assert await other.write({"state": "Running"}, ())
    await reconcile(body=kopf.Body(await _stored(rt)), memo=kopf.Memo(runtime=rt))
    assert not await other.write({"state": "Running"}, ())  # stale: status says Error


async def test_keeper_writes_without_a_condition_cost_no_409(rt: Runtime, kube: KubeEmulator,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The login keeper's writes that set no condition (status.account, the refresh-in-flight mark) keep the
    resourceVersion the API server answered, so the next write of conditions (the usage reader's, in the
    same tick) is made at the current version. Before: it was made at the version of the copy the daemon
    was given, answered 409 and cost a re-read, on every first tick and around every refresh."""
    import base64

    from controller.service import loginidentity
    from controller.service.status import subscription_writer
    from controller.service.subscriptions import SubscriptionReader
    from harness.reader_world import T0, FixedUsage, claude_login

    async def identity(self: Any, provider: str, login: Any) -> str:  # the provider's answer, no network
        return "acct-a"
    monkeypatch.setattr(loginidentity.AccountIdentity, "ask", identity)
    rt.usage, rt.clock = FixedUsage(), (lambda: T0)  # type: ignore[assignment]
    text = claude_login("acc-1", T0 + timedelta(hours=8))
    await rt.kube.rest.request("POST", f"/api/v1/namespaces/{NS}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "login-shared"},
        "data": {"credentials.json": base64.b64encode(text.encode()).decode()}})
    subs = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{NS}/{C.SUBSCRIPTION_PLURAL}"
    body = await rt.kube.rest.request("POST", subs, body={
        "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND, "metadata": {"name": "shared"},
        "spec": {"provider": "anthropic", "credentialsSecretRef": {"name": "login-shared", "key": "credentials.json"}}})

    def status_requests() -> list[tuple[str, int]]:
        return [(e.method, e.status) for e in kube.journal
                if e.path.startswith(f"{subs}/shared") and e.method in ("GET", "PATCH")]
    await SubscriptionReader(rt, NS, "shared", lambda *a: None).tick(body)
    assert status_requests() == [("PATCH", 200), ("PATCH", 200)], status_requests()  # no 409, no re-read
    stored = await rt.kube.get_custom(C.SUBSCRIPTION_PLURAL, NS, "shared")
    assert stored is not None and stored["status"]["account"] == "acct-a"  # the keeper's write (no condition)
    assert C.COND_USAGE_FETCHED in _conds(stored)                           # then the reader's conditions
    # The write-ahead mark of a refresh, then a condition: again at the version the mark created.
    writer = subscription_writer(rt, NS, "shared")
    writer.forget()
    assert await writer.write({"refreshInFlight": "sha256:0123abcd"})
    assert await writer.write({}, [{"type": "LoginRefreshed", "status": "True", "reason": "Refreshed",
                                    "message": "renewed", "lastTransitionTime": "2026-03-10T01:00:00Z"}])
    assert status_requests()[-2:] == [("PATCH", 200), ("PATCH", 200)], status_requests()
    assert not [e for e in kube.journal if e.status == 409]
