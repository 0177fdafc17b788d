"""The tab watcher: one per running AgentBox. Captures every tab, detects limits, plans with
`controller.domain.resume`, acts through the box terminal, and records the outcome in
`status.tabs[]` so a restarted controller picks up the same deadlines.

It sleeps until the earliest tab deadline (or the scan interval), so a resume fires within
seconds of its instant instead of at the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from pydantic import ValidationError

from controller import constants as C
from controller import metrics
from controller.agents.registry import get_adapter, provider_of
from controller.conditions import rfc3339, set_condition
from controller.domain.resume import (
    Action, Journal, JournalAction, Phase, Recovery, ResumeConfig, Step, TabPlan, TabRecord, after_usage, limit_key,
    next_pass_in, plan_tab, recovery_step, stall_plan, start_journal, usage_verdict,
)
from controller.domain.signals import last_lines, merge
from controller.domain.rotation import Candidate, choose_next, first_to_reset, group_members, must_leave
from controller.domain.types import Detection, LimitKind, TabState, plausible_reset
from controller.kube.exec import owned_exec, owned_exec_open
from controller.kube.objects import NotOwned, box_container, make_box_secret, owned_by, pod_name
from controller.models import AgentBoxSpec
from controller.redact import STATUS_MESSAGE_MAX, bounded
from controller.service import boxfiles
from controller.service.loginload import load_login_of
from controller.runtime import Runtime
from controller.terminal.session import BoxTerminal, TmuxCommandFailed
from controller.terminal.stream import BoxStream, StreamTerminal
from controller.terminal.tmux import has_session_argv as tmux_has_session_argv
from controller.domain.podheal import decide_pod, template_hash
from controller.domain.podstate import ContainerView, box_container_view

log = logging.getLogger("agentbox.tabs")

EventFn = Callable[[str, str, str], None]
"""Posts a Kubernetes Event on the box: (type Normal|Warning, reason, message)."""


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (ValueError, OverflowError):  # year 9999 at -12:00 is year 10000 in UTC
        return None


def record_from_status(tab: dict[str, Any]) -> TabRecord:
    """Rebuild a TabRecord from a status.tabs[] entry (controller restart)."""
    try:
        phase = Phase(tab.get("state") or "Unknown")
    except ValueError:
        phase = Phase.UNKNOWN
    return TabRecord(
        name=tab.get("name", ""), phase=phase, limit_key=tab.get("limitKey"),
        resets_at=_parse_time(tab.get("resetsAt")), resume_at=_parse_time(tab.get("resumeAt")),
        detected_by=tab.get("detectedBy"), message=tab.get("message"), sent_for=tab.get("sentFor"),
        sent_at=_parse_time(tab.get("sentAt")), attempts=int(tab.get("attempts") or 0),
        last_input_at=_parse_time(tab.get("lastInputAt")), stopped_by_reserve=bool(tab.get("stoppedByReserve")),
        journal=journal_from_status(tab.get("journal")),
        menu_for=tab.get("menuAnsweredFor"), menu_at=_parse_time(tab.get("menuAnsweredAt")),
    )


def journal_from_status(data: Any) -> Journal | None:
    """Rebuild a Journal from status.tabs[].journal; None when absent or unreadable (then nothing is resumed
    from it: an unreadable journal never sends keys)."""
    if not isinstance(data, dict):
        return None
    try:
        started = _parse_time(data.get("startedAt"))
        step_at = _parse_time(data.get("stepAt")) or started
        if started is None or step_at is None:
            return None
        return Journal(JournalAction(data.get("action")), Step(data.get("step")), started, step_at,
                       data.get("forKey"), data.get("text"), int(data.get("recoveries") or 0))
    except (ValueError, TypeError):
        return None


def journal_to_status(journal: Journal | None) -> dict[str, Any] | None:
    """status.tabs[].journal of a Journal (camelCase, no None values)."""
    if journal is None:
        return None
    out = {"action": journal.action.value, "step": journal.step.value, "startedAt": rfc3339(journal.started_at),
           "stepAt": rfc3339(journal.step_at), "forKey": journal.for_key, "text": journal.text,
           "recoveries": journal.recoveries or None}
    return {k: v for k, v in out.items() if v is not None}


def record_to_status(rec: TabRecord, tab_id: str | None) -> dict[str, Any]:
    """status.tabs[] entry of a TabRecord (camelCase, no None values)."""
    out = {
        "name": rec.name, "id": tab_id, "state": rec.phase.value,
        "resetsAt": rfc3339(rec.resets_at), "resumeAt": rfc3339(rec.resume_at),
        "detectedBy": rec.detected_by, "message": bounded(rec.message, STATUS_MESSAGE_MAX) if rec.message else None,
        "lastInputAt": rfc3339(rec.last_input_at),
        "limitKey": rec.limit_key, "sentFor": rec.sent_for, "sentAt": rfc3339(rec.sent_at),
        "attempts": rec.attempts, "stoppedByReserve": rec.stopped_by_reserve or None,
        "journal": journal_to_status(rec.journal),
        "menuAnsweredFor": rec.menu_for, "menuAnsweredAt": rfc3339(rec.menu_at),
    }
    return {k: v for k, v in out.items() if v is not None}


def _container_tz(pod: dict[str, Any], container: str) -> str | None:
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if ctr.get("name") == container:
            for env in ctr.get("env") or []:
                if env.get("name") == "TZ" and env.get("value"):
                    return env["value"]
    return None


def candidate_from(sub: dict[str, Any]) -> Candidate:
    """Rotation's view of a Subscription object (spec.provider and status)."""
    status = sub.get("status") or {}
    windows = status.get("windows") or {}
    five, week = windows.get("fiveHour") or {}, windows.get("weekly") or {}
    until = _parse_time(status.get("reservedUntil"))
    if status.get("state") == "Exhausted":
        resets = [_parse_time(w.get("resetsAt")) for w in (five, week)
                  if (w.get("utilization") or 0) >= 100 and w.get("resetsAt")]
        until = max((r for r in resets if r), default=None)
    return Candidate(
        name=sub["metadata"]["name"], provider=(sub.get("spec") or {}).get("provider", ""),
        state=status.get("state") or "Unknown", five_hour=five.get("utilization"), weekly=week.get("utilization"),
        five_hour_reset=_parse_time(five.get("resetsAt")), until=until,
    )


