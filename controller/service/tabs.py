"""The tab watcher: one per running AgentBox, a pipeline of four steps per pass.

* **observe**: one `controller.domain.box.Observation` (the pod, the tabs with their screens and detections,
  the last human input per tab, the agent's structured usage, the namespace's Subscriptions, the box's
  annotations, the invalid inputs met on the way);
* **decide**: `controller.domain.box.decide` (pure) returns the actions, the tab records, the status and when
  to look again; a read the decision needs (usage at a reset, a login to install) is an action whose result
  feeds the next `decide` of the same pass;
* **execute**: `controller.service.executor.Executor` performs the actions, write-ahead first;
* **record**: `controller.service.status.StatusWriter` writes status once, only when it changed, with the
  watcher's conditions merged by type.

The watcher holds no decision of its own: it keeps the decision's `Memory` between passes (rebuilt from
status after a restart, so the same deadlines are kept) and sleeps until the earliest tab deadline (or the
scan interval), so a resume fires within seconds of its instant instead of at the next poll.
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
    READY_REASONS, BoxDecision, BoxFacts, BoxStatus, DecideConfig, Memory, Observation, PodFacts, StreamView,
    TabView, candidate_from,
    decide, journal_from_status, journal_to_status, memory_from_status, record_from_status, record_to_status,
    reserve_from,
)
from controller.domain.podheal import template_hash
from controller.domain.podstate import box_container_view
from controller.domain.resume import ResumeConfig, limit_key, next_pass_in
from controller.domain.signals import merge
from controller.domain.types import Detection, TabState
from controller.agents.registry import get_adapter
from controller.kube.exec import owned_exec, owned_exec_open
from controller.kube.objects import NotOwned, box_container, owned_by, pod_name
from controller.models import AgentBoxSpec
from controller.runtime import Runtime
from controller.service.executor import Executor
from controller.service.status import StatusWriter
from controller.terminal.session import BoxTerminal, TmuxCommandFailed
from controller.terminal.stream import BoxStream, StreamTerminal
from controller.terminal.tmux import has_session_argv as tmux_has_session_argv

log = logging.getLogger("agentbox.tabs")

EventFn = Callable[[str, str, str], None]
"""Posts a Kubernetes Event on the box: (type Normal|Warning, reason, message)."""

MAX_ROUNDS = 12
"""decide/execute rounds of one pass (each blocking action adds one; a pass needs at most eight)."""

_GUARDS = {C.COND_READY: READY_REASONS}


def _container_tz(pod: dict[str, Any], container: str) -> str | None:
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if ctr.get("name") == container:
            for env in ctr.get("env") or []:
                if env.get("name") == "TZ" and env.get("value"):
                    return env["value"]
    return None


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
        ))
        self.memory: Memory | None = None        # the decision's memory between passes
        self.writer = StatusWriter(rt.kube, C.AGENTBOX_PLURAL, namespace, name, rt.clock)
        self._uid: str | None = None
        self._pending_switch: dict[str, Any] | None = None  # status.switch found at start: completed first
        self.stream: BoxStream | None = None     # the live tmux stream (settings.tmux_stream)
        self._stream_pod: str | None = None      # uid of the pod the stream is attached to
        self._classify: Any = None               # screen -> detection key, for the stream's wake-ups
        self._structured_seen: tuple[int, datetime, Any] | None = None  # (tab states hash, read at, result)

    async def aclose(self) -> None:
        """Detach the live tmux stream (the watcher stops)."""
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    # ------------------------------------------------------------------ one pass
    async def tick(self, body: dict[str, Any]) -> float:
        """Observe, decide, act and record once; return seconds until the next pass is needed."""
        s = self.rt.settings
        meta = body.get("metadata") or {}
        self._uid = meta.get("uid")
        try:
            spec = AgentBoxSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            return s.scan_interval_s  # the reconcile handler reports the invalid spec
        status = body.get("status") or {}
        self.writer.seen(body)
        adapter = get_adapter(spec.agent)
        facts = self._facts(spec, adapter)
        if self.memory is None:
            self.memory = memory_from_status(status, spec.subscription)
            switch = status.get("switch")
            self._pending_switch = switch if isinstance(switch, dict) and switch.get("to") else None
        obs = Observation(
            box=facts, generation=meta.get("generation"), conditions=tuple(status.get("conditions") or []),
            state=status.get("state"), usage_max_age_s=s.usage_max_age_s, stall_s=s.stall_s,
            stream_disabled=not s.tmux_stream,
        )

        # ---- observe: the pod (and decide on it: heal, Ready, or read the tabs)
        pod = await self._read_pod()
        if pod is not None and not owned_by(pod, self._uid):
            # A pod under the box's name that the box does not control: never exec into it.
            await self._run(replace(obs, pod_owned=False, not_owned=str(NotOwned("Pod", pod_name(self.name), self.name))))
            return s.scan_interval_s
        container = box_container((pod or {}).get("spec") or {}, spec.container) if pod else None
        view = box_container_view(pod, pod_name(self.name), container)
        session = None
        if not facts.watched and view.running and pod and container:
            session = await self._session_exists(pod, container)
        obs = replace(obs, pod=view if pod else None, session=session, pod_facts=PodFacts(
            pod_name(self.name), pod, ((pod or {}).get("metadata") or {}).get("uid") or "",
            template_hash(spec.template), spec.pod_update, bool(meta.get("deletionTimestamp")), bool(status.get("pod"))))
        first = await self._run(obs, body=body)
        if first.retry_in is not None:
            return min(s.scan_interval_s, first.retry_in)
        if not first.observe_tabs or pod is None or container is None:
            return s.scan_interval_s

        # ---- observe: the tabs
        tz = spec.time_zone or _container_tz(pod, container) or "UTC"
        patterns, pattern_problems = self._user_patterns(spec)
        term = self._terminal(pod, container, spec.agent, tz, patterns)
        obs = replace(obs, pod=view, session=True, stream=self._stream_state(),
                      input_problems={"patterns": (C.R_INVALID_PATTERN, pattern_problems)})
        try:
            tabs, inputs = await term.tabs()
            screens = await term.capture_all(tabs)
        except TmuxCommandFailed:
            await self._run(replace(obs, capture_problem=(
                "TmuxMissing", f"tmux session '{C.TMUX_SESSION}' not found in the box container")))
            return s.scan_interval_s
        except Exception as exc:  # noqa: BLE001 - exec transport errors: retry at the next scan
            if getattr(exc, "reason", None) == "output_too_large":
                # What the box prints is bounded (controller/kube/exec.py): too many tabs, a huge window,
                # or a tmux that floods. Reported once; watched again when it prints less.
                problem = (f"the box printed more than {s.exec_max_output_bytes} bytes when its tabs were "
                           "captured (too many tabs or a very large window); its tabs are not watched until "
                           "it prints less")
                await self._run(replace(obs, capture_problem=(C.R_BOX_OUTPUT_TOO_LARGE, problem)))
                return s.scan_interval_s
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return s.scan_interval_s
        now = self.rt.clock()
        dets = {tab.name: self._detect(spec.agent, screens.get(tab.id, ""), now, tz, patterns) for tab in tabs}
        dets, file_problems = await self._structured(term, spec, dets, now, screens)
        subs = await self.rt.kube.list_custom_shared(C.SUBSCRIPTION_PLURAL, self.namespace)
        candidates, reserves = self.rt.sub_views.of(self.namespace, subs)  # converted once per object version
        problems = dict(obs.input_problems)
        if file_problems is not None:
            problems["files"] = (C.R_INVALID_BOX_FILE, tuple(file_problems))
        obs = replace(
            obs, tabs=tuple(TabView(t.name, t.id, t.pane_id, t.at_shell, screens.get(t.id, ""), dets[t.name],
                                    inputs.get(t.id)) for t in tabs),
            annotations=dict(meta.get("annotations") or {}), input_problems=problems,
            subscriptions=candidates, reserves=reserves,
            pending_switch=self._pending_switch,
        )

        # ---- decide, execute, record
        screen_ready = self._screen_ready(term, spec.agent, tz, patterns)
        decision = await self._run(obs, term, adapter, {t.name: t for t in tabs}, screen_ready)
        if decision.complete:
            self._pending_switch = None
        live = self.stream is not None and self.stream.connected
        rescan = s.stream_rescan_s if live else s.scan_interval_s
        if decision.memory.out_of_date:  # a pod update waits for idle tabs, judged from this pass's records
            rescan = min(rescan, s.scan_interval_s)
        return next_pass_in(decision.wake_at, self.rt.clock(), rescan)

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
            if executor.written:
                self.memory = replace(mem0, records={**mem0.records, **executor.written})
            raise
        assert decision is not None
        self.memory = decision.memory
        if decision.status is not None:
            await self._record(decision.status)
        return decision

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

    @staticmethod
    def _facts(spec: AgentBoxSpec, adapter: Any) -> BoxFacts:
        """The spec and the agent adapter's facts the decision needs (`adapter`: `AgentAdapter`)."""
        rot = spec.when_agent_stops.rotation
        return BoxFacts(
            agent=spec.agent, subscription=spec.subscription, watched=bool(adapter.provider and spec.subscription),
            resume_after_reset=spec.when_agent_stops.resume_after_reset, rotation=rot.enabled,
            rotation_group=rot.group, rotation_selected=tuple(rot.subscriptions), provider=adapter.provider or "",
            restarts=bool(adapter.restart_argv), continue_text=adapter.continue_text,
            stop_to_switch=adapter.exit_before_login_switch, stop_keys=tuple(adapter.stop_keys),
        )

    def _stream_state(self) -> StreamView | None:
        if self.stream is None:
            return None
        return StreamView(self.stream.connected, self.stream.unavailable,
                          self.stream.failures >= self.stream.max_failures, self._stream_pod)

    def _screen_ready(self, term: BoxTerminal, agent: str, tz: str, patterns: list[Any]) -> Any:
        async def ready(pane: str) -> bool:
            screen = await term.capture(pane)
            return self._detect(agent, screen, self.rt.clock(), tz, patterns).prompt_text is not None
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
            # Everything a decision reads from the screen: a cancelled native wait (Esc), a menu opening, a
            # line typed into the prompt change the plan without changing the state or the limit.
            det = self._detect(agent, screen, now(), tz, patterns)
            return (det.state, det.kind, limit_key(det) if det.state == TabState.RATE_LIMITED else None,
                    det.auto_continue, det.limit_menu, det.menu_choice, bool(det.prompt_text))

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
                          now: datetime, screens: dict[str, str] | None = None
                          ) -> tuple[dict[str, Detection], list[str] | None]:
        """Merge the agent's own machine-readable usage (Claude Code statusline input, Codex rollout
        `token_count` events) into the screen detections. Read only when a tab is not visibly busy; on the
        live stream, only when a tab stopped (the tabs' detected states changed since the last read: the
        agents write these files when a turn ends) or the last read is `stream_rescan_s` old, else the
        last read is reused. Returns the detections and the problems of the files read (None when none
        was read)."""
        if not any(d.state in (TabState.RATE_LIMITED, TabState.IDLE, TabState.UNKNOWN) for d in dets.values()):
            return dets, None
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
            return dets, None
        if usage is None:
            return dets, problems
        return {name: merge(det, usage, source, now) for name, det in dets.items()}, problems

    def _user_patterns(self, spec: AgentBoxSpec) -> tuple[list[Any], tuple[str, ...]]:
        """The compiled spec.detection.patterns and the messages of those that do not compile."""
        from controller.domain.detection import InvalidPattern, compile_user_pattern

        out = []
        errors: set[str] = set()
        for i, pat in enumerate(spec.detection.patterns):
            try:
                out.append(compile_user_pattern(pat.regex, kind=pat.kind,
                                                field_path=f"spec.detection.patterns[{i}].regex"))
            except InvalidPattern as exc:
                errors.add(str(exc))
        return out, tuple(e + " (the pattern is ignored)" for e in sorted(errors))

    def _detect(self, agent: str, screen: str, now: datetime, tz: str, patterns: list[Any]) -> Detection:
        from controller.agents.registry import detect

        return detect(agent, screen, now, tz, patterns)

    def _exec_fn(self, pod: dict[str, Any], container: str):
        """Exec into the box's own pod (`owned_exec`: ownership proven, counted in metrics)."""
        return owned_exec(self.rt.exec, pod, self._uid, self.name, container)

    async def _session_exists(self, pod: dict[str, Any], container: str) -> bool | None:
        """`tmux has-session` in the box container: True/False, None when exec itself failed."""
        try:
            result = await self._exec_fn(pod, container)(tmux_has_session_argv())
        except Exception as exc:  # noqa: BLE001 - exec transport errors: unknown, retried next scan
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return None
        return result.rc == 0
