"""AgentBox reconcile: validate the spec, copy the subscription's login into the box
credentials Secret, create the box pod; report the outcome as conditions and Events.

Idempotent: running it twice changes nothing the second time. Credentials never leave the
Secrets: messages name fields and reasons, never values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from controller import constants as C
from controller.conditions import get_condition, set_condition
from controller.domain import boxpolicy
from controller.domain.podstate import box_container_view
from controller.domain.podtemplate import container_problem, template_problem
from controller.agents.registry import ADAPTERS, provider_of
from controller.kube.objects import NotOwned, TemplateError, box_container, make_box_secret, make_pod, pod_name
from controller.models import AgentBoxSpec, validation_message
from controller.runtime import Runtime
from controller.service.loginload import load_login_of
from controller.settings import Settings


def box_policy(settings: Settings) -> boxpolicy.BoxPolicy:
    """The box policy from the operator settings (`box_policy*`)."""
    return boxpolicy.BoxPolicy(
        enabled=settings.box_policy, service_accounts=tuple(settings.box_policy_service_accounts),
        allow_token=settings.box_policy_allow_token, volume_types=tuple(settings.box_policy_volume_types),
        secret_names=tuple(settings.box_policy_secret_names), image_prefixes=tuple(settings.box_policy_image_prefixes))


def credential_key(agent: str) -> str | None:
    """Key of the box credentials Secret for an agent (the login file's own name; its adapter's
    ``secret_key``), None for an agent the controller installs no login for."""
    adapter = ADAPTERS.get(agent)
    return adapter.secret_key if adapter else None


async def _selected_group_problem(rt: Runtime, namespace: str, current: str, names: list[str],
                                  provider: str) -> str | None:
    """Why a `Selected` rotation group is unusable, naming the field; None when it is fine.

    The group must list the box's subscription and at least one other, all of the agent's provider,
    in the box's namespace (the CRD's CEL rule checks the first part on a real API server).
    """
    field = "spec.whenAgentStops.rotation.subscriptions"
    if current not in names:
        return f"{field}: must list spec.subscription ({current!r})"
    others = [n for n in names if n != current]
    if not others:
        return f"{field}: must hold at least one subscription besides {current!r}"
    for other in others:
        if "/" in other:
            return f"{field}: {other!r}: only subscriptions of the box's own namespace can be used"
        sub = await rt.kube.get_custom(C.SUBSCRIPTION_PLURAL, namespace, other)
        if sub is None:
            return f"{field}: Subscription {other!r} not found in namespace {namespace}"
        if (sub.get("spec") or {}).get("provider") != provider:
            return f"{field}: Subscription {other!r} is for {(sub.get('spec') or {}).get('provider')}, not {provider}"
    return None


def _login_problem(loaded: Any, name: str, agent: str, provider: str) -> tuple[str, str, float | None] | None:
    """Why the login of Subscription `name` (`load_login_of`'s answer) cannot be used by the box: (condition
    reason, message naming spec.subscription, retry: `_RETRY` or None); None when it is usable. A missing
    Subscription or an unusable login may be fixed later (retried); a provider mismatch needs a spec change."""
    if loaded.reason == C.R_SUBSCRIPTION_NOT_FOUND:
        return C.R_SUBSCRIPTION_NOT_FOUND, loaded.message, _RETRY
    if loaded.provider != provider:
        return (C.R_PROVIDER_MISMATCH, f"spec.subscription: Subscription {name!r} is for {loaded.provider}, "
                f"agent {agent} needs {provider}", None)
    if not loaded.usable:
        return loaded.reason, loaded.message, _RETRY
    return None


@dataclass
class Outcome:
    """Result of one reconcile: status fields to merge, Events to post, whether to retry later."""

    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type Normal|Warning, reason, message)
    conditions: list[dict[str, Any]] = field(default_factory=list)  # the reconcile's (Ready), merged by type
    retry_after: float | None = None


_RETRY = -1.0  # "retry after the configured delay" (settings.retry_delay_s)


def _fail(body: dict[str, Any], rt: Runtime, reason: str, message: str, retry: float | None = _RETRY) -> Outcome:
    status = body.get("status") or {}
    gen = body["metadata"].get("generation")
    before = next((c for c in status.get("conditions") or [] if c.get("type") == C.COND_READY), {})
    conds = set_condition(status.get("conditions") or [], C.COND_READY, False, reason, message, rt.clock(), gen)
    after = next(c for c in conds if c.get("type") == C.COND_READY)
    # The Warning on change only: a retried reconcile that finds the same problem posts nothing.
    same = (before.get("status"), before.get("reason"), before.get("message")) == ("False", reason, after["message"])
    return Outcome(status={"state": "Error", "observedGeneration": gen}, conditions=_ready_only(conds),
                   events=[] if same else [("Warning", reason, message)],
                   retry_after=rt.settings.retry_delay_s if retry == _RETRY else retry)


async def reconcile_box(body: dict[str, Any], rt: Runtime) -> Outcome:
    """Bring a box's Secret and pod in line with its spec.

    Args:
        body: the AgentBox object (dict).
        rt: runtime.
    Returns:
        An `Outcome`; `retry_after` set when a missing dependency may appear later.
    """
    meta = body["metadata"]
    ns, name, gen = meta["namespace"], meta["name"], meta.get("generation")
    try:
        spec = AgentBoxSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return _fail(body, rt, C.R_INVALID_SPEC, validation_message(exc), retry=None)
    # The template's shape first (the CRD leaves it open), and a spec.container that names one of its
    # containers (else the watcher never finds its tmux and the box would stay Pending forever).
    problem = template_problem(spec.template) or container_problem(spec.template, spec.container)
    if problem:
        return _fail(body, rt, C.R_INVALID_SPEC, problem, retry=None)
    # The box policy, before anything is read or written for the box: a refused template gets no pod and
    # no credentials Secret (the same rules run at admission, see controller/domain/boxpolicy.py).
    policy = box_policy(rt.settings)
    violations = boxpolicy.check(spec.template, policy)
    if violations:
        return _fail(body, rt, C.R_POLICY_VIOLATION, boxpolicy.summary(violations), retry=None)

    provider = provider_of(spec.agent)
    login_text: str | None = None
    if provider is None:
        if spec.subscription or spec.when_agent_stops.rotation.enabled:
            return _fail(body, rt, C.R_UNSUPPORTED_AGENT,
                         f"spec.agent: {spec.agent} does not run on a subscription; remove spec.subscription "
                         "and spec.whenAgentStops.rotation (limit features are for claude-code and codex)", retry=None)
    else:
        if not spec.subscription:
            return _fail(body, rt, C.R_INVALID_SPEC, f"spec.subscription: required for agent {spec.agent}", retry=None)
        rot = spec.when_agent_stops.rotation
        if rot.enabled and rot.group == "Selected":
            problem = await _selected_group_problem(rt, ns, spec.subscription, rot.subscriptions, provider)
            if problem:
                return _fail(body, rt, C.R_INVALID_SPEC, problem, retry=None)
        current = (body.get("status") or {}).get("subscription")
        named = spec.subscription
        if current and current != spec.subscription:
            # The box runs on status.subscription: the rotation moved it there (it keeps the login it
            # installed), or, rotation off, the tab watcher is about to move it to the changed
            # spec.subscription (it installs that login in the Secret and the live file, then moves
            # status.subscription: one journaled switch). Checked first, rotation off: spec.subscription.
            if await rt.kube.get_custom(C.SUBSCRIPTION_PLURAL, ns, current) is not None:
                spec = spec.model_copy(update={"subscription": current})
        if not rot.enabled and spec.subscription != named:
            wanted = _login_problem(await load_login_of(rt.kube, ns, named), named, spec.agent, provider)
            if wanted is not None:  # the box stays on status.subscription; the field is reported
                return _fail(body, rt, wanted[0], wanted[1], retry=wanted[2])
        loaded = await load_login_of(rt.kube, ns, spec.subscription)
        unusable = _login_problem(loaded, spec.subscription, spec.agent, provider)
        if unusable is not None:
            return _fail(body, rt, unusable[0], unusable[1], retry=unusable[2])
        login_text = loaded.text

    try:
        pod = make_pod(body, boxpolicy.harden(spec.template, policy), spec.agent,
                       with_credentials=login_text is not None, credentials_key=credential_key(spec.agent))
    except TemplateError as exc:
        return _fail(body, rt, C.R_INVALID_SPEC, str(exc), retry=None)

    from controller.domain.podheal import template_hash

    pod["metadata"].setdefault("annotations", {})[C.ANNOTATION_TEMPLATE_HASH] = template_hash(spec.template)
    events: list[tuple[str, str, str]] = []
    try:
        if login_text is not None:
            result = await rt.kube.ensure_secret(make_box_secret(body, credential_key(spec.agent) or "credentials.json", login_text))
            if result == "created":
                events.append(("Normal", "CreatedSecret", f"Created Secret {name}-credentials"))
            elif result == "updated":
                events.append(("Normal", "UpdatedSecret", f"Updated Secret {name}-credentials"))
        if await rt.kube.ensure_pod(pod) == "created":
            events.append(("Normal", "CreatedPod", f"Created Pod {pod_name(name)}"))
    except NotOwned as exc:
        # A squatter under the box's Secret or pod name: never written, never exec'd into. Retried
        # (it may be deleted); the Warning is posted once per appearance (the tab watcher posts the
        # pod's, since it also sees a squatter that appears later).
        out = _fail(body, rt, exc.reason, str(exc))
        ready = next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == C.COND_READY), {})
        if exc.kind == "Pod" or ready.get("reason") == exc.reason:
            out.events = []
        return out

    current = await rt.kube.get_pod(ns, pod_name(name))
    view = box_container_view(current, pod_name(name),
                              box_container((current or {}).get("spec") or {}, spec.container) if current else None)
    status = body.get("status") or {}
    now = rt.clock()
    conds = status.get("conditions") or []
    ready = get_condition(conds, C.COND_READY) or {}
    if not view.running:
        conds = set_condition(conds, C.COND_READY, False, view.reason, view.message, now, gen)
    elif not (ready.get("status") == "True" and ready.get("reason") == C.R_RECONCILED):
        # The container runs; Ready waits for the tab watcher to see the tmux session (woken right away).
        conds = set_condition(conds, C.COND_READY, False, C.R_CHECKING_SESSION,
                              f"Container running; checking the tmux session '{C.TMUX_SESSION}'", now, gen)
    out = {
        "pod": pod_name(name),
        "subscription": status.get("subscription") or spec.subscription,
        "observedGeneration": gen,
    }
    if status.get("state") in (None, "Error") or not view.running:
        out["state"] = "Pending"
    return Outcome(status=out, events=events, conditions=_ready_only(conds))


def _ready_only(conds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conditions the reconcile owns (Ready): merged by type into status, never the whole list (the tab
    watcher writes the others; a merge patch would replace the list)."""
    return [c for c in conds if c.get("type") == C.COND_READY]