class BoxWatcher:
    """Watches the tabs of one AgentBox.

    Args:
        rt: runtime (settings, clients, clock).
        namespace, name: the box.
        post_event: posts an Event on the box.
    """

    def __init__(self, rt: Runtime, namespace: str, name: str, post_event: EventFn) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.post_event = post_event  # controller.events: deduplicated; also the webhook and the metric
        self.records: dict[str, TabRecord] | None = None
        self.tab_ids: dict[str, str] = {}
        self._last_status: dict[str, Any] | None = None
        s = rt.settings
        self.cfg = ResumeConfig(
            margin_s=s.resume_margin_s, human_idle_s=s.human_idle_s, auto_continue_grace_s=s.auto_continue_grace_s,
            settle_s=s.settle_s, max_attempts=s.max_attempts, unknown_reset_recheck_s=s.unknown_reset_recheck_s,
        )
        self._pattern_errors: set[str] = set()   # invalid user patterns already reported
        self._ignored: dict[str, tuple[str, tuple[str, ...]]] = {}  # source -> (reason, messages): InputIgnored
        self._resume_at_done: str | None = None  # the resume-at annotation value already acted upon
        self._output_problem: str | None = None  # the box printed more than exec_max_output_bytes
        self.current: str | None = None          # subscription the box runs on (status.subscription)
        self.next_sub: str | None = None
        self.group_exhausted = False
        self.reserved: str | None = None         # the stop line while the reserve holds the box
        self._reserve_pending: set[str] = set()  # tabs at their shell when the reserve stopped the box
        self.switched_keys: set[str] = set()     # limit events already answered by a switch
        self.pre_switch: set[str] = set()        # tabs not yet seen limited or working since the last switch
        self._noted: set[str] = set()
        self._uid: str | None = None
        self._squatter: str | None = None        # message of the PodNotOwned Event already posted
        self.sub_problem: str | None = None
        self.seen: dict[str, tuple[int, datetime]] = {}   # tab -> (screen hash, unchanged since)
        self.stream: BoxStream | None = None     # the live tmux stream (settings.tmux_stream)
        self._stream_pod: str | None = None      # uid of the pod the stream is attached to
        self._stream_warned: str | None = None   # pod uid whose unusable stream was reported (one Event)
        self._classify: Any = None               # screen -> detection key, for the stream's wake-ups
        self._structured_seen: tuple[int, datetime, Any] | None = None  # (tab states hash, read at, result)
        self._body: dict[str, Any] = {}
        self._spec: AgentBoxSpec | None = None
        self._status_lock = asyncio.Lock()   # status snapshots reach the API server in the order taken
        self._out_of_date: str | None = None
        self._replacing: tuple[str, str] | None = None  # (Ready reason, message) of the pod being replaced
        self._pending_switch: dict[str, Any] | None = None  # status.switch found at start: completed first  # PodOutOfDate message while the pod predates spec.template

    async def aclose(self) -> None:
        """Detach the live tmux stream (the watcher stops)."""
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    # ------------------------------------------------------------------ one pass
    async def tick(self, body: dict[str, Any]) -> float:
        """Observe and act once; return seconds until the next pass is needed."""
        s = self.rt.settings
        self._uid = (body.get("metadata") or {}).get("uid")
        try:
            spec = AgentBoxSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            return s.scan_interval_s  # the reconcile handler reports the invalid spec
        self._body, self._spec = body, spec
        pod = await self.rt.kube.get_pod(self.namespace, pod_name(self.name))
        if pod is not None and not owned_by(pod, self._uid):
            # A pod under the box's name that the box does not control: never exec into it.
            await self._not_owned(body, NotOwned("Pod", pod_name(self.name), self.name))
            return s.scan_interval_s
        self._squatter = None
        healing = await self._heal(body, spec, pod)
        if healing is not None:
            return healing
        container = box_container((pod or {}).get("spec") or {}, spec.container) if pod else None
        view = box_container_view(pod, pod_name(self.name), container)
        if provider_of(spec.agent) is None or not spec.subscription:
            # Limit features are off for this agent: Ready still needs the running container and its session.
            session = await self._session_exists(pod, container) if view.running and pod and container else None
            if pod:  # no pod yet: the reconcile owns Ready
                await self._write_ready(body, view, session, watched=False)
            return s.scan_interval_s
        if self.records is None:
            status = body.get("status") or {}
            self.current = status.get("subscription") or spec.subscription
            reserved = next((c for c in status.get("conditions") or []
                             if c.get("type") == C.COND_RESERVED and c.get("status") == "True"), None)
            self.reserved = reserved.get("message") if reserved else None
            self.records = {t["name"]: record_from_status(t) for t in (body.get("status") or {}).get("tabs") or []
                            if t.get("name")}
            switch = status.get("switch")
            self._pending_switch = switch if isinstance(switch, dict) and switch.get("to") else None
            self.tab_ids = {t["name"]: t.get("id", "") for t in (body.get("status") or {}).get("tabs") or []
                            if t.get("name")}
        if not pod or not view.running or container is None:
            if pod:  # no pod yet: the reconcile owns Ready (its failure reasons, PodPending)
                await self._write_ready(body, view, None)
            return s.scan_interval_s
        tz = spec.time_zone or _container_tz(pod, container) or "UTC"
        patterns = self._user_patterns(spec)
        term = self._terminal(pod, container, spec.agent, tz, patterns)

        try:
            tabs, inputs = await term.tabs()
            screens = await term.capture_all(tabs)
        except TmuxCommandFailed:
            await self._write_status(body, spec, [], "tmux session 'agentbox' not found in the box container",
                                     session=False)
            return s.scan_interval_s
        except Exception as exc:  # noqa: BLE001 - exec transport errors: retry at the next scan
            if getattr(exc, "reason", None) == "output_too_large":
                # What the box prints is bounded (controller/kube/exec.py): too many tabs, a huge window,
                # or a tmux that floods. Reported once; watched again when it prints less.
                problem = (f"the box printed more than {s.exec_max_output_bytes} bytes when its tabs were "
                           "captured (too many tabs or a very large window); its tabs are not watched until "
                           "it prints less")
                if self._output_problem != problem:
                    self._output_problem = problem
                    self.post_event("Warning", C.R_BOX_OUTPUT_TOO_LARGE, problem)
                await self._write_status(body, spec, [], problem, problem_reason=C.R_BOX_OUTPUT_TOO_LARGE)
                return s.scan_interval_s
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return s.scan_interval_s
        self._output_problem = None

        now = self.rt.clock()
        annotations = self._annotation_problems((body.get("metadata") or {}).get("annotations") or {}, now)
        dets = {tab.name: self._detect(spec.agent, screens.get(tab.id, ""), now, tz, patterns) for tab in tabs}
        dets = await self._structured(term, spec, dets, now, screens)
        if self._pending_switch is not None:
            dets = await self._complete_switch(term, tabs, dets, spec, body, now)
        await self._subscriptions(term, tabs, dets, inputs, spec, body, now)
        resume_on = spec.when_agent_stops.resume_after_reset and not self.reserved
        wake: list[datetime | None] = []
        live_names = set()
        plans: dict[str, TabPlan] = {}
        # Unfinished journals first (a controller stopped mid-action, or a pass that failed mid-way):
        # each is completed from the step it reached, judged by the screen, before anything else.
        unfinished = [t for t in tabs if (self.records.get(t.name) or TabRecord(t.name)).journal is not None]
        if unfinished:
            done = await asyncio.gather(*(self._recover(term, t, spec, dets[t.name], inputs.get(t.id), tz, patterns)
                                          for t in unfinished))
            for t, plan in zip(unfinished, done):
                plans[t.name] = plan
                self.records[t.name] = plan.record
        for tab in tabs:
            live_names.add(tab.name)
            self.tab_ids[tab.name] = tab.id
            if tab.name in plans:
                continue
            det = dets[tab.name]
            rec = self.records.get(tab.name) or TabRecord(tab.name)
            plan = plan_tab(rec, det, inputs.get(tab.id), now, self.cfg, resume_on)
            screen = screens.get(tab.id, "")
            digest = hash(screen)
            if self.seen.get(tab.name, (None,))[0] != digest:
                self.seen[tab.name] = (digest, now)
            stalled = stall_plan(plan.record, det, self.seen[tab.name][1], now, s.stall_s, last_lines(screen))
            if stalled is not None:
                plan = stalled
            elif det.state in (TabState.WORKING, TabState.UNKNOWN):
                # On the live stream an unchanged screen wakes nothing: the stall instant is a deadline.
                wake.append(self.seen[tab.name][1] + timedelta(seconds=s.stall_s))
            plan = self._apply_annotations(plan, det, annotations, now)
            plans[tab.name] = await self._act(term, tab, spec, det, plan, body, tz, patterns)
            self.records[tab.name] = plans[tab.name].record
        due = [t for t in tabs if plans[t.name].action == Action.CHECK_USAGE]
        if due:
            plans.update(await self._resume_due(term, due, spec, body, tz, patterns, plans))
        for plan in plans.values():
            self.records[plan.record.name] = plan.record
            wake.append(plan.wake_at)
        for gone in set(self.records) - live_names:
            del self.records[gone]
        await self._consume_annotations(annotations)
        await self._write_status(body, spec, tabs, self.sub_problem)

        live = self.stream is not None and self.stream.connected
        rescan = s.stream_rescan_s if live else s.scan_interval_s
        if self._out_of_date:  # a pod update waits for idle tabs, judged from this pass's records by the next
            rescan = min(rescan, s.scan_interval_s)
        return next_pass_in(wake, self.rt.clock(), rescan)

    # ------------------------------------------------------------------ the live tmux stream
    def _terminal(self, pod: dict[str, Any], container: str, agent: str, tz: str, patterns: list[Any]) -> BoxTerminal:
        """The box terminal: over the live tmux stream when `settings.tmux_stream` is on and control mode
        works in this pod, else one exec per command (polling)."""
        exec_fn = self._exec_fn(pod, container)
        s = self.rt.settings
        if not s.tmux_stream or self.rt.exec_open is None:
            return BoxTerminal(exec_fn, s.send_pause_s)
        now = self.rt.clock

        def classify(pane: str, screen: str) -> Any:
            det = self._detect(agent, screen, now(), tz, patterns)
            return det.state, det.kind, limit_key(det) if det.state == TabState.RATE_LIMITED else None

        self._classify = classify
        uid = (pod.get("metadata") or {}).get("uid")
        if self.stream is None or self._stream_pod != uid:
            if self.stream is not None:
                asyncio.ensure_future(self.stream.aclose())
            opener = self._open_fn(pod, container)
            wake = self.rt.wakeup(self.namespace, self.name)
            self.stream = BoxStream(opener, exec_fn, classify=lambda p, sc: self._classify(p, sc),
                                    on_change=wake.set, command_timeout_s=s.exec_timeout_s,
                                    max_output=s.exec_max_output_bytes)
            self._stream_pod = uid
            self.stream.start()
        self.stream.exec_fn = exec_fn
        return StreamTerminal(exec_fn, self.stream, s.send_pause_s)

    def _open_fn(self, pod: dict[str, Any], container: str):
        """Open a long-lived exec in the box's own pod (`owned_exec_open`: ownership proven, counted)."""
        return owned_exec_open(self.rt.exec_open, pod, self._uid, self.name, container)

    # ------------------------------------------------------------------ structured signals (level 1)
    async def _structured(self, term: BoxTerminal, spec: AgentBoxSpec, dets: dict[str, Detection],
                          now: datetime, screens: dict[str, str] | None = None) -> dict[str, Detection]:
        """Merge the agent's own machine-readable usage (Claude Code statusline input, Codex rollout
        `token_count` events) into the screen detections. Read only when a tab is not visibly busy; on the
        live stream, only when a tab stopped (the tabs' detected states changed since the last read: the
        agents write these files when a turn ends) or the last read is `stream_rescan_s` old, else the
        last read is reused."""
        if not any(d.state in (TabState.RATE_LIMITED, TabState.IDLE, TabState.UNKNOWN) for d in dets.values()):
            return dets
        from controller.service.boxfiles import read_structured

        digest = hash(tuple(sorted((name, d.state, d.kind, limit_key(d) if d.state == TabState.RATE_LIMITED
                                    else None) for name, d in dets.items())))
        seen = self._structured_seen
        reuse = (isinstance(term, StreamTerminal) and term.stream.connected and seen is not None
                 and seen[0] == digest
                 and (now - seen[1]).total_seconds() < self.rt.settings.stream_rescan_s)
        problems: list[str] = []
        try:
            if reuse:
                usage, source, problems = seen[2]  # type: ignore[index]
            else:
                usage, source = await read_structured(term.exec_fn, spec.agent, now, problems)
                self._structured_seen = (digest, now, (usage, source, problems))
        except Exception as exc:  # noqa: BLE001 - no structured data is a normal case
            log.debug("Box %s/%s: no structured usage (%s)", self.namespace, self.name, type(exc).__name__)
            return dets
        self._ignore("files", C.R_INVALID_BOX_FILE, problems)
        if usage is None:
            return dets
        return {name: merge(det, usage, source, now) for name, det in dets.items()}

    # ------------------------------------------------------------------ subscriptions: rotation, reserve
    async def _subscriptions(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                             inputs: dict[str, datetime], spec: AgentBoxSpec, body: dict[str, Any], now: datetime) -> None:
        """Apply rotation (switch on a trigger) and the reserve (stop, then restore) for this box."""
        provider = get_adapter(spec.agent).provider
        rot = spec.when_agent_stops.rotation
        subs = [candidate_from(o) for o in await self.rt.kube.list_custom_shared(C.SUBSCRIPTION_PLURAL, self.namespace)]
        current = self.current or spec.subscription
        cur = next((c for c in subs if c.name == current), None)
        self._absorb_pre_switch_limits(dets, current, now)
        fresh_limit = any(
            d.state == TabState.RATE_LIMITED and d.kind in (LimitKind.USAGE, LimitKind.CREDITS)
            and limit_key(d) not in self.switched_keys
            for d in dets.values())
        self.group_exhausted = False
        self.sub_problem = None
        if cur is None and not rot.enabled:
            self.sub_problem = (f"Subscription {current!r} was deleted or is missing; the box cannot be resumed "
                                "(set spec.subscription to another one, or enable rotation)")
            if self._note(f"missing-{current}"):
                self.post_event("Warning", C.R_SUBSCRIPTION_NOT_FOUND, self.sub_problem)
        if rot.enabled:
            members = group_members(rot.group, [*rot.subscriptions, spec.subscription or ""], provider, subs)
            nxt = choose_next(current, members)
            leave = must_leave(cur, fresh_limit)
            if leave.leave and nxt is not None:
                if await self._switch(term, tabs, dets, inputs, spec, body, current, nxt.name, leave, now):
                    current, cur = nxt.name, nxt
                    nxt = choose_next(current, members)
            elif leave.leave:
                self.group_exhausted = True
                first = first_to_reset(members, now)
                msg = "Every subscription of the rotation group is exhausted; waiting" + (
                    f" for {first.name} to reset at {first.until:%H:%M} UTC" if first and first.until else "")
                if self._note("group-exhausted"):
                    self.post_event("Warning", "RotationGroupExhausted", msg)
            else:
                self._noted.discard("group-exhausted")
            self.next_sub = nxt.name if nxt else None
        else:
            self.next_sub = None
        # Reserve: stop the box (unless rotation just moved it away), restore after the reset.
        if cur is not None and cur.state == "Reserved" and not self.reserved:
            await self._reserve_stop(term, tabs, dets, spec, cur)
        elif cur is not None and cur.state == "Reserved" and self._reserve_pending:
            await self._reserve_late_starters(term, tabs, dets, spec)
        elif self.reserved and (cur is None or cur.state != "Reserved"):
            await self._reserve_restore(term, tabs, dets, inputs, spec, now)

    def _note(self, key: str) -> bool:
        """True the first time `key` is noted (one Event per episode)."""
        if key in self._noted:
            return False
        self._noted.add(key)
        return True

    async def _login_text(self, subscription: str) -> tuple[str, str, Any] | None:
        """(provider, login file text, parsed Login) of a subscription; None when unusable
        (:func:`controller.service.loginload.load_login_of`)."""
        loaded = await load_login_of(self.rt.kube, self.namespace, subscription)
        if not loaded.usable:
            return None
        return loaded.provider, loaded.text, loaded.login

    async def _install_login(self, term: BoxTerminal, spec: AgentBoxSpec, body: dict[str, Any], text: str) -> None:
        """Write a login into the box credentials Secret and the agent's live login file."""
        adapter = get_adapter(spec.agent)
        await self.rt.kube.ensure_secret(make_box_secret(body, adapter.secret_key or "credentials.json", text))
        await boxfiles.write_login(term.exec_fn, adapter, text)

    async def _switch(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                      inputs: dict[str, datetime], spec: AgentBoxSpec, body: dict[str, Any],
                      old: str | None, new: str, leave: Any, now: datetime) -> bool:
        """Move the box to subscription `new`; limited tabs are then resumed by the normal flow
        (usage re-read on the new subscription, the same safety rules). Returns False when the new
        login is unusable (nothing changed)."""
        login = await self._login_text(new)
        if login is None:
            self.post_event("Warning", "SwitchFailed", f"Cannot switch to {new}: its login Secret is missing or invalid")
            return False
        limited = [t for t in tabs if dets[t.name].state == TabState.RATE_LIMITED
                   and dets[t.name].kind in (LimitKind.USAGE, LimitKind.CREDITS)]
        # Write-ahead: a controller killed mid-switch finds status.switch and completes it (_complete_switch).
        journal = {"to": new, "fromSubscription": old, "step": "StopAgents", "startedAt": rfc3339(now),
                   "tabs": [t.name for t in limited][:64], "reason": bounded(str(leave.reason), 1024)}
        await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name, {"switch": journal})
        adapter = get_adapter(spec.agent)
        if adapter.exit_before_login_switch:
            # A running Codex refuses another account's auth.json: stop the limited agents first.
            for tab in limited:
                if not self._safe(tab, dets[tab.name], inputs, now):
                    continue
                await self._press_keys(term, tab.pane_id, adapter.interrupt_keys)
        await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                        {"switch": {**journal, "step": "InstallLogin"}})
        await self._install_login(term, spec, body, login[1])
        self.current = new
        for tab in limited:
            self._resume_on_new(tab.name, dets[tab.name], new, now)
        # A tab not seen limited now may still show the old subscription's limit line on the next
        # capture (printed just before the switch): that line is not a limit of `new`.
        self.pre_switch = {t.name for t in tabs} - {t.name for t in limited}
        metrics.SWITCHES.labels(self.namespace, self.name, leave.trigger).inc()
        self.post_event("Normal", "Switched", f"Switched from {old} to {new}: {leave.reason}")
        await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                        {"subscription": new, "switch": None})
        return True

    async def _complete_switch(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                               spec: AgentBoxSpec, body: dict[str, Any], now: datetime) -> dict[str, Detection]:
        """Finish a switch a previous controller left in status.switch: install the new login (idempotent),
        move the box, and mark the tabs it had stopped as due on the new subscription. A Codex tab it had
        already stopped sits at the shell: it is given the remembered limit so the normal resume relaunches
        it (`codex resume --last`, then continue). Returns the detections to plan with."""
        sw, self._pending_switch = self._pending_switch or {}, None
        to = str(sw.get("to"))
        login = await self._login_text(to)
        if login is None:
            self.post_event("Warning", "SwitchFailed", f"Cannot finish the switch to {to}: its login Secret is "
                            "missing or invalid")
            await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name, {"switch": None})
            return dets
        await self._install_login(term, spec, body, login[1])
        self.current = to
        wanted = set(sw.get("tabs") or [])
        out = dict(dets)
        for tab in tabs:
            if tab.name not in wanted:
                continue
            det = dets[tab.name]
            if det.state != TabState.RATE_LIMITED:
                if det.state == TabState.WORKING:
                    continue
                det = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, None, None, prompt_text="",
                                evidence=f"stopped to switch to {to}", detected_by="switch")
                out[tab.name] = det
            key = limit_key(det)
            self.switched_keys.add(key)
            rec = (self.records or {}).get(tab.name) or TabRecord(tab.name)
            self.records[tab.name] = replace(  # type: ignore[index]
                rec, phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=now, sent_for=None,
                window=None, auto_continue=False, detected_by=det.detected_by, journal=None,
                message=f"Switched to {to}; resuming", attempts=0)
        self.post_event("Normal", "Switched", f"Switched from {sw.get('fromSubscription')} to {to}: "
                        f"{sw.get('reason') or 'rotation'} (completed after a controller restart)")
        await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                        {"subscription": to, "switch": None})
        return out

    def _resume_on_new(self, tab: str, det: Detection, new: str, now: datetime) -> None:
        """Answer a tab's limit event by the switch to `new`: the key is marked switched (never a
        trigger again) and the tab is resumed now by the normal flow, on the new login."""
        key = limit_key(det)
        self.switched_keys.add(key)
        rec = self.records.get(tab) or TabRecord(tab)  # type: ignore[union-attr]
        self.records[tab] = replace(  # type: ignore[index]
            rec, phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=now, sent_for=None,
            window=None, auto_continue=False, detected_by=det.detected_by,
            message=f"Switched to {new}; resuming", attempts=0)

    def _absorb_pre_switch_limits(self, dets: dict[str, Detection], current: str, now: datetime) -> None:
        """The first limit line a tab shows after a switch, before it was seen working again, was
        printed on the old subscription (the capture of the switch's pass missed it): it is answered
        by that switch, not counted as the new subscription's limit (no flip-flop to a third one).
        A tab seen working since the switch has run on the new login: its later limits count. An idle
        screen proves nothing (the live stream sees an agent's screen half painted, before its limit line)."""
        for name in list(self.pre_switch):
            det = dets.get(name)
            if det is None or det.state == TabState.WORKING:
                self.pre_switch.discard(name)
            elif det.state == TabState.RATE_LIMITED and det.kind in (LimitKind.USAGE, LimitKind.CREDITS):
                self.pre_switch.discard(name)
                if limit_key(det) not in self.switched_keys:
                    self._resume_on_new(name, det, current, now)

    def _safe(self, tab: Any, det: Detection, inputs: dict[str, datetime], now: datetime) -> bool:
        """The same rules as resume: no recent human typing, no prompt/menu, no half-typed line."""
        last = inputs.get(tab.id)
        if last and (now - last).total_seconds() < self.cfg.human_idle_s:
            return False
        if det.state == TabState.AWAITING_INPUT or det.prompt_text:
            return False
        return True

    async def _reserve_stop(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                            spec: AgentBoxSpec, cur: Candidate) -> None:
        """Esc to the agents, remove the box's login file, print the stop line in each tab."""
        adapter = get_adapter(spec.agent)
        sub = await self.rt.kube.get_custom(C.SUBSCRIPTION_PLURAL, self.namespace, cur.name) or {}
        reserve = ((sub.get("spec") or {}).get("reserve") or {})
        five, week = reserve.get("fiveHourPercent", 0), reserve.get("weeklyPercent", 0)
        if five and cur.five_hour is not None and cur.five_hour >= 100 - five:
            line = f"Stopping to keep {five}% of your 5-hour limit"
        elif week:
            line = f"Stopping to keep {week}% of your weekly limit"
        else:
            line = "Stopping to keep the reserve of your limits"
        until = f" (reserved until {cur.until:%Y-%m-%d %H:%M} UTC)" if cur.until else ""
        self._reserve_pending = {tab.name for tab in tabs if tab.at_shell}
        for tab in tabs:
            if not tab.at_shell:
                await self._press_keys(term, tab.pane_id, adapter.stop_keys)
            rec = self.records.get(tab.name) or TabRecord(tab.name)  # type: ignore[union-attr]
            # Esc went to a running agent: it counts as stopped by the reserve (resumed at the lift)
            # unless its screen showed it idle or waiting on a human. An agent that had not painted a
            # recognisable screen yet (a box started on a reserved subscription) is Unknown, not idle.
            busy = not tab.at_shell and dets[tab.name].state in (
                TabState.WORKING, TabState.RATE_LIMITED, TabState.UNKNOWN)
            self.records[tab.name] = replace(rec, stopped_by_reserve=busy)  # type: ignore[index]
        try:
            await boxfiles.remove_login(term.exec_fn, adapter)
        except boxfiles.BoxFileError as exc:
            log.warning("Box %s/%s: %s", self.namespace, self.name, exc)
        for tab in tabs:
            try:
                await boxfiles.print_notice(term.exec_fn, tab.pane_id, f"agentbox: {line}{until}")
            except boxfiles.BoxFileError:
                pass
        self.reserved = f"{line}{until}"
        metrics.RESERVE_STOPS.labels(self.namespace, cur.name, "five_hour" if "5-hour" in line else "weekly").inc()
        self.post_event("Warning", "ReserveReached", f"{line} on {cur.name}{until}")

    async def _reserve_late_starters(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                                     spec: AgentBoxSpec) -> None:
        """An agent started in a tab that was at its shell when the reserve stopped the box (the box
        started on a reserved subscription, or a human launched it since) gets the same Esc once and
        is resumed at the lift like the others. Tabs already stopped are never pressed again."""
        for tab in tabs:
            if tab.name not in self._reserve_pending or tab.at_shell:
                continue
            if dets[tab.name].state not in (TabState.WORKING, TabState.UNKNOWN):
                continue
            self._reserve_pending.discard(tab.name)
            await self._press_keys(term, tab.pane_id, get_adapter(spec.agent).stop_keys)
            rec = self.records.get(tab.name) or TabRecord(tab.name)  # type: ignore[union-attr]
            self.records[tab.name] = replace(rec, stopped_by_reserve=True)  # type: ignore[index]

    async def _reserve_restore(self, term: BoxTerminal, tabs: list[Any], dets: dict[str, Detection],
                               inputs: dict[str, datetime], spec: AgentBoxSpec, now: datetime) -> None:
        """The reserve lifted (or the box moved): restore the login and resume the stopped tabs."""
        login = await self._login_text(self.current or spec.subscription or "")
        if login is None:
            return
        body = {"metadata": {"name": self.name, "namespace": self.namespace, "uid": self._uid}}
        await self._install_login(term, spec, body, login[1])
        self.reserved = None
        self._reserve_pending = set()
        self.post_event("Normal", "ReserveLifted", f"Reserve lifted on {self.current}; login restored")
        for tab in tabs:
            rec = self.records.get(tab.name) or TabRecord(tab.name)  # type: ignore[union-attr]
            if not rec.stopped_by_reserve:
                continue
            self.records[tab.name] = replace(rec, stopped_by_reserve=False)  # type: ignore[index]
            det = dets[tab.name]
            if not spec.when_agent_stops.resume_after_reset or not self._safe(tab, det, inputs, now):
                continue
            if det.state in (TabState.IDLE, TabState.RATE_LIMITED, TabState.UNKNOWN):
                ok, how = await self._resume(term, tab, spec.agent, spec.time_zone or "UTC", [])
                self.post_event("Normal" if ok else "Warning", "Resumed" if ok else C.R_RESUME_FAILED,
                                f"Tab {tab.name}: {how} after the reserve lifted")

    # ------------------------------------------------------------------ helpers
    async def _not_owned(self, body: dict[str, Any], exc: NotOwned) -> None:
        """A squatting pod: Ready=False with reason PodNotOwned (kept until the pod is the box's
        again) and one Warning Event per appearance; no exec, no login push."""
        status = body.get("status") or {}
        conds = list(status.get("conditions") or [])
        gen = (body.get("metadata") or {}).get("generation")
        new = set_condition(conds, C.COND_READY, False, exc.reason, str(exc), self.rt.clock(), gen)
        if self._squatter != str(exc):
            self._squatter = str(exc)
            current = next((c for c in conds if c.get("type") == C.COND_READY), {})
            if current.get("reason") != exc.reason:
                self.post_event("Warning", exc.reason, str(exc))
        if new != conds or status.get("state") != "Error":
            await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                            {"conditions": new, "state": "Error"})

    def _exec_fn(self, pod: dict[str, Any], container: str):
        """Exec into the box's own pod (`owned_exec`: ownership proven, counted in metrics)."""
        return owned_exec(self.rt.exec, pod, self._uid, self.name, container)

    def _ignore(self, source: str, reason: str, messages: list[str]) -> None:
        """Record the invalid inputs of one source (patterns, annotations, box files) for the
        InputIgnored condition; a Warning for each message the first time it appears."""
        before = self._ignored.get(source, (reason, ()))[1]
        for msg in messages:
            if msg not in before:
                self.post_event("Warning", reason, msg)
        if messages:
            self._ignored[source] = (reason, tuple(dict.fromkeys(messages)))
        else:
            self._ignored.pop(source, None)

    def _annotation_problems(self, annotations: dict[str, str], now: datetime) -> dict[str, str]:
        """The box's annotations, without a resume-at that is not an instant within 31 days (reported
        as InvalidAnnotation naming it) or that was already acted upon (one request, one resume)."""
        raw = annotations.get(C.ANNOTATION_RESUME_AT)
        problems: list[str] = []
        if raw is not None:
            at = _parse_time(raw)
            if at is None or plausible_reset(at, now) is None:
                problems.append(f"metadata.annotations[{C.ANNOTATION_RESUME_AT}]: {raw[:64]!r} is not an RFC 3339 "
                                "instant within 31 days of now; ignored")
            if problems or raw == self._resume_at_done:
                annotations = {k: v for k, v in annotations.items() if k != C.ANNOTATION_RESUME_AT}
        self._ignore("annotations", C.R_INVALID_ANNOTATION, problems)
        return annotations

    def _user_patterns(self, spec: AgentBoxSpec) -> list[Any]:
        from controller.domain.detection import InvalidPattern, compile_user_pattern

        out = []
        errors: set[str] = set()
        for i, pat in enumerate(spec.detection.patterns):
            try:
                out.append(compile_user_pattern(pat.regex, kind=pat.kind,
                                                field_path=f"spec.detection.patterns[{i}].regex"))
            except InvalidPattern as exc:
                msg = str(exc)
                errors.add(msg)
        self._pattern_errors = errors
        self._ignore("patterns", C.R_INVALID_PATTERN, [e + " (the pattern is ignored)" for e in sorted(errors)])
        return out

    def _detect(self, agent: str, screen: str, now: datetime, tz: str, patterns: list[Any]) -> Detection:
        from controller.agents.registry import detect

        return detect(agent, screen, now, tz, patterns)

    def _apply_annotations(self, plan: TabPlan, det: Detection, annotations: dict[str, str], now: datetime) -> TabPlan:
        rec = plan.record
        stalled = rec.phase == Phase.NEEDS_ATTENTION and rec.limit_key == "stalled"
        if not stalled and (rec.phase not in (Phase.RATE_LIMITED, Phase.NEEDS_ATTENTION)
                            or det.state != TabState.RATE_LIMITED):
            return plan
        if annotations.get(C.ANNOTATION_CANCEL_RESUME, "").lower() == "true":
            return TabPlan(replace(rec, resume_at=None, message="Scheduled resume cancelled by annotation "
                                   f"{C.ANNOTATION_CANCEL_RESUME}"))
        at: datetime | None = None
        if C.ANNOTATION_RESUME_NOW in annotations:
            at = now
        elif C.ANNOTATION_RESUME_AT in annotations:
            at = _parse_time(annotations[C.ANNOTATION_RESUME_AT])
        if at is None:
            return plan
        rec = replace(rec, phase=Phase.RATE_LIMITED, resume_at=at, sent_for=None, attempts=0,
                      message=f"Resume requested by annotation for {at:%H:%M:%S} UTC")
        if at > now:
            return TabPlan(rec, wake_at=at)
        if C.ANNOTATION_RESUME_AT in annotations and C.ANNOTATION_RESUME_NOW not in annotations:
            self._resume_at_done = annotations[C.ANNOTATION_RESUME_AT]  # acted upon: once, not every pass
        if stalled:
            self.seen.pop(rec.name, None)
        return TabPlan(replace(rec, resets_at=None), action=Action.CHECK_USAGE, event="ResumeRequested")

    async def _consume_annotations(self, annotations: dict[str, str]) -> None:
        if C.ANNOTATION_RESUME_NOW in annotations:
            await self.rt.kube.patch_annotations(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                                 {C.ANNOTATION_RESUME_NOW: None})

    async def _act(self, term: BoxTerminal, tab: Any, spec: AgentBoxSpec, det: Detection, plan: TabPlan,
                   body: dict[str, Any], tz: str, patterns: list[Any]) -> TabPlan:
        rec = plan.record
        if plan.event == "LimitDetected":
            metrics.DETECTIONS.labels(self.namespace, spec.agent, (det.detected_by or "").split(":")[0],
                                      det.kind.value if det.kind else "").inc()
            when = f"resets {rfc3339(det.resets_at)}" if det.resets_at else "no reset time on screen"
            nxt = rec.message or "the reset has passed; checking the subscription's usage now"
            self.post_event("Normal", "LimitDetected", f"Tab {tab.name}: usage limit ({when}); {nxt}")
        elif plan.event in ("ResumeNotTakingEffect", "PromptNotEmpty", "OutOfCredits", "NeedsAttention", "Stalled",
                            "LimitMenuStillOpen"):
            self.post_event("Warning", plan.event, f"Tab {tab.name}: {rec.message}")
        elif plan.event == "LimitCameBack":
            self.post_event("Normal", "LimitCameBack", f"Tab {tab.name}: {rec.message}")

        if plan.action == Action.ANSWER_MENU and plan.menu_choice is not None:
            journal = start_journal(JournalAction.ANSWER_MENU, self.rt.clock(), rec.limit_key, str(plan.menu_choice))
            self.records[tab.name] = replace(rec, journal=journal)  # type: ignore[index]
            moved, _ = await self._perform(term, tab, spec.agent, tz, patterns, journal)
            self.post_event("Normal", "AnsweredLimitMenu",
                            f"Tab {tab.name}: chose option {plan.menu_choice} 'Stop and wait for limit to reset'"
                            + ("" if moved else " (screen did not change)"))
            # Once per limit event: the next passes wait for the menu to close (domain.resume._schedule).
            answered = replace(rec, journal=None, menu_for=rec.limit_key, menu_at=self.rt.clock())
            return replace(plan, record=answered, wake_at=self.rt.clock() + timedelta(seconds=1))

        return plan

    async def _resume_due(self, term: BoxTerminal, due: list[Any], spec: AgentBoxSpec, body: dict[str, Any],
                          tz: str, patterns: list[Any], plans: dict[str, TabPlan]) -> dict[str, TabPlan]:
        """Resume every due tab of the box together: one usage read, one write-ahead status patch,
        then the keys: agents that only need `continue` get it in one batched tmux call; agents that
        restart (Codex) are restarted concurrently."""
        records = [plans[t.name].record for t in due]
        usage = await self._fresh_usage(spec, records)
        now = self.rt.clock()
        out: dict[str, TabPlan] = {}
        sending: list[Any] = []
        for tab in due:
            rec = plans[tab.name].record
            nxt = after_usage(rec, usage_verdict(usage, rec.window, now), now, self.cfg)
            out[tab.name] = nxt
            if nxt.record.phase == Phase.RESUMING:
                metrics.DEADLINE_LAG.observe(max(0.0, (now - (rec.resume_at or now)).total_seconds()))
                sending.append(tab)
            elif nxt.event == "ResetNotYet":
                self.post_event("Normal", "ResetNotYet", f"Tab {tab.name}: {nxt.record.message}")
        if not sending:
            return out
        # Write-ahead: every tab is marked as being resumed for its limit event, with the journal of the
        # action at its first step, before any key is sent. A controller restarted mid-way completes the
        # journal from the step it reached (never twice, never zero).
        adapter = get_adapter(spec.agent)
        action = JournalAction.RESTART if adapter.restart_argv else JournalAction.CONTINUE
        for tab in sending:
            rec = out[tab.name].record
            self.records[tab.name] = replace(  # type: ignore[index]
                rec, journal=start_journal(action, now, rec.sent_for, adapter.continue_text))
        await self._flush()
        if adapter.restart_argv:
            results = await asyncio.gather(*(
                self._perform(term, tab, spec.agent, tz, patterns, self.records[tab.name].journal,  # type: ignore[arg-type,index]
                              written=True) for tab in sending))
        else:
            results = await self._continue_batch(term, sending, adapter.continue_text)
        for tab, (ok, how) in zip(sending, results):
            metrics.RESUMES.labels(self.namespace, self.name, spec.agent, "ok" if ok else "no_effect").inc()
            nxt = out[tab.name]
            if ok:
                # Said when the reset could not be confirmed (usage API down, refused, throttled): the tab was
                # resumed on the screen's reset time, late rather than never.
                unconfirmed = "" if usage is not None else (
                    " (the usage API could not be read; resumed on the screen's reset time; see the "
                    "Subscription's UsageFetched condition)")
                self.post_event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset{unconfirmed}")
                out[tab.name] = replace(nxt, record=replace(nxt.record, message=f"Resumed: {how}"))
            else:
                self.post_event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
                out[tab.name] = replace(nxt, record=replace(nxt.record, phase=Phase.NEEDS_ATTENTION,
                                                            message=f"{how}; a human should look"), wake_at=None)
        return out

    async def _continue_batch(self, term: BoxTerminal, tabs: list[Any], text: str) -> list[tuple[bool, str]]:
        """Type `text` into several panes in one tmux call, write the journals' Enter step ahead, pause,
        press Enter in all of them in a second call, then wait until each pane changed. The journals (at
        step Type) must already be written. Returns (moved, what was done) per tab."""
        from controller.terminal import tmux

        typing: list[str] = ["tmux"]
        enter: list[str] = ["tmux"]
        for i, tab in enumerate(tabs):
            sep = [";"] if i else []
            typing += sep + tmux.send_text_argv(tab.pane_id, text)[1:]
            enter += sep + tmux.send_key_argv(tab.pane_id, "Enter")[1:]
        await term.run(typing)
        typed = time.monotonic()
        await self._advance([t.name for t in tabs], Step.ENTER)
        await asyncio.sleep(max(0.0, term.send_pause_s - (time.monotonic() - typed)))
        before = await term.capture_all(tabs)
        await term.run(enter)
        moved: set[str] = set()

        async def all_moved() -> bool:
            after = await term.capture_all([t for t in tabs if t.id not in moved])
            moved.update(tid for tid, screen in after.items() if screen != before.get(tid))
            return len(moved) == len(tabs)

        await term.wait_until(all_moved, self.rt.settings.verify_timeout_s)
        how = f"sent '{text}'"
        return [(tab.id in moved, how if tab.id in moved else f"{how} but the screen did not change") for tab in tabs]

    async def _fresh_usage(self, spec: AgentBoxSpec, recs: list[TabRecord]):
        """The subscription's usage read after every given tab's reset instant (None when unreadable)."""
        provider = get_adapter(spec.agent).provider
        current = self.current or spec.subscription or ""
        try:
            found = await self._login_text(current)
            if found is None or found[0] != provider:
                return None
            login = found[2]
            now = self.rt.clock()
            max_age = self.rt.settings.usage_max_age_s
            for rec in recs:
                if rec.resets_at is not None:
                    max_age = min(max_age, max(0.0, (now - rec.resets_at).total_seconds()))
            usage = await self.rt.usage.get((self.namespace, current), provider, login,
                                            max_age_s=max_age, now=self.rt.clock)
            metrics.USAGE_READS.labels(provider, "ok").inc()
            return usage
        except Exception as exc:  # noqa: BLE001 - any failure means "unknown", never "exhausted"
            metrics.USAGE_READS.labels(provider, "error").inc()
            log.info("Box %s/%s: usage read failed (%s)", self.namespace, self.name, type(exc).__name__)
            return None

    async def _resume(self, term: BoxTerminal, tab: Any, agent: str, tz: str, patterns: list[Any],
                      for_key: str | None = None) -> tuple[bool, str]:
        """Send the agent's resume keys as a journaled action; returns (the tab moved on, what was done)."""
        adapter = get_adapter(agent)
        action = JournalAction.RESTART if adapter.restart_argv else JournalAction.CONTINUE
        journal = start_journal(action, self.rt.clock(), for_key, adapter.continue_text)
        return await self._perform(term, tab, agent, tz, patterns, journal)

    async def _press_keys(self, term: BoxTerminal, pane_id: str, keys: tuple[str, ...]) -> None:
        """Press the adapter's keys in order, the send pause between two."""
        for i, key in enumerate(keys):
            if i:
                await asyncio.sleep(self.rt.settings.send_pause_s)
            await term.press(pane_id, key)

    async def _flush(self) -> None:
        """Write the current records to status now (a write-ahead point)."""
        if self._spec is not None:
            await self._write_status(self._body, self._spec, None, self.sub_problem)

    async def _advance(self, names: list[str], step: Step) -> None:
        """Move the journals of `names` to `step` and write them ahead of performing it."""
        now = self.rt.clock()
        for name in names:
            rec = (self.records or {}).get(name)
            if rec is not None and rec.journal is not None:
                self.records[name] = replace(rec, journal=rec.journal.at(step, now))  # type: ignore[index]
        await self._flush()

    async def _perform(self, term: BoxTerminal, tab: Any, agent: str, tz: str, patterns: list[Any],
                       journal: Journal, written: bool = False) -> tuple[bool, str]:
        """Perform `journal`'s steps from its current one, each written to status before its keys are sent
        (`written`: the first step is already in status). Returns (the tab moved on, what was done).

        Raises whatever the exec or the status write raises; the journal then stays in status and the
        next pass (or a restarted controller) completes it from the step it reached.
        """
        from controller.terminal import tmux

        adapter = get_adapter(agent)
        restart_argv = list(adapter.restart_argv or [])
        text = journal.text or adapter.continue_text
        s = self.rt.settings
        rec = (self.records or {}).get(tab.name) or TabRecord(tab.name)
        self.records[tab.name] = replace(rec, journal=journal)  # type: ignore[index]
        if not written:
            await self._flush()

        async def at_shell() -> bool:
            cmd = (await term.foreground(tab.pane_id)).lstrip("-")
            return cmd in tmux.SHELLS

        async def agent_ready() -> bool:
            if await at_shell():
                return False
            screen = await term.capture(tab.pane_id)
            return self._detect(agent, screen, self.rt.clock(), tz, patterns).prompt_text is not None

        restarted = False
        for i, step in enumerate(journal.remaining()):
            if i:
                await self._advance([tab.name], step)
            if step == Step.INTERRUPT:
                await self._press_keys(term, tab.pane_id, adapter.interrupt_keys)
                if not await term.wait_until(at_shell, s.restart_timeout_s):
                    return False, f"pressed {'+'.join(adapter.interrupt_keys)} but the agent did not exit"
            elif step == Step.RELAUNCH:
                # One tmux call (text, then Enter): a shell takes no paste, and the step is then all or nothing.
                await term.run(tmux.send_text_argv(tab.pane_id, shlex.join(restart_argv))
                               + [";"] + tmux.send_key_argv(tab.pane_id, "Enter")[1:])
                restarted = True
            elif step == Step.AWAIT_AGENT:
                restarted = True
                if not await term.wait_until(agent_ready, s.restart_timeout_s):
                    return False, f"ran '{' '.join(restart_argv)}' but the agent's prompt did not come back"
            elif step == Step.TYPE:
                await term.run(tmux.send_text_argv(tab.pane_id, text))
                await asyncio.sleep(s.send_pause_s)
            elif step == Step.ENTER:
                before = await term.capture(tab.pane_id)
                await term.press(tab.pane_id, "Enter")
                moved = await term.wait_changed(tab.pane_id, before, s.verify_timeout_s)
                how = (f"restarted with '{' '.join(restart_argv)}' and sent '{text}'"
                       if restarted or journal.action == JournalAction.RESTART else f"sent '{text}'")
                return moved, how if moved else f"{how} but the screen did not change"
            elif step == Step.PRESS:
                before = await term.capture(tab.pane_id)
                await term.press(tab.pane_id, text)
                moved = await term.wait_changed(tab.pane_id, before, s.verify_timeout_s)
                return moved, f"pressed {text}"
        return True, "nothing left to send"

    async def _recover(self, term: BoxTerminal, tab: Any, spec: AgentBoxSpec, det: Detection,
                       last_input: datetime | None, tz: str, patterns: list[Any]) -> TabPlan:
        """Complete an unfinished journal found at the start of a pass, judged by the screen
        (`controller.domain.resume.recovery_step`)."""
        rec = self.records[tab.name]  # type: ignore[index]
        journal = rec.journal
        assert journal is not None
        verdict: Recovery = recovery_step(journal, det, tab.at_shell, last_input)
        now = self.rt.clock()
        settle = now + timedelta(seconds=self.cfg.settle_s)
        what = {JournalAction.CONTINUE: "the continue", JournalAction.RESTART: "the restart and continue",
                JournalAction.ANSWER_MENU: "the menu answer"}[journal.action]
        metrics.JOURNAL_RECOVERIES.labels(journal.action.value, journal.step.value, verdict.outcome).inc()
        log.info("Box %s/%s tab %s: unfinished %s at step %s: %s", self.namespace, self.name, tab.name,
                 journal.action.value, journal.step.value, verdict.outcome)
        sent = journal.action != JournalAction.ANSWER_MENU
        if verdict.outcome == "abandon":
            if verdict.attention:
                event = "PromptNotEmpty" if "prompt holds" in verdict.reason else "NeedsAttention"
                self.post_event("Warning", event, f"Tab {tab.name}: {what} was interrupted; {verdict.reason}")
                return TabPlan(replace(rec, journal=None, phase=Phase.NEEDS_ATTENTION, resume_at=None,
                                       message=f"{what.capitalize()} was interrupted; {verdict.reason}"))
            return TabPlan(replace(rec, journal=None, message=f"{what.capitalize()} was interrupted; {verdict.reason}"),
                           wake_at=settle)
        if verdict.outcome == "done":
            if sent:
                self.post_event("Normal", "Resumed", f"Tab {tab.name}: {what} took effect before the controller "
                                f"restarted ({verdict.reason})")
            return TabPlan(replace(rec, journal=None, message=f"Resumed: {verdict.reason}" if sent else rec.message),
                           wake_at=settle)
        assert verdict.step is not None
        journal = replace(journal, recoveries=journal.recoveries + 1).at(verdict.step, now)
        ok, how = await self._perform(term, tab, spec.agent, tz, patterns, journal)
        rec = self.records[tab.name]  # type: ignore[index]
        if not sent:  # the menu was answered (once per limit event: see domain.resume._schedule)
            return TabPlan(replace(rec, journal=None, menu_for=journal.for_key or rec.limit_key, menu_at=self.rt.clock()),
                           wake_at=now + timedelta(seconds=1))
        metrics.RESUMES.labels(self.namespace, self.name, spec.agent, "ok" if ok else "no_effect").inc()
        if ok:
            self.post_event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset "
                            f"(completed after a controller restart: {verdict.reason})")
            return TabPlan(replace(rec, journal=None, phase=Phase.RESUMING, sent_for=journal.for_key or rec.sent_for,
                                   sent_at=self.rt.clock(), message=f"Resumed: {how}"), wake_at=settle)
        self.post_event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
        return TabPlan(replace(rec, journal=None, phase=Phase.NEEDS_ATTENTION, message=f"{how}; a human should look"))

    _READY_REASONS = (C.R_RECONCILED, C.R_POD_PENDING, C.R_POD_MISSING, C.R_POD_FAILED, C.R_POD_TERMINATING, C.R_CONTAINER_WAITING, C.R_CONTAINER_TERMINATED,
                      C.R_CHECKING_SESSION, C.R_SESSION_MISSING)
    """Ready reasons that follow the pod and the session; any other is the reconcile's failure, kept."""

    def _ready_conditions(self, body: dict[str, Any], conds: list[dict[str, Any]], view: ContainerView,
                          session: bool | None, watched: bool = True) -> list[dict[str, Any]]:
        """Ready: True only when the box container runs and the tmux session exists.

        ``session``: the session was seen (True), is missing (False), or was not checked (None: the
        condition is left as it is when the container runs).
        """
        conds = self._pod_date(body, conds)
        current = next((c for c in conds if c.get("type") == C.COND_READY), None)
        if current and current.get("reason") not in self._READY_REASONS:
            return conds
        gen = (body.get("metadata") or {}).get("generation")
        now = self.rt.clock()
        if not view.running:
            return set_condition(conds, C.COND_READY, False, view.reason, view.message, now, gen)
        if session is False:
            return set_condition(conds, C.COND_READY, False, C.R_SESSION_MISSING,
                                 f"Container running but it has no tmux session '{C.TMUX_SESSION}' (the image's "
                                 "entrypoint starts it; see docs/troubleshooting.md)", now, gen)
        if session is None:
            return conds
        return set_condition(conds, C.COND_READY, True, C.R_RECONCILED,
                             "Pod running; tabs are watched" if watched
                             else "Pod running (limit features are off for this agent)", now, gen)

    def _pod_date(self, body: dict[str, Any], conds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """PodOutOfDate: True while the pod predates spec.template; False once it was set and is current."""
        gen = (body.get("metadata") or {}).get("generation")
        if self._out_of_date:
            return set_condition(conds, C.COND_POD_OUT_OF_DATE, True, C.R_TEMPLATE_CHANGED, self._out_of_date,
                                 self.rt.clock(), gen)
        if any(c.get("type") == C.COND_POD_OUT_OF_DATE for c in conds):
            return set_condition(conds, C.COND_POD_OUT_OF_DATE, False, C.R_UP_TO_DATE,
                                 "The pod was built from the current spec.template", self.rt.clock(), gen)
        return conds

    async def _heal(self, body: dict[str, Any], spec: AgentBoxSpec, pod: dict[str, Any] | None) -> float | None:
        """Recreate a missing pod, replace an ended (evicted, failed) one, recreate an out-of-date one when
        `spec.podUpdate` allows it (`controller.domain.podheal`). Returns the delay until the next pass when
        the pod is not usable now (status says why), None when the pass goes on."""
        s = self.rt.settings
        meta = body.get("metadata") or {}
        now = self.rt.clock()
        records = self.records if self.records is not None else {
            t["name"]: record_from_status(t) for t in (body.get("status") or {}).get("tabs") or [] if t.get("name")}
        idle = all(r.phase in (Phase.IDLE, Phase.UNKNOWN) and r.journal is None
                   and (r.last_input_at is None or (now - r.last_input_at).total_seconds() >= s.human_idle_s)
                   for r in records.values())
        name = pod_name(self.name)
        if pod is None and not (body.get("status") or {}).get("pod"):
            return None  # never created yet: the reconcile handler creates the first pod and owns Ready
        decision = decide_pod(pod, name, template_hash(spec.template), spec.pod_update, idle,
                              bool(meta.get("deletionTimestamp")))
        was = self._out_of_date
        self._out_of_date = decision.message if decision.out_of_date and decision.action == "none" else None
        if decision.action == "none" and not decision.reason:
            if was != self._out_of_date:
                if self._out_of_date:
                    self.post_event("Normal", C.R_TEMPLATE_CHANGED, self._out_of_date)
                await self._flush_conditions(body)
            return None
        message = decision.message
        if decision.action == "delete" and pod is not None:
            uid = (pod.get("metadata") or {}).get("uid") or ""
            if await self.rt.kube.delete_pod(self.namespace, name, uid):
                self.post_event("Warning" if decision.reason == C.R_POD_FAILED else "Normal",
                                "ReplacingPod" if decision.reason == C.R_POD_FAILED else "RecreatingPod", message)
                self._replacing = (decision.reason, message.removesuffix("; replacing it"))
        elif decision.action == "create":
            from controller.service.boxes import reconcile_box

            outcome = await reconcile_box(body, self.rt)
            for type_, reason, text in outcome.events:
                self.post_event(type_, reason, text)
            if any(reason == "CreatedPod" for _, reason, _ in outcome.events):
                # The pass that deleted an ended pod may be followed at once by this one (the deletion
                # wakes the box): Ready keeps saying why the pod is being replaced.
                why = self._replacing
                message = f"{why[1]}; created a new one" if why else f"Pod {name} was missing; created a new one"
                if why:
                    decision = replace(decision, reason=why[0])
                self._replacing = None
            elif outcome.retry_after:
                message = outcome.events[-1][2] if outcome.events else message
        gen = meta.get("generation")
        conds = list((body.get("status") or {}).get("conditions") or [])
        current = next((c for c in conds if c.get("type") == C.COND_READY), None)
        if current is None or current.get("reason") in self._READY_REASONS:
            conds = set_condition(conds, C.COND_READY, False, decision.reason or C.R_POD_PENDING, message, now, gen)
        conds = self._pod_date(body, conds)
        await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                        {"conditions": conds, "state": "Pending", "pod": name})
        self._last_status = None  # the next full status write goes through
        return min(s.scan_interval_s, 1.0)

    async def _flush_conditions(self, body: dict[str, Any]) -> None:
        """Write the conditions now (PodOutOfDate changed) without waiting for the pass's status write."""
        conds = list((body.get("status") or {}).get("conditions") or [])
        new = self._pod_date(body, conds)
        if new != conds:
            await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name, {"conditions": new})
            self._last_status = None

    async def _session_exists(self, pod: dict[str, Any], container: str) -> bool | None:
        """`tmux has-session` in the box container: True/False, None when exec itself failed."""
        try:
            result = await self._exec_fn(pod, container)(tmux_has_session_argv())
        except Exception as exc:  # noqa: BLE001 - exec transport errors: unknown, retried next scan
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return None
        return result.rc == 0

    async def _write_ready(self, body: dict[str, Any], view: ContainerView, session: bool | None,
                           watched: bool = True) -> None:
        """Patch only Ready and the box state (boxes whose tabs are not watched, or containers not running)."""
        status = body.get("status") or {}
        conds = list(status.get("conditions") or [])
        new = self._ready_conditions(body, conds, view, session, watched)
        state = status.get("state")
        ready = next((c for c in new if c.get("type") == C.COND_READY), {})
        if state != "Error" and (ready.get("reason") in self._READY_REASONS):
            state = ("Running" if ready.get("status") == "True"
                     else "NeedsAttention" if ready.get("reason") == C.R_SESSION_MISSING else "Pending")
        if new != conds or state != status.get("state"):
            await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name,
                                            {"conditions": new, "state": state})

    async def _write_status(self, body: dict[str, Any], spec: AgentBoxSpec, tabs: list[Any] | None,
                            problem: str | None, session: bool = True, problem_reason: str | None = None) -> None:
        """Patch status.tabs, state, resumeAt and the RateLimited/NeedsAttention conditions when changed."""
        records = list((self.records or {}).values())
        tab_status = [record_to_status(r, self.tab_ids.get(r.name)) for r in records]
        limited = [r for r in records if r.phase in (Phase.RATE_LIMITED, Phase.RESUMING)]
        attention = [r for r in records if r.phase == Phase.NEEDS_ATTENTION]
        resume_ats = [r.resume_at for r in records if r.resume_at]
        now = self.rt.clock()
        gen = (body.get("metadata") or {}).get("generation")
        running = ContainerView(True, "ContainerRunning", "")
        conds = self._ready_conditions(body, list((body.get("status") or {}).get("conditions") or []), running, session)
        if limited:
            conds = set_condition(conds, C.COND_RATE_LIMITED, True, C.R_WAITING_FOR_RESET,
                                  f"{len(limited)} tab(s) wait for a usage reset", now, gen)
        else:
            conds = set_condition(conds, C.COND_RATE_LIMITED, False, C.R_NONE_LIMITED, "No tab is rate limited", now, gen)
        if attention or problem:
            msg = problem or "; ".join(f"tab {r.name}: {r.message}" for r in attention)
            reason = C.R_RESUME_FAILED if attention else (problem_reason or (
                C.R_SUBSCRIPTION_NOT_FOUND if problem == self.sub_problem else "TmuxMissing"))
            conds = set_condition(conds, C.COND_NEEDS_ATTENTION, True, reason, msg, now, gen)
        else:
            conds = set_condition(conds, C.COND_NEEDS_ATTENTION, False, C.R_ALL_CLEAR, "No tab needs a human", now, gen)
        if self._ignored:
            first = next(iter(self._ignored.values()))[0]
            conds = set_condition(conds, C.COND_INPUT_IGNORED, True, first,
                                  "; ".join(m for _, msgs in self._ignored.values() for m in msgs), now, gen)
        elif any(c.get("type") == C.COND_INPUT_IGNORED for c in conds):
            conds = set_condition(conds, C.COND_INPUT_IGNORED, False, C.R_ALL_CLEAR,
                                  "Every pattern, annotation and box file read is valid", now, gen)
        if self.reserved:
            conds = set_condition(conds, C.COND_RESERVED, True, "ReserveReached", self.reserved, now, gen)
        else:
            conds = set_condition(conds, C.COND_RESERVED, False, "BelowReserve", "The subscription's reserve is not reached", now, gen)
        if self.stream is not None:
            if self.stream.connected:
                conds = set_condition(conds, C.COND_TERMINAL_STREAM, True, C.R_STREAMING,
                                      "The live tmux stream is attached", now, gen)
            elif self.stream.failures >= self.stream.max_failures:
                why = self.stream.unavailable or "the live tmux stream failed again and again"
                conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_UNUSABLE,
                                      f"Polling the tabs: {why}", now, gen)
                if self._stream_warned != self._stream_pod:
                    self._stream_warned = self._stream_pod
                    self.post_event("Warning", C.R_STREAM_UNUSABLE, f"Polling the tabs: {why}")
            elif self.stream.unavailable:
                conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_NO_CONTROL_MODE,
                                      f"Polling the tabs: {self.stream.unavailable}", now, gen)
            else:
                conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_RECONNECTING,
                                      "Polling the tabs: the live tmux stream is down; reconnecting with backoff",
                                      now, gen)
        elif not self.rt.settings.tmux_stream:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_DISABLED,
                                  "Polling the tabs: settings.tmuxStream is off", now, gen)
        state = ("NeedsAttention" if attention or problem else "Reserved" if self.reserved
                 else "RateLimited" if limited or self.group_exhausted else "Running")
        status = {
            "tabs": tab_status, "state": state, "resumeAt": rfc3339(min(resume_ats)) if resume_ats else None,
            "conditions": conds, "subscription": self.current, "nextSubscription": self.next_sub,
        }
        metrics.TABS_NEEDING_HUMAN.labels(self.namespace, self.name).set(len(attention))
        metrics.TABS_RATE_LIMITED.labels(self.namespace, self.name).set(len(limited))
        metrics.ROTATION_GROUP_EXHAUSTED.labels(self.namespace, self.name).set(1 if self.group_exhausted else 0)
        comparable = {k: v for k, v in status.items() if k != "conditions"}
        comparable["conds"] = [(c["type"], c["status"], c["reason"], c["message"]) for c in conds]
        async with self._status_lock:
            if comparable == self._last_status:
                return
            await self.rt.kube.patch_status(C.AGENTBOX_PLURAL, self.namespace, self.name, status)
            self._last_status = comparable
