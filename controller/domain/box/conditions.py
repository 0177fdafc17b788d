"""Ready and PodOutOfDate, which conditions are the watcher's to write (`owned`), and the statuses of a box
whose tabs are not decided: a squatting pod, a box whose tabs are not watched, a container that does not run.

May touch: `Pass.mem` (the squatter announced), Events, and one blocking `CheckSession` (unwatched boxes).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller import constants as C
from controller.conditions import set_condition
from controller.domain.actions import CheckSession, SessionSeen
from controller.domain.box.model import POD_NOT_OWNED, READY_REASONS, WATCHER_CONDITIONS, BoxStatus
from controller.domain.box.passstate import Pass
from controller.domain.podstate import ContainerView


def conditions_of(p: Pass) -> list[dict[str, Any]]:
    """A copy of status.conditions as this pass read them (the rules set conditions on it)."""
    return [dict(c) for c in p.obs.conditions]


def pod_date(p: Pass, conds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PodOutOfDate: True while the pod predates spec.template; False once it was set and is current."""
    gen = p.obs.generation
    if p.mem.out_of_date:
        return set_condition(conds, C.COND_POD_OUT_OF_DATE, True, C.R_TEMPLATE_CHANGED, p.mem.out_of_date, p.now, gen)
    if any(c.get("type") == C.COND_POD_OUT_OF_DATE for c in conds):
        return set_condition(conds, C.COND_POD_OUT_OF_DATE, False, C.R_UP_TO_DATE,
                             "The pod was built from the current spec.template", p.now, gen)
    return conds


def ready_conditions(p: Pass, conds: list[dict[str, Any]], view: ContainerView, session: bool | None,
                     watched: bool = True) -> list[dict[str, Any]]:
    """Ready: True only when the box container runs and the tmux session exists (`session` None: not
    checked, the condition is left as it is when the container runs). A Ready the reconcile set for a
    reason of its own (not `READY_REASONS`) is kept."""
    conds = pod_date(p, conds)
    current = next((c for c in conds if c.get("type") == C.COND_READY), None)
    if current and current.get("reason") not in READY_REASONS:
        return conds
    gen = p.obs.generation
    if not view.running:
        return set_condition(conds, C.COND_READY, False, view.reason, view.message, p.now, gen)
    if session is False:
        return set_condition(conds, C.COND_READY, False, C.R_SESSION_MISSING,
                             f"Container running but it has no tmux session '{C.TMUX_SESSION}' (the image's "
                             "entrypoint starts it; see docs/troubleshooting.md)", p.now, gen)
    if session is None:
        return conds
    return set_condition(conds, C.COND_READY, True, C.R_RECONCILED,
                         "Pod running; tabs are watched" if watched
                         else "Pod running (limit features are off for this agent)", p.now, gen)


def owned(conds: list[dict[str, Any]], types: tuple[str, ...] = WATCHER_CONDITIONS,
          ready_reasons: frozenset[str] | None = READY_REASONS) -> tuple[dict[str, Any], ...]:
    """The conditions of `types` the watcher writes. A Ready under a reason outside `ready_reasons` is the
    reconcile's (a failure it reported): kept as it is, so never written back by the watcher, whose copy
    may be older than the reconcile's newer Ready (a fixed spec). None: every Ready is the watcher's."""
    return tuple(c for c in conds if c.get("type") in types and not (
        c.get("type") == C.COND_READY and ready_reasons is not None and c.get("reason") not in ready_reasons))


def squatter_status(p: Pass) -> BoxStatus:
    """A squatting pod: Ready=False PodNotOwned (kept until the pod is the box's again), one Warning per
    appearance; no exec, no login push."""
    msg = p.obs.not_owned
    conds = set_condition(conditions_of(p), C.COND_READY, False, POD_NOT_OWNED, msg, p.now, p.obs.generation)
    if p.mem.squatter != msg:
        p.mem = replace(p.mem, squatter=msg)
        current = next((c for c in p.obs.conditions if c.get("type") == C.COND_READY), {})
        if current.get("reason") != POD_NOT_OWNED:
            p.event("Warning", POD_NOT_OWNED, msg)
    return BoxStatus({"state": "Error"}, owned(conds, (C.COND_READY,), None), guard_ready=False)


def ready_status(p: Pass, view: ContainerView, session: bool | None, watched: bool = True) -> BoxStatus:
    """Only Ready (and PodOutOfDate) and the box state: boxes whose tabs are not watched, or containers
    that do not run."""
    conds = ready_conditions(p, conditions_of(p), view, session, watched)
    state = p.obs.state
    ready = next((c for c in conds if c.get("type") == C.COND_READY), {})
    if ready.get("reason") not in READY_REASONS and ready:
        # The reconcile's failure: its Ready and state are left to it (this copy may be older than its fix).
        return BoxStatus({}, owned(conds, (C.COND_POD_OUT_OF_DATE,)))
    if state != "Error" and ready.get("reason") in READY_REASONS:
        state = ("Running" if ready.get("status") == "True"
                 else "NeedsAttention" if ready.get("reason") == C.R_SESSION_MISSING else "Pending")
    return BoxStatus({"state": state}, owned(conds, (C.COND_READY, C.COND_POD_OUT_OF_DATE)))


def unwatched_status(p: Pass) -> BoxStatus | None:
    """A box whose tabs are not watched (limit features are off for its agent): Ready still needs the running
    container and its session, which this box asks for (`CheckSession`) when it was not observed. None while
    there is no pod yet (the reconcile owns Ready)."""
    obs = p.obs
    if obs.pod is None:
        return None  # no pod yet: the reconcile owns Ready
    if not obs.pod.running:
        return ready_status(p, obs.pod, None, watched=False)
    session = obs.session
    if session is None:  # a watched box learns it from reading its tabs; this one asks
        seen: SessionSeen = p.ask(CheckSession())
        session = seen.exists
    return ready_status(p, obs.pod, session, watched=False)
