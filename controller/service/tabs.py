"""The tab watcher: one per running AgentBox, a pipeline of four steps per pass.

* **observe**: one `controller.domain.box.Observation` (the pod, the tabs with their screens and detections,
  the last human input per tab, the agent's structured usage, the namespace's Subscriptions, the box's
  annotations, the invalid inputs met on the way);
* **decide**: `controller.domain.box.decide` (pure) returns the actions, the tab records, the status and when
  to look again; a read the decision needs (usage at a reset, the agent's structured usage files, a login
  to install) is an action whose result feeds the next `decide` of the same pass;
* **execute**: `controller.service.executor.Executor` performs the actions, write-ahead first;
* **record**: `controller.service.status.StatusWriter` writes status once, only when it changed, with the
  watcher's conditions merged by type.

The watcher holds no decision of its own: it observes raw facts (a capture that failed says which failure,
not which condition), keeps the decision's `Memory` between passes (rebuilt from status after a restart, so
the same deadlines are kept and a switch left in status.switch is finished) and sleeps as long as the
decision says (`BoxDecision.next_pass_in`: the earliest tab deadline, at most the pass period the decision
chose), so a resume fires within seconds of its instant instead of at the next poll.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable

from pydantic import ValidationError

from controller import constants as C
from controller import metrics
from controller.domain.box import (  # noqa: F401 - record helpers re-exported for their former callers
    CAPTURE_NO_SESSION, CAPTURE_TOO_LARGE, CAPTURE_TRANSPORT, INVALID_SPEC_BOX, READY_REASONS, BoxDecision, BoxFacts,
    BoxStatus, CaptureFailure, DecideConfig, Memory, Observation, PodFacts, StreamView, TabView, agent_ready, box_facts,
    candidate_from, screen_key,
    decide, journal_from_status, journal_to_status, memory_from_status, record_from_status, record_to_status,
    reserve_from,
)
from controller.domain.podheal import template_hash
from controller.domain.detection import compile_user_patterns
from controller.domain.podstate import box_container_view, box_time_zone
from controller.domain.resume import ResumeConfig
from controller.domain.types import Detection
from controller.agents.registry import get_adapter
from controller.kube.exec import owned_exec, owned_exec_open
from controller.kube.objects import NotOwned, box_container, owned_by, pod_name
from controller.models import AgentBoxSpec
from controller.runtime import Runtime
from controller.service.executor import Executor
from controller.service.status import box_writer
from controller.terminal.session import BoxTerminal, TmuxCommandFailed
from controller.terminal.stream import BoxStream, StreamTerminal

log = logging.getLogger("agentbox.tabs")

EventFn = Callable[[str, str, str], None]
"""Posts a Kubernetes Event on the box: (type Normal|Warning, reason, message)."""

MAX_ROUNDS = 12
"""decide/execute rounds of one pass (each blocking action adds one; a pass needs at most nine)."""

_GUARDS = {C.COND_READY: READY_REASONS}


class BoxWatcher:
    """Watches the tabs of one AgentBox: observe -> decide -> execute -> record, once per pass.

    Args:
        rt: runtime (settings, clients, clock).
        namespace, name: the box.
        post_event: posts an Event on the box (deduplicated; also the webhook and the metric).
    """

    def __init__(self, rt: Runtime, namespace: str, name: str, post_event: EventFn) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.post_event = post_event
        s = rt.settings
        self.cfg = DecideConfig(ResumeConfig(
            margin_s=s.resume_margin_s, human_idle_s=s.human_idle_s, auto_continue_grace_s=s.auto_continue_grace_s,
            settle_s=s.settle_s, max_attempts=s.max_attempts, unknown_reset_recheck_s=s.unknown_reset_recheck_s,
            prepare_s=s.resume_prepare_s,
        ))
        self.memory: Memory | None = None        # the decision's memory between passes
        self.writer = box_writer(rt, namespace, name)  # the box's one writer, shared with the reconcile
        self._uid: str | None = None
        self.stream: BoxStream | None = None     # the live tmux stream (settings.tmux_stream)
        self._stream_pod: str | None = None      # uid of the pod the stream is attached to
        self._classify: Any = None               # screen -> detection key, for the stream's wake-ups
        self._interest: tuple[str, str | None] = ("", None)  # (spec.subscription, provider if rotating)
        self._spec_key: tuple[Any, Any] | None = None  # (uid, generation) of the spec parsed last
        self._spec_parts: tuple[Any, ...] | None = None

    async def aclose(self) -> None:
        """Detach the live tmux stream (the watcher stops)."""
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    # ------------------------------------------------------------------ one pass
    async def tick(self, body: dict[str, Any]) -> float:
        """Observe, decide, act and record once; return seconds until the next pass is needed."""
        s = self.rt.settings
        metrics.WATCHER_PASSES.labels(self.namespace, self.name).inc()
        meta = body.get("metadata") or {}
        self._uid = meta.get("uid")
        parsed = self._parse_spec(body)
        if parsed is None:
            # Decided as any pass (nothing to do; when to look again), its memory kept as it was.
            now = self.rt.clock()
            invalid = Observation(box=INVALID_SPEC_BOX, spec_valid=False, scan_interval_s=s.scan_interval_s,
                                  stream_rescan_s=s.stream_rescan_s)
            return decide(invalid, self.memory or Memory(), now, self.cfg).next_pass_in(now)
        spec, adapter, facts, (patterns, pattern_problems), thash = parsed
        status = body.get("status") or {}
        self.writer.seen(body)
        if self.memory is None:
            self.memory = memory_from_status(status, spec.subscription)
        self._interest = (spec.subscription or "", facts.provider if facts.rotation else None)
        self._note_interest()
        obs = Observation(
            box=facts, generation=meta.get("generation"), conditions=tuple(self.writer.conditions()),
            state=status.get("state"), usage_max_age_s=s.usage_max_age_s, stall_s=s.stall_s,
            stream_disabled=not s.tmux_stream, scan_interval_s=s.scan_interval_s,
            stream_rescan_s=s.stream_rescan_s,
        )

        # ---- observe: the pod (and decide on it: heal, Ready, or read the tabs)
        pod = await self._read_pod()
        if pod is not None and not owned_by(pod, self._uid):
            # A pod under the box's name that the box does not control: never exec into it.
            d = await self._run(replace(obs, pod_owned=False, not_owned=str(NotOwned("Pod", pod_name(self.name), self.name))))
            return d.next_pass_in(self.rt.clock())
        container = box_container((pod or {}).get("spec") or {}, spec.container) if pod else None
        view = box_container_view(pod, pod_name(self.name), container)
        obs = replace(obs, pod=view if pod else None, pod_facts=PodFacts(
            pod_name(self.name), pod, ((pod or {}).get("metadata") or {}).get("uid") or "",
            thash, spec.pod_update, bool(meta.get("deletionTimestamp")), bool(status.get("pod"))))
        plain = BoxTerminal(self._exec_fn(pod, container), s.send_pause_s) if pod and container else None
        first = await self._run(obs, plain, body=body)
        if not first.observe_tabs or pod is None or container is None:
            return first.next_pass_in(self.rt.clock())

        # ---- observe: the tabs
        tz = box_time_zone(spec.time_zone, pod, container)
        term = self._terminal(pod, container, spec.agent, tz, patterns)
        obs = replace(obs, pod=view, session=True, stream=self._stream_state(),
                      input_problems={"patterns": (C.R_INVALID_PATTERN, pattern_problems)})
        try:
            tabs, inputs = await term.tabs()
            screens = await term.capture_all(tabs)
        except TmuxCommandFailed:
            d = await self._run(replace(obs, capture_failure=CaptureFailure(CAPTURE_NO_SESSION)))
            return d.next_pass_in(self.rt.clock())
        except Exception as exc:  # noqa: BLE001 - exec transport errors and output bounds: decided on
            if getattr(exc, "reason", None) == "output_too_large":
                failure = CaptureFailure(CAPTURE_TOO_LARGE, s.exec_max_output_bytes)
            else:
                log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
                failure = CaptureFailure(CAPTURE_TRANSPORT)
            d = await self._run(replace(obs, capture_failure=failure))
            return d.next_pass_in(self.rt.clock())
        now = self.rt.clock()
        dets = {tab.name: self._detect(spec.agent, screens.get(tab.id, ""), now, tz, patterns) for tab in tabs}
        subs = self.rt.subscriptions.of(self.namespace)  # the watch's copies (kopf's index): no LIST
        if subs is None:  # no index (the service run without kopf's startup)
            subs = await self.rt.kube.list_custom_shared(C.SUBSCRIPTION_PLURAL, self.namespace)
        candidates, reserves = self.rt.sub_views.of(self.namespace, subs)  # converted once per object version
        obs = replace(
            obs, tabs=tuple(TabView(t.name, t.id, t.pane_id, t.at_shell, screens.get(t.id, ""), dets[t.name],
                                    inputs.get(t.id)) for t in tabs),
            annotations=dict(meta.get("annotations") or {}),
            subscriptions=candidates, reserves=reserves,
        )

        # ---- decide, execute, record
        screen_ready = self._screen_ready(term, spec.agent, tz, patterns)
        decision = await self._run(obs, term, adapter, {t.name: t for t in tabs}, screen_ready)
        return decision.next_pass_in(self.rt.clock())

    def _parse_spec(self, body: dict[str, Any]) -> tuple[Any, ...] | None:
        """The box's spec and what follows from it alone (its agent adapter, the decision's `BoxFacts`, the
        compiled user patterns and their problems, the pod template's hash), or None when the spec is
        invalid. Kept per spec generation: a pass at an unchanged spec does not validate, compile and hash it
        again (a thousand passes at a reset did)."""
        meta = body.get("metadata") or {}
        key = (meta.get("uid"), meta.get("generation"))
        if key[1] is not None and key == self._spec_key:
            return self._spec_parts
        try:
            spec = AgentBoxSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            parts = None
        else:
            adapter = get_adapter(spec.agent)
            rot = spec.when_agent_stops.rotation
            facts = box_facts(spec.agent, spec.subscription, adapter,
                              resume_after_reset=spec.when_agent_stops.resume_after_reset, rotation=rot.enabled,
                              rotation_group=rot.group, rotation_selected=rot.subscriptions)
            compiled = compile_user_patterns([(p.regex, p.kind) for p in spec.detection.patterns])
            parts = (spec, adapter, facts, compiled, template_hash(spec.template))
        self._spec_key, self._spec_parts = key, parts
        return parts

    async def _run(self, obs: Observation, term: BoxTerminal | None = None, adapter: Any = None,
                   tabs: dict[str, Any] | None = None, screen_ready: Any = None,
                   body: dict[str, Any] | None = None) -> BoxDecision:
        """decide -> execute until the decision is complete, then record. A pass that fails mid-way keeps the
        journals it wrote ahead in memory (the next pass completes them), nothing else of its decision."""
        mem0 = self.memory or Memory()
        now = self.rt.clock()
        executor = Executor(self.rt, self.namespace, self.name, self._uid, adapter, term,  # type: ignore[arg-type]
                            self.post_event, self._record, screen_ready, tabs or {}, body, self.writer.write)
        decision: BoxDecision | None = None
        try:
            for _ in range(MAX_ROUNDS):
                decision = decide(replace(obs, results=dict(executor.results)), mem0, now, self.cfg)
                await executor.run(decision)
                if decision.complete:
                    break
            else:
                log.error("Box %s/%s: the decision did not complete in %d rounds", self.namespace, self.name,
                          MAX_ROUNDS)
        except BaseException:
            if executor.written or executor.switch_written is not None:
                # What was written ahead stays: the tab journals, and a switch left in status.switch (its
                # agents may be stopped already: the next pass completes it, `domain.box.switch.complete_pending_switch`,
                # instead of deciding afresh on tabs that no longer show the limit they were stopped for).
                self.memory = replace(mem0, records={**mem0.records, **executor.written},
                                      pending_switch=executor.switch_written or mem0.pending_switch)
            raise
        assert decision is not None
        self.memory = decision.memory
        self._note_interest()
        if decision.status is not None:
            await self._record(decision.status)
        return decision

    def _note_interest(self) -> None:
        """Tell Subscription changes which of them concern this box (`Runtime.interests`): the one it runs
        on now (status.subscription after a switch), the one its spec names (a move there may be pending:
        its becoming usable must wake the box), and its provider's when it rotates."""
        spec_sub, provider = self._interest
        names = (self.memory.current if self.memory else None, spec_sub)
        self.rt.interests[(self.namespace, self.name)] = (tuple(dict.fromkeys(n for n in names if n)), provider)

    async def _record(self, status: BoxStatus) -> None:
        """Write the decision's status (only when it changed; conditions merged by type)."""
        for gauge, value in status.gauges.items():
            getattr(metrics, gauge).labels(self.namespace, self.name).set(value)
        await self.writer.write(status.fields, status.conditions, _GUARDS if status.guard_ready else None)

    # ------------------------------------------------------------------ observing helpers
    async def _read_pod(self) -> dict[str, Any] | None:
        """The box pod: the pod watch's latest body while the live stream is attached to that very pod (its
        exec proves the pod exists: a pod deleted or replaced ends it; the watch brings the pod's changes),
        else a GET (no stream, the stream down, the watch has not delivered that pod). The caller checks
        ownership on either the same way."""
        name = pod_name(self.name)
        if self.stream is not None and self.stream.connected and self._stream_pod:
            pod = self.rt.pods.get(self.namespace, name, self._stream_pod)
            if pod is not None:
                return pod  # type: ignore[return-value]
        return await self.rt.kube.get_pod(self.namespace, name)

    def _stream_state(self) -> StreamView | None:
        if self.stream is None:
            return None
        return StreamView(self.stream.connected, self.stream.unavailable, self.stream.failures,
                          self.stream.max_failures, self._stream_pod)

    def _screen_ready(self, term: BoxTerminal, agent: str, tz: str, patterns: list[Any]) -> Any:
        async def ready(pane: str) -> bool:
            screen = await term.capture(pane)
            return agent_ready(self._detect(agent, screen, self.rt.clock(), tz, patterns))
        return ready

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
            # What a decision reads from the screen (`screen_key`): a change wakes the watcher.
            return screen_key(self._detect(agent, screen, now(), tz, patterns))

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

    def _detect(self, agent: str, screen: str, now: datetime, tz: str, patterns: list[Any]) -> Detection:
        from controller.agents.registry import detect

        return detect(agent, screen, now, tz, patterns)

    def _exec_fn(self, pod: dict[str, Any], container: str):
        """Exec into the box's own pod (`owned_exec`: ownership proven, counted in metrics)."""
        return owned_exec(self.rt.exec, pod, self._uid, self.name, container)
