"""The box decision: `decide(observation, memory, now) -> BoxDecision`. Pure: no I/O, `now` is a parameter.

The tab watcher (`controller.service.tabs`) runs one pass as observe -> decide -> execute -> record:

* it **observes** one `Observation` (tabs and their detections, the last human input per tab, the pod's
  state, the subscriptions the box may use, the box's annotations, the input problems found on the way);
* `decide` returns a `BoxDecision`: the ordered **actions** (keys to press, journaled resumes, a login to
  install or remove, Events to post, metrics to count), the next `Memory` (tab records and what the
  watcher remembers between passes), the box's **status** (fields and the conditions it owns) and when
  to look again;
* the executor performs the actions it has not performed yet, in order; an action whose result the
  decision needs (a usage read, a resume's outcome, a login install, a switch) **blocks**: its result is
  added to `Observation.results` and `decide` is called again with the same observation, the same memory
  and the same `now`. Being deterministic, the replay returns the same actions up to the blocking one
  (the executor checks it and skips them), then what follows from the result;
* the decision's status is written once (conditions merged by type, `controller.service.status`).

Everything the watcher used to decide inside the service is here: resume planning
(`controller.domain.resume`), journals left unfinished, stalls, the resume annotations, rotation
(`controller.domain.rotation`), the reserve (stop and restore), the switch left unfinished by a previous
controller (and the status fields that close it), when to read the agent's structured usage files and
when to reuse the last read, their merge into the detections, the invalid inputs (`InputIgnored`), the
wording of a failed capture and of what a journaled action did (`describe`), the box's state and
conditions, and when to look again (`BoxDecision.next_pass_in`). Pure helpers the watcher calls while
observing are here too: `box_facts` (which boxes are watched), `screen_key` (what wakes the live stream),
`agent_ready`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Protocol, Sequence

from controller import constants as C
from controller.conditions import rfc3339, set_condition
from controller.domain.actions import (  # noqa: F401 - the action types are part of this module's interface
    BLOCKING, JOURNALED, Act, CheckSession, ClearAnnotation, Count, CreatePod, DeletePod, Done, InstallLogin, PatchStatus,
    PodCreated, Performed, PostEvent, PressKey, PrintNotice, ReadStructured, ReadUsage, RemoveLogin, RunJournal, SendContinue,
    SessionSeen, StructuredRead, SwitchSubscription, UsageRead,
)
from controller.domain.podheal import decide_pod
from controller.domain.podstate import ContainerView
from controller.domain.resume import (
    MAX_ARMED_S, Action as PlanAction, Journal, JournalAction, Phase, ResumeConfig, Step, TabPlan, TabRecord, after_usage,
    limit_key, next_pass_in, plan_tab, recovery_step, stall_plan, start_journal, usage_verdict,
)
from controller.domain.rotation import Candidate, choose_next, first_to_reset, follow_spec, group_members, must_leave
from controller.domain.signals import last_lines, merge
from controller.domain.types import Detection, LimitKind, TabState, Usage, plausible_reset
from controller.redact import STATUS_MESSAGE_MAX, bounded

READY_REASONS = frozenset({
    C.R_RECONCILED, C.R_POD_PENDING, C.R_POD_MISSING, C.R_POD_FAILED, C.R_POD_TERMINATING,
    C.R_CONTAINER_WAITING, C.R_CONTAINER_TERMINATED, C.R_CHECKING_SESSION, C.R_SESSION_MISSING,
})
"""Ready reasons that follow the pod and the session (the watcher's); any other is the reconcile's failure,
which the watcher keeps."""

POD_NOT_OWNED = "PodNotOwned"  # Ready False: a pod under the box's name is not the box's (`NotOwned.reason`)

WATCHER_CONDITIONS = (C.COND_READY, C.COND_POD_OUT_OF_DATE, C.COND_RATE_LIMITED, C.COND_NEEDS_ATTENTION,
                      C.COND_INPUT_IGNORED, C.COND_RESERVED, C.COND_TERMINAL_STREAM)
"""Condition types the watcher writes (Ready only under `READY_REASONS`)."""


# ============================================================================ observation
@dataclass(frozen=True)
class TabView:
    """One tab as observed in this pass.

    Attributes:
        name: tmux window name (the tab's identity in status.tabs[]).
        id: tmux window id ("@3").
        pane: tmux pane id ("%3") the keys go to.
        at_shell: the pane's foreground process is a shell (no agent runs).
        screen: the captured screen (untrusted text; only hashed and cut to its last lines here).
        detection: what the screen says (`decide` merges the agent's structured usage into it).
        last_input_at: last time a human typed in the tab (UTC), or None.
    """

    name: str
    id: str
    pane: str
    at_shell: bool
    screen: str
    detection: Detection
    last_input_at: datetime | None = None


@dataclass(frozen=True)
class BoxFacts:
    """The spec and agent-adapter facts a decision needs.

    Attributes:
        agent: spec.agent.
        subscription: spec.subscription (None: limit features are off).
        watched: the agent supports subscriptions and the box names one (tabs are watched).
        resume_after_reset: spec.whenAgentStops.resumeAfterReset.
        rotation: spec.whenAgentStops.rotation.enabled.
        rotation_group: "All" | "Selected".
        rotation_selected: rotation.subscriptions.
        provider: the agent's provider ("anthropic" | "openai").
        restarts: the agent is restarted to resume (its adapter has a restart argv).
        continue_text: the text that resumes the agent.
        stop_to_switch: the agent must be stopped before its login changes (a running Codex refuses
            another account's auth.json): the adapter's `exit_before_login_switch`.
        stop_keys: the adapter's keys that stop a running agent's turn (the reserve stop).
    """

    agent: str
    subscription: str | None
    watched: bool = True
    resume_after_reset: bool = True
    rotation: bool = False
    rotation_group: str = "All"
    rotation_selected: tuple[str, ...] = ()
    provider: str = ""
    restarts: bool = False
    continue_text: str = "continue"
    stop_to_switch: bool = False
    stop_keys: tuple[str, ...] = ("Escape",)


class AgentFacts(Protocol):
    """What `box_facts` reads of an agent adapter (`controller.agents.adapter.AgentAdapter`)."""

    @property
    def provider(self) -> str | None: ...
    @property
    def restart_argv(self) -> tuple[str, ...] | None: ...
    @property
    def continue_text(self) -> str: ...
    @property
    def exit_before_login_switch(self) -> bool: ...
    @property
    def stop_keys(self) -> tuple[str, ...]: ...


def box_facts(agent: str, subscription: str | None, adapter: AgentFacts, *, resume_after_reset: bool = True,
              rotation: bool = False, rotation_group: str = "All", rotation_selected: Sequence[str] = ()
              ) -> BoxFacts:
    """The decision's view of a box: its spec (spec.agent, spec.subscription, spec.whenAgentStops) and its
    agent adapter's facts. The tabs are watched only when the agent runs on a provider's subscription and
    the box names one; the agent is restarted to resume when its adapter has a restart argv."""
    return BoxFacts(
        agent=agent, subscription=subscription, watched=bool(adapter.provider and subscription),
        resume_after_reset=resume_after_reset, rotation=rotation, rotation_group=rotation_group,
        rotation_selected=tuple(rotation_selected), provider=adapter.provider or "",
        restarts=bool(adapter.restart_argv), continue_text=adapter.continue_text,
        stop_to_switch=adapter.exit_before_login_switch, stop_keys=tuple(adapter.stop_keys),
    )


INVALID_SPEC_BOX = BoxFacts("", None, watched=False)
"""The `Observation.box` of a box whose spec is invalid (no agent, no subscription, not watched)."""


@dataclass(frozen=True)
class PodFacts:
    """The box pod as stored, for healing (`controller.domain.podheal.decide_pod`).

    Attributes:
        name: the pod's name.
        obj: the stored Pod (owned by the box) or None when there is none.
        uid: its metadata.uid ("" when none).
        desired_hash: `template_hash` of the box's current spec.template.
        policy: spec.podUpdate ("WhenIdle" | "OnDelete").
        box_deleting: the AgentBox is being deleted (nothing is created).
        created_before: status.pod is set (the reconcile created the first pod; before that it owns Ready).
    """

    name: str
    obj: Mapping[str, Any] | None
    uid: str = ""
    desired_hash: str = ""
    policy: str = "OnDelete"
    box_deleting: bool = False
    created_before: bool = True


@dataclass(frozen=True)
class StreamView:
    """The live tmux stream of the box (`controller.terminal.stream.BoxStream`).

    Attributes:
        connected: the stream is attached.
        why: why control mode cannot be used ("no tmux", an old tmux...), None when it may come back.
        failures: consecutive streams the box's side broke (`BoxStream.failures`).
        max_failures: the failures after which streaming is given up (`BoxStream.max_failures`); whether it
            is, is `stream_given_up`'s to say.
        pod: uid of the pod the stream belongs to (one StreamUnusable Warning per pod).
    """

    connected: bool
    why: str | None = None
    failures: int = 0
    max_failures: int = 5
    pod: str | None = None


def stream_given_up(stream: StreamView) -> bool:
    """The live stream failed too often: the box is polled (TerminalStream False, StreamUnusable, one Warning
    per pod) until a retry lives.

    Args:
        stream: the stream's raw state (consecutive failures and the most allowed, counts).
    Returns:
        True when `failures` reached `max_failures`.
    """
    return stream.failures >= stream.max_failures


CAPTURE_NO_SESSION = "no_session"
"""The terminal said the box's tmux session does not exist (`TmuxCommandFailed`)."""
CAPTURE_TOO_LARGE = "output_too_large"
"""The box printed more than the exec output bound while its tabs were captured."""
CAPTURE_TRANSPORT = "transport"
"""The exec itself failed (API server, kubelet, websocket): nothing is known; looked at again next scan."""


@dataclass(frozen=True)
class CaptureFailure:
    """Why the tabs could not be read this pass (the observer's raw fact).

    Attributes:
        kind: `CAPTURE_NO_SESSION` | `CAPTURE_TOO_LARGE` | `CAPTURE_TRANSPORT`.
        limit_bytes: the exec output bound (bytes) that was exceeded (`CAPTURE_TOO_LARGE`), else 0.
    """

    kind: str
    limit_bytes: int = 0


@dataclass(frozen=True)
class Reserve:
    """spec.reserve of a Subscription (percent 0-100 of each window to keep)."""

    five_hour: float = 0
    weekly: float = 0


@dataclass(frozen=True)
class Observation:
    """Everything one pass observed (untrusted values already bounded by the observer).

    Attributes:
        box: spec and adapter facts (`INVALID_SPEC_BOX` when the spec is invalid).
        spec_valid: the box's spec validated; False: nothing else was observed (the reconcile handler
            reports the invalid spec) and the decision only says when to look again.
        generation: metadata.generation (observedGeneration of the conditions).
        conditions: status.conditions as read (the current Ready reason is kept when it is the reconcile's).
        state: status.state as read.
        pod_owned: False when a pod under the box's name is not the box's (a squatter); `not_owned` says why.
        not_owned: the message of that refusal.
        pod: the box container's view (running or why not); None when there is no pod yet.
        pod_facts: the stored pod for healing; None when not checked.
        session: the tmux session exists (True/False), None when not checked (a box whose tabs are not
            watched then gets a `CheckSession`).
        capture_failure: why the tabs could not be read (a raw fact; `decide` words the condition), or None.
        tabs: the tabs; None when not read this pass.
        annotations: metadata.annotations.
        input_problems: source -> (reason, messages) of the inputs checked while observing ("patterns",
            "files"); a source not present was not checked this pass (its last problems stand).
        subscriptions: the namespace's Subscriptions as rotation candidates; None when not listed.
        reserves: spec.reserve per Subscription name.
        stream: None without a live tmux stream; else its state.
        stream_disabled: the live tmux stream is off by settings (TerminalStream says so).
        usage_max_age_s: the oldest usage a resume may rely on (seconds).
        stall_s: a tab unchanged this long with no limit needs a human (seconds).
        scan_interval_s: the polling period: the longest time between two passes without a live stream
            (seconds, settings.scan_interval_s).
        stream_rescan_s: the longest time between two passes while the live stream is attached (seconds,
            settings.stream_rescan_s); also the age under which a structured read is reused.
        results: results of the blocking actions already performed in this pass (see `decide`).
    """

    box: BoxFacts
    spec_valid: bool = True
    generation: int | None = None
    conditions: tuple[dict[str, Any], ...] = ()
    state: str | None = None
    pod_owned: bool = True
    not_owned: str = ""
    pod: ContainerView | None = None
    pod_facts: PodFacts | None = None
    session: bool | None = None
    capture_failure: CaptureFailure | None = None
    tabs: tuple[TabView, ...] | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    input_problems: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    subscriptions: tuple[Candidate, ...] | None = None
    reserves: Mapping[str, Reserve] = field(default_factory=dict)
    stream: StreamView | None = None
    stream_disabled: bool = False
    usage_max_age_s: float = 60.0
    stall_s: float = 1800.0
    scan_interval_s: float = 5.0
    stream_rescan_s: float = 300.0
    results: Mapping[Act, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Memory:
    """What the watcher remembers between passes (the next one is `BoxDecision.memory`).

    Attributes:
        records: tab name -> TabRecord (mirrors status.tabs[]).
        tab_ids: tab name -> tmux window id.
        seen: tab name -> (screen digest, unchanged since UTC) for stalls.
        ignored: source -> (reason, messages) of the inputs ignored (InputIgnored).
        resume_at_done: the resume-at annotation value already acted upon (one request, one resume).
        current: the subscription the box runs on (status.subscription).
        next_sub: the subscription rotation would pick next.
        reserved: the stop line while the reserve holds the box, else None.
        reserve_pending: tabs at their shell when the reserve stopped the box.
        switched_keys: limit events already answered by a switch.
        pre_switch: tabs not yet seen limited or working since the last switch.
        noted: episodes already announced by an Event (one Event per episode).
        group_exhausted: every subscription of the rotation group is exhausted.
        sub_problem: the box's subscription is missing (NeedsAttention message).
        output_problem: the box printed too much (announced once).
        squatter: the PodNotOwned message already announced.
        out_of_date: PodOutOfDate message while the pod predates spec.template, else None.
        replacing: (Ready reason, message) of the ended pod being replaced (said until the new one exists).
        stream_warned: uid of the pod whose unusable stream was reported (one Warning per pod).
        pending_switch: status.switch a previous controller left unfinished (a dict with `to`), found when
            the memory was rebuilt from status; completed (or given up) by the first pass that reads the tabs.
        structured: the last structured read: (the tabs' (name, state, kind, limit) digest it was read
            for, the instant it was read (UTC), its result); reused on a live stream (`_structured`).
        loaded: the memory was rebuilt from status (a restarted controller starts from status).
    """

    records: Mapping[str, TabRecord] = field(default_factory=dict)
    tab_ids: Mapping[str, str] = field(default_factory=dict)
    seen: Mapping[str, tuple[str, datetime]] = field(default_factory=dict)
    ignored: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    resume_at_done: str | None = None
    current: str | None = None
    next_sub: str | None = None
    reserved: str | None = None
    reserve_pending: frozenset[str] = frozenset()
    switched_keys: frozenset[str] = frozenset()
    pre_switch: frozenset[str] = frozenset()
    noted: frozenset[str] = frozenset()
    group_exhausted: bool = False
    sub_problem: str | None = None
    output_problem: str | None = None
    squatter: str | None = None
    out_of_date: str | None = None
    replacing: tuple[str, str] | None = None
    stream_warned: str | None = None
    structured: tuple[tuple[Any, ...], datetime, StructuredRead] | None = None
    pending_switch: Mapping[str, Any] | None = None
    loaded: bool = False


@dataclass(frozen=True)
class BoxStatus:
    """What the watcher writes to status once per pass.

    Attributes:
        fields: status fields (camelCase), written as they are.
        conditions: the conditions the watcher sets (types of `WATCHER_CONDITIONS`), merged by type.
        guard_ready: Ready is replaced only while the stored one has a reason of `READY_REASONS`.
        gauges: metric name -> value (tabs needing a human, tabs limited, group exhausted).
    """

    fields: Mapping[str, Any]
    conditions: tuple[dict[str, Any], ...]
    guard_ready: bool = True
    gauges: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BoxDecision:
    """The outcome of `decide`.

    Attributes:
        actions: what to do, in order (the executor skips the prefix it already performed).
        memory: the memory after this pass (tab records included).
        status: what to write (None: nothing to write this pass).
        wake_at: per tab, when to look again (UTC; None = the regular scan).
        complete: False while a blocking action waits for its result (call `decide` again with it).
        period_s: the longest time until the next pass when no tab has a deadline (seconds): the heal
            retry while the pod is being healed; `Observation.stream_rescan_s` on a live stream (the
            stream wakes the watcher on a change), at most the scan interval while the pod is out of date
            (its replacement waits for idle tabs, judged from the records); else the scan interval.
        observe_tabs: the pod runs and its tabs are watched but were not read: read them and decide again.
    """

    actions: tuple[Act, ...]
    memory: Memory
    status: BoxStatus | None
    wake_at: tuple[datetime | None, ...] = ()
    complete: bool = True
    period_s: float = 5.0
    observe_tabs: bool = False

    @property
    def tab_records(self) -> Mapping[str, TabRecord]:
        """The tab records after this pass."""
        return self.memory.records

    def next_pass_in(self, now: datetime) -> float:
        """Seconds from `now` (UTC, the end of the pass) until the next pass: the earliest tab deadline,
        at most `period_s`, never 0 (`controller.domain.resume.next_pass_in`)."""
        return next_pass_in(self.wake_at, now, self.period_s)


@dataclass(frozen=True)
class DecideConfig:
    """Tunables of the decision (seconds); `resume` is `controller.domain.resume.ResumeConfig`."""

    resume: ResumeConfig = field(default_factory=ResumeConfig)


# ============================================================================ status parsing
def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 instant as UTC; None when absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (ValueError, OverflowError):  # year 9999 at -12:00 is year 10000 in UTC
        return None


def journal_from_status(data: Any) -> Journal | None:
    """Rebuild a Journal from status.tabs[].journal; None when absent or unreadable (then nothing is resumed
    from it: an unreadable journal never sends keys)."""
    if not isinstance(data, dict):
        return None
    try:
        started = parse_time(data.get("startedAt"))
        step_at = parse_time(data.get("stepAt")) or started
        if started is None or step_at is None:
            return None
        not_before = parse_time(data.get("notBefore"))
        if data.get("notBefore") is not None and not_before is None:
            return None  # an armed send whose instant cannot be read: never sent early
        if not_before is not None and (not_before - started).total_seconds() > MAX_ARMED_S:
            return None  # an instant this controller never arms (years away): never waited for
        pod = data.get("pod")
        return Journal(JournalAction(data.get("action")), Step(data.get("step")), started, step_at,
                       data.get("forKey"), data.get("text"), int(data.get("recoveries") or 0),
                       not_before=not_before, pod=pod if isinstance(pod, str) and pod else None)
    except (ValueError, TypeError):
        return None


def journal_to_status(journal: Journal | None) -> dict[str, Any] | None:
    """status.tabs[].journal of a Journal (camelCase, no None values). `notBefore` is rounded up to the
    second (status instants have one-second resolution: an armed Enter is never moved earlier)."""
    if journal is None:
        return None
    not_before = journal.not_before
    if not_before is not None and not_before.microsecond:
        not_before = not_before.replace(microsecond=0) + timedelta(seconds=1)
    out = {"action": journal.action.value, "step": journal.step.value, "startedAt": rfc3339(journal.started_at),
           "stepAt": rfc3339(journal.step_at), "forKey": journal.for_key, "text": journal.text,
           "recoveries": journal.recoveries or None, "notBefore": rfc3339(not_before), "pod": journal.pod}
    return {k: v for k, v in out.items() if v is not None}


def record_from_status(tab: dict[str, Any]) -> TabRecord:
    """Rebuild a TabRecord from a status.tabs[] entry (controller restart)."""
    try:
        phase = Phase(tab.get("state") or "Unknown")
    except ValueError:
        phase = Phase.UNKNOWN
    return TabRecord(
        name=tab.get("name", ""), phase=phase, limit_key=tab.get("limitKey"),
        resets_at=parse_time(tab.get("resetsAt")), resume_at=parse_time(tab.get("resumeAt")),
        detected_by=tab.get("detectedBy"), message=tab.get("message"), sent_for=tab.get("sentFor"),
        sent_at=parse_time(tab.get("sentAt")), attempts=int(tab.get("attempts") or 0),
        last_input_at=parse_time(tab.get("lastInputAt")), stopped_by_reserve=bool(tab.get("stoppedByReserve")),
        journal=journal_from_status(tab.get("journal")),
        menu_for=tab.get("menuAnsweredFor"), menu_at=parse_time(tab.get("menuAnsweredAt")),
    )


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


def memory_from_status(status: Mapping[str, Any], spec_subscription: str | None) -> Memory:
    """The memory a (re)started watcher begins with: tab records, the subscription, the reserve stop line and
    a switch left unfinished (status.switch) as the last controller wrote them to status."""
    tabs = [t for t in status.get("tabs") or [] if isinstance(t, dict) and t.get("name")]
    reserved = next((c for c in status.get("conditions") or []
                     if c.get("type") == C.COND_RESERVED and c.get("status") == "True"), None)
    switch = status.get("switch")
    return Memory(
        records={t["name"]: record_from_status(t) for t in tabs},
        tab_ids={t["name"]: t.get("id", "") for t in tabs},
        current=status.get("subscription") or spec_subscription,
        reserved=reserved.get("message") if reserved else None,
        pending_switch=switch if isinstance(switch, dict) and switch.get("to") else None,
        loaded=True,
    )


def candidate_from(sub: Mapping[str, Any]) -> Candidate:
    """Rotation's view of a Subscription object (spec.provider and status)."""
    status = sub.get("status") or {}
    windows = status.get("windows") or {}
    five, week = windows.get("fiveHour") or {}, windows.get("weekly") or {}
    until = parse_time(status.get("reservedUntil"))
    if status.get("state") == "Exhausted":
        resets = [parse_time(w.get("resetsAt")) for w in (five, week)
                  if (w.get("utilization") or 0) >= 100 and w.get("resetsAt")]
        until = max((r for r in resets if r), default=None)
    return Candidate(
        name=sub["metadata"]["name"], provider=(sub.get("spec") or {}).get("provider", ""),
        state=status.get("state") or "Unknown", five_hour=five.get("utilization"), weekly=week.get("utilization"),
        five_hour_reset=parse_time(five.get("resetsAt")), until=until,
    )


def reserve_from(sub: Mapping[str, Any]) -> Reserve:
    """spec.reserve of a Subscription object (missing values are 0)."""
    reserve = (sub.get("spec") or {}).get("reserve") or {}
    return Reserve(reserve.get("fiveHourPercent") or 0, reserve.get("weeklyPercent") or 0)


def screen_key(det: Detection) -> tuple[Any, ...]:
    """Everything a decision reads from one tab's detection: its state and kind, the limit event, and what
    changes a plan without changing them (a native wait cancelled with Esc, a menu opening, a line typed
    into the prompt). The live stream wakes the watcher when a pane's key changes."""
    return (det.state, det.kind, limit_key(det) if det.state == TabState.RATE_LIMITED else None,
            det.auto_continue, det.limit_menu, det.menu_choice, bool(det.prompt_text))


def screen_digest(screen: str) -> str:
    """A short digest of a tab's screen (16 hex chars of SHA-256): the stall check compares it between
    passes, and an armed send (`SendContinue.expect`, `RunJournal.expect`) compares the screen right before
    its first key with the one the decision was made on (the executor calls this same function)."""
    return hashlib.sha256(screen.encode(errors="replace")).hexdigest()[:16]


def agent_ready(det: Detection) -> bool:
    """The agent's input box is on the screen (a relaunched agent is back)."""
    return det.prompt_text is not None


def describe(res: Performed, action: JournalAction) -> str:
    """What a journaled action did, in words (Events, tab messages): from its raw outcome `res` and the
    journal's `action` (a restart-and-continue says what it ran even when the relaunch happened before a
    controller restart)."""
    if res.step is None:
        return "nothing left to send"
    if res.step == Step.INTERRUPT:
        return f"pressed {'+'.join(res.keys)} but the agent did not exit"
    if res.step in (Step.AWAIT_AGENT, Step.RELAUNCH):
        return f"ran '{' '.join(res.argv)}' but the agent's prompt did not come back"
    if res.step == Step.PRESS:
        return f"pressed {res.text}"
    how = (f"restarted with '{' '.join(res.argv)}' and sent '{res.text}'"
           if res.restarted or action == JournalAction.RESTART else f"sent '{res.text}'")
    return how if res.ok else f"{how} but the screen did not change"


def switch_patches(action: SwitchSubscription) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The status patches of a switch (`SwitchSubscription`), written in order: the journal at its first
    step (before the agents are stopped), at `InstallLogin` (before the new login is written), and the
    end (the new subscription, no journal). A controller killed in between finds status.switch and
    completes it (`_complete_switch`)."""
    journal = {"to": action.new, "fromSubscription": action.old, "step": "StopAgents",
               "startedAt": rfc3339(action.started_at), "tabs": list(action.limited)[:64],
               "reason": bounded(action.reason, 1024)}
    return ({"switch": journal}, {"switch": {**journal, "step": "InstallLogin"}},
            {"subscription": action.new, "switch": None})


# ============================================================================ decide
class _Blocked(Exception):
    """A blocking action has no result yet: the decision stops here."""


class _Pass:
    """The working state of one `decide` call (not exported: `decide` is the interface)."""

    def __init__(self, obs: Observation, mem: Memory, now: datetime, cfg: DecideConfig) -> None:
        self.obs, self.now, self.cfg = obs, now, cfg
        self.actions: list[Act] = []
        self.records: dict[str, TabRecord] = dict(mem.records)
        self.seen: dict[str, tuple[str, datetime]] = dict(mem.seen)
        self.mem = mem
        self.wake: dict[str, datetime | None] = {}
        self.period_s: float | None = None  # set by a rule that bounds the next pass (the heal retry)
        self.tabs_decided = False  # the tabs were read and decided on this pass
        self.observe_tabs = False

    # ---------------------------------------------------------------- helpers
    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(PostEvent(type_, reason, message))

    def count(self, metric: str, *labels: str, value: float | None = None) -> None:
        self.actions.append(Count(metric, tuple(labels), value))

    def ask(self, action: Act) -> Any:
        """Emit a blocking action; its result when it was performed, else stop the decision here."""
        self.actions.append(action)
        if action in self.obs.results:
            return self.obs.results[action]
        raise _Blocked

    def ask_all(self, actions: list[Act]) -> list[Any]:
        """Emit several blocking actions performed together; their results, or stop after all of them."""
        self.actions.extend(actions)
        if all(a in self.obs.results for a in actions):
            return [self.obs.results[a] for a in actions]
        raise _Blocked

    def note(self, key: str) -> bool:
        """True the first time `key` is noted (one Event per episode)."""
        if key in self.mem.noted:
            return False
        self.mem = replace(self.mem, noted=self.mem.noted | {key})
        return True

    def unnote(self, key: str) -> None:
        self.mem = replace(self.mem, noted=self.mem.noted - {key})

    def rec(self, name: str) -> TabRecord:
        return self.records.get(name) or TabRecord(name)

    def ignore(self, source: str, reason: str, messages: list[str] | tuple[str, ...]) -> None:
        """Record the invalid inputs of one source for InputIgnored; a Warning for each new message."""
        ignored = dict(self.mem.ignored)
        before = ignored.get(source, (reason, ()))[1]
        for msg in messages:
            if msg not in before:
                self.event("Warning", reason, msg)
        if messages:
            ignored[source] = (reason, tuple(dict.fromkeys(messages)))
        else:
            ignored.pop(source, None)
        self.mem = replace(self.mem, ignored=ignored)

    def safe(self, tab: TabView) -> bool:
        """The rules of resume: no recent human typing, no prompt or menu, no half-typed line."""
        last = tab.last_input_at
        if last and (self.now - last).total_seconds() < self.cfg.resume.human_idle_s:
            return False
        det = tab.detection
        return not (det.state == TabState.AWAITING_INPUT or det.prompt_text)

    @property
    def pod_uid(self) -> str | None:
        """The uid of the box pod this pass observed (None: not known)."""
        facts = self.obs.pod_facts
        return facts.uid if facts is not None and facts.uid else None

    def resume_journal(self, for_key: str | None) -> Journal:
        box = self.obs.box
        action = JournalAction.RESTART if box.restarts else JournalAction.CONTINUE
        return start_journal(action, self.now, for_key, box.continue_text, pod=self.pod_uid)


def decide(obs: Observation, memory: Memory, now: datetime, cfg: DecideConfig | None = None) -> BoxDecision:
    """Decide one pass for one box.

    Args:
        obs: what this pass observed, with the results of the blocking actions already performed.
        memory: the memory at the start of the pass (the same for every call of one pass).
        now: the pass's instant (UTC, tz-aware; the same for every call of one pass).
        cfg: tunables.
    Returns:
        A `BoxDecision`. While `complete` is False the last action(s) wait for a result: perform the
        actions not yet performed, add the results to `obs.results` and call again.
    """
    p = _Pass(obs, memory, now, cfg or DecideConfig())
    complete = True
    try:
        status = _decide(p)
    except _Blocked:
        complete, status = False, None
    mem = replace(p.mem, records=p.records, seen=p.seen)
    if status is None and not complete:
        # What the journals are written ahead with. A snapshot only: what its status would announce (an
        # Event) is the complete decision's; an action after the waiting ones would break the replay.
        performed = len(p.actions)
        status = _watched_status(p)
        del p.actions[performed:]
    return BoxDecision(tuple(p.actions), mem, status, tuple(p.wake.values()), complete, _period(p, mem),
                       p.observe_tabs)


def _period(p: _Pass, mem: Memory) -> float:
    """The pass period (`BoxDecision.period_s`)."""
    obs = p.obs
    if p.period_s is not None:
        return min(obs.scan_interval_s, p.period_s)
    if not p.tabs_decided:
        return obs.scan_interval_s
    live = obs.stream is not None and obs.stream.connected
    period = obs.stream_rescan_s if live else obs.scan_interval_s
    if mem.out_of_date:  # a pod update waits for idle tabs, judged from this pass's records
        period = min(period, obs.scan_interval_s)
    return period


def _decide(p: _Pass) -> BoxStatus | None:
    obs = p.obs
    if not obs.spec_valid:
        # The reconcile handler reports the invalid spec (its condition, its Event): nothing to do or write
        # here; looked at again at the scan interval (`_period`), when the spec may have been fixed.
        return None
    if not obs.pod_owned:
        return _not_owned(p)
    p.mem = replace(p.mem, squatter=None)
    if obs.pod_facts is not None:
        healing = _heal(p, obs.pod_facts)
        if healing is not None:
            return healing
    if not obs.box.watched:
        # Limit features are off for this agent: Ready still needs the running container and its session.
        if obs.pod is None:
            return None  # no pod yet: the reconcile owns Ready
        if not obs.pod.running:
            return _ready_status(p, obs.pod, None, watched=False)
        session = obs.session
        if session is None:  # a watched box learns it from reading its tabs; this one asks
            seen: SessionSeen = p.ask(CheckSession())
            session = seen.exists
        return _ready_status(p, obs.pod, session, watched=False)
    if obs.pod is None:
        return None
    if not obs.pod.running:
        return _ready_status(p, obs.pod, None)
    failure = obs.capture_failure
    if failure is not None and failure.kind == CAPTURE_TRANSPORT:
        return None  # nothing is known of the tabs: no status, looked at again at the next scan
    for source, (reason, messages) in obs.input_problems.items():
        p.ignore(source, reason, messages)
    if failure is not None:
        if failure.kind == CAPTURE_TOO_LARGE:
            # What the box prints is bounded (the exec's output bound): too many tabs, a huge window, or a
            # tmux that floods. Reported once; watched again when it prints less.
            message = (f"the box printed more than {failure.limit_bytes} bytes when its tabs were captured "
                       "(too many tabs or a very large window); its tabs are not watched until it prints less")
            if p.mem.output_problem != message:
                p.mem = replace(p.mem, output_problem=message)
                p.event("Warning", C.R_BOX_OUTPUT_TOO_LARGE, message)
            return _tabs_status(p, obs, problem=(C.R_BOX_OUTPUT_TOO_LARGE, message))
        return _tabs_status(p, obs, problem=(C.R_TMUX_MISSING, f"tmux session '{C.TMUX_SESSION}' not found in "
                                             "the box container"), session=False)
    if obs.tabs is None:
        p.observe_tabs = True  # the tabs are read next (then `decide` again)
        return None
    p.mem = replace(p.mem, output_problem=None, tab_ids={**p.mem.tab_ids, **{t.name: t.id for t in obs.tabs}})
    p.tabs_decided = True
    _structured(p)
    obs = p.obs  # the tabs with the structured usage merged into their detections
    assert obs.tabs is not None

    annotations = _annotations(p)
    dets = {t.name: t.detection for t in obs.tabs}
    if p.mem.pending_switch is not None:
        if _switch_overruled(p):
            # Rotation off: spec.subscription wins. Its login is installed (the switch may have installed
            # another one already), and the switch's tabs are planned again on it.
            p.mem = replace(p.mem, pending_switch={**p.mem.pending_switch, "to": p.obs.box.subscription,
                                                   "reason": "spec.subscription (rotation is off)"})
        dets = _complete_switch(p, dets)
        p.mem = replace(p.mem, pending_switch=None)  # finished or given up: once
    _follow_spec(p, dets)
    _rotation(p, dets)
    _reserve(p, dets)
    resume_on = obs.box.resume_after_reset and not p.mem.reserved
    _plan_tabs(p, dets, annotations, resume_on)
    live = {t.name for t in obs.tabs}
    p.records = {k: v for k, v in p.records.items() if k in live}
    p.seen = {k: v for k, v in p.seen.items() if k in live}
    p.mem = replace(p.mem, tab_ids={k: v for k, v in p.mem.tab_ids.items() if k in live})
    if C.ANNOTATION_RESUME_NOW in annotations:
        p.actions.append(ClearAnnotation(C.ANNOTATION_RESUME_NOW))
    return _watched_status(p)


def _watched_status(p: _Pass) -> BoxStatus:
    problem = (C.R_SUBSCRIPTION_NOT_FOUND, p.mem.sub_problem) if p.mem.sub_problem else None
    return _tabs_status(p, p.obs, problem=problem)


# ---------------------------------------------------------------------------- structured usage
_STOPPED = (TabState.RATE_LIMITED, TabState.IDLE, TabState.UNKNOWN)


def _structured(p: _Pass) -> None:
    """Merge the agent's own machine-readable usage into the screen detections (`signals.merge`).

    Read only when some tab is not visibly busy (rate limited, idle or unrecognised). On the live stream
    the last read is reused while the tabs' (state, kind, limit) are those it was read for and it is younger
    than `stream_rescan_s` (the agents write these files when a turn ends, which changes a state); polling
    reads every pass. A failed read merges nothing and leaves the files' last problems standing."""
    tabs = p.obs.tabs or ()
    if not any(t.detection.state in _STOPPED for t in tabs):
        return
    key = tuple(sorted((t.name, t.detection.state.value, t.detection.kind.value if t.detection.kind else None,
                        limit_key(t.detection) if t.detection.state == TabState.RATE_LIMITED else None)
                       for t in tabs))
    seen = p.mem.structured
    live = p.obs.stream is not None and p.obs.stream.connected
    if live and seen is not None and seen[0] == key and (p.now - seen[1]).total_seconds() < p.obs.stream_rescan_s:
        read = seen[2]
    else:
        read = p.ask(ReadStructured(p.obs.box.agent, p.now))
        if read.failed:
            return
        p.mem = replace(p.mem, structured=(key, p.now, read))
    p.ignore("files", C.R_INVALID_BOX_FILE, read.problems)
    if read.usage is None:
        return
    usage, source = read.usage, read.source
    p.obs = replace(p.obs, tabs=tuple(replace(t, detection=merge(t.detection, usage, source, p.now)) for t in tabs))


# ---------------------------------------------------------------------------- the pod
HEAL_RETRY_S = 1.0
"""Seconds to the next pass while the pod is being healed (at most the scan interval)."""


def _idle(p: _Pass) -> bool:
    """No tab is working, resuming, awaiting input or mid-action, and no human typed lately."""
    human = p.cfg.resume.human_idle_s
    return all(r.phase in (Phase.IDLE, Phase.UNKNOWN) and r.journal is None
               and (r.last_input_at is None or (p.now - r.last_input_at).total_seconds() >= human)
               for r in p.records.values())


POD_CREATED_REASON = "CreatedPod"
"""The reason of the reconcile's Event for a pod it created (`controller.service.boxes`)."""


def pod_creation(made: PodCreated) -> tuple[bool, str | None]:
    """What the outcome of a `CreatePod` means.

    Args:
        made: the reconcile's raw outcome (its Events, the retry it asked for).
    Returns:
        (created, retry message): created is True when one of its Events has the reason
        `POD_CREATED_REASON`; the retry message is the message of its last Event when it asked for a retry
        (`retry_after_s` set and not 0: a missing dependency, which that Event names), else None.
    """
    created = any(reason == POD_CREATED_REASON for _, reason, _ in made.events)
    retry = made.events[-1][2] if made.retry_after_s and made.events else None
    return created, retry


def _heal(p: _Pass, pod: PodFacts) -> BoxStatus | None:
    """Recreate a missing pod, replace an ended (evicted, failed) one, recreate an out-of-date one when
    `spec.podUpdate` allows it (`controller.domain.podheal`). Returns the status while the pod is not usable
    (the next pass follows soon: `period_s`), None when the pass goes on."""
    if pod.obj is None and not pod.created_before:
        return None  # never created yet: the reconcile handler creates the first pod and owns Ready
    decision = decide_pod(dict(pod.obj) if pod.obj is not None else None, pod.name, pod.desired_hash, pod.policy,
                          _idle(p), pod.box_deleting)
    was = p.mem.out_of_date
    out_of_date = decision.message if decision.out_of_date and decision.action == "none" else None
    p.mem = replace(p.mem, out_of_date=out_of_date)
    if decision.action == "none" and not decision.reason:
        if was != out_of_date and out_of_date:
            p.event("Normal", C.R_TEMPLATE_CHANGED, out_of_date)
        return None
    message = decision.message
    if decision.action == "delete" and pod.obj is not None:
        gone: Done = p.ask(DeletePod(pod.name, pod.uid))
        if gone.ok:
            failed = decision.reason == C.R_POD_FAILED
            p.event("Warning" if failed else "Normal", "ReplacingPod" if failed else "RecreatingPod", message)
            p.mem = replace(p.mem, replacing=(decision.reason, message.removesuffix("; replacing it")))
    created = False
    if decision.action == "create":
        made: PodCreated = p.ask(CreatePod(pod.name))
        for type_, reason, text in made.events:
            p.event(type_, reason, text)
        created, retry_message = pod_creation(made)
        if created:
            message = f"Pod {pod.name} was missing; created a new one"
        elif retry_message:
            message = retry_message
    reason = decision.reason or C.R_POD_PENDING
    if created:
        # The pass that deleted an ended pod may be followed at once by this one (the deletion wakes the
        # box): Ready keeps saying why the pod is being replaced.
        why = p.mem.replacing
        if why is not None:
            reason, message = why[0], f"{why[1]}; created a new one"
        p.mem = replace(p.mem, replacing=None)
    conds = _conds(p)
    current = next((c for c in conds if c.get("type") == C.COND_READY), None)
    if current is None or current.get("reason") in READY_REASONS:
        conds = set_condition(conds, C.COND_READY, False, reason, message, p.now, p.obs.generation)
    conds = _pod_date(p, conds)
    p.period_s = HEAL_RETRY_S
    return BoxStatus({"state": "Pending", "pod": pod.name}, _owned(conds, (C.COND_READY, C.COND_POD_OUT_OF_DATE)))


# ---------------------------------------------------------------------------- annotations
def _annotations(p: _Pass) -> dict[str, str]:
    """The box's annotations, without a resume-at that is not an instant within 31 days (reported as
    InvalidAnnotation naming it) or that was already acted upon (one request, one resume)."""
    annotations = dict(p.obs.annotations)
    raw = annotations.get(C.ANNOTATION_RESUME_AT)
    problems: list[str] = []
    if raw is not None:
        at = parse_time(raw)
        if at is None or plausible_reset(at, p.now) is None:
            problems.append(f"metadata.annotations[{C.ANNOTATION_RESUME_AT}]: {raw[:64]!r} is not an RFC 3339 "
                            "instant within 31 days of now; ignored")
        if problems or raw == p.mem.resume_at_done:
            annotations.pop(C.ANNOTATION_RESUME_AT)
    p.ignore("annotations", C.R_INVALID_ANNOTATION, problems)
    return annotations


def _apply_annotations(p: _Pass, plan: TabPlan, det: Detection, annotations: Mapping[str, str]) -> TabPlan:
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
        at = p.now
    elif C.ANNOTATION_RESUME_AT in annotations:
        at = parse_time(annotations[C.ANNOTATION_RESUME_AT])
    if at is None:
        return plan
    rec = replace(rec, phase=Phase.RATE_LIMITED, resume_at=at, sent_for=None, attempts=0,
                  message=f"Resume requested by annotation for {at:%H:%M:%S} UTC")
    if at > p.now:
        return TabPlan(rec, wake_at=at)
    if C.ANNOTATION_RESUME_AT in annotations and C.ANNOTATION_RESUME_NOW not in annotations:
        p.mem = replace(p.mem, resume_at_done=annotations[C.ANNOTATION_RESUME_AT])  # once, not every pass
    if stalled:
        p.seen.pop(rec.name, None)
    return TabPlan(replace(rec, resets_at=None), action=PlanAction.CHECK_USAGE, event="ResumeRequested")


# ---------------------------------------------------------------------------- switches and rotation
def _usage_limited(det: Detection) -> bool:
    return det.state == TabState.RATE_LIMITED and det.kind in (LimitKind.USAGE, LimitKind.CREDITS)


def _resume_on_new(p: _Pass, tab: str, det: Detection, new: str) -> None:
    """Answer a tab's limit event by the switch to `new`: the key is marked switched (never a trigger
    again) and the tab is resumed now by the normal flow, on the new login."""
    key = limit_key(det)
    p.mem = replace(p.mem, switched_keys=p.mem.switched_keys | {key})
    p.records[tab] = replace(
        p.rec(tab), phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=p.now, sent_for=None,
        window=None, auto_continue=False, detected_by=det.detected_by,
        message=f"Switched to {new}; resuming", attempts=0)


def _complete_switch(p: _Pass, dets: dict[str, Detection]) -> dict[str, Detection]:
    """Finish a switch a previous controller left in status.switch: install the new login (idempotent),
    move the box, and mark the tabs it had stopped as due on the new subscription. A tab it had already
    stopped sits at the shell: it is given the remembered limit so the normal resume relaunches it."""
    sw = p.mem.pending_switch or {}
    to = str(sw.get("to"))
    done: Done = p.ask(InstallLogin(to, "complete"))
    # Finished (or given up) now, once: status.switch is cleared; the box moves only with its new login.
    p.actions.append(PatchStatus((("switch", None),) + ((("subscription", to),) if done.ok else ())))
    if not done.ok:
        p.event("Warning", "SwitchFailed", f"Cannot finish the switch to {to}: its login Secret is missing or invalid")
        return dets
    p.mem = replace(p.mem, current=to)
    wanted = set(sw.get("tabs") or [])
    out = dict(dets)
    for tab in p.obs.tabs or ():
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
        p.mem = replace(p.mem, switched_keys=p.mem.switched_keys | {key})
        p.records[tab.name] = replace(
            p.rec(tab.name), phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=p.now,
            sent_for=None, window=None, auto_continue=False, detected_by=det.detected_by, journal=None,
            message=f"Switched to {to}; resuming", attempts=0)
    if sw.get("fromSubscription") == to:  # a switch overruled by spec.subscription back to where it started
        p.event("Normal", "Switched", f"Stayed on {to}: {sw.get('reason')} (a switch left unfinished by a "
                "controller restart or a failed pass was abandoned)")
    else:
        p.event("Normal", "Switched", f"Switched from {sw.get('fromSubscription')} to {to}: "
                f"{sw.get('reason') or 'rotation'} (completed after it was interrupted: a controller restart or a "
                "failed pass)")
    return out


def _switch_overruled(p: _Pass) -> bool:
    """A switch left in status.switch goes to spec.subscription instead of its own target when rotation is
    off and spec.subscription names another subscription (the box follows spec)."""
    box = p.obs.box
    to = (p.mem.pending_switch or {}).get("to")
    return not box.rotation and bool(box.subscription) and to != box.subscription


def _follow_spec(p: _Pass, dets: dict[str, Detection]) -> None:
    """Rotation off and spec.subscription changed: move the box to it (`rotation.follow_spec`).

    The same journaled switch as the rotation's (status.switch): the limited tabs of an agent that refuses
    another account's login in flight (Codex) are stopped first, then the new login goes into the box Secret
    and the live login file, then status.subscription. A tab stopped on the old subscription's limit is
    planned again on the new one now (its usage read decides: resumed when it has headroom, else it waits
    for the new subscription's reset), never left waiting for the old one's reset. A working agent is left
    alone (a human's edit never interrupts work): Claude Code reads the new file at its next request; a
    running Codex ignores another account's file and moves at its next restart (docs/logins.md).
    The reserve follows the new subscription (`_reserve`): a stop by the old one's reserve is lifted when
    the new one is not reserved; a new one that is reserved stops the box (or keeps it stopped, with its
    own stop line). An unusable new login changes nothing (the reconcile reports it on spec.subscription)."""
    obs, box = p.obs, p.obs.box
    target = follow_spec(p.mem.current, box.subscription, box.rotation, obs.subscriptions or (), box.provider)
    if target is None:
        return
    old = p.mem.current
    tabs = obs.tabs or ()
    limited = [t for t in tabs if _usage_limited(dets[t.name]) and p.rec(t.name).journal is None]
    stop = tuple((t.name, t.pane) for t in limited if box.stop_to_switch and p.safe(replace(t, detection=dets[t.name])))
    done: Done = p.ask(SwitchSubscription(old, target.name, "spec.subscription changed", "spec",
                                          tuple(t.name for t in limited), stop, p.now))
    if not done.ok:
        return
    for t in limited:
        _resume_on_new(p, t.name, dets[t.name], target.name)
    p.mem = replace(p.mem, current=target.name, pre_switch=frozenset(t.name for t in tabs) - {t.name for t in limited})
    p.count("SWITCHES", "$ns", "$name", "spec")
    p.event("Normal", C.R_SUBSCRIPTION_CHANGED, f"Moved from {old} to {target.name}: spec.subscription changed "
            "(rotation is off)" + (f"; {len(limited)} limited tab(s) planned again on {target.name}" if limited else ""))
    if p.mem.reserved and target.state == "Reserved":
        # Stopped by the old subscription's reserve and the new one is reserved too: no login file; the stop
        # line is the new subscription's.
        p.actions.append(RemoveLogin())
        p.mem = replace(p.mem, reserved=_stop_line(p, target))


def _rotation(p: _Pass, dets: dict[str, Detection]) -> None:
    """Rotation: leave the current subscription on a trigger for the best usable one of the group."""
    obs, box = p.obs, p.obs.box
    subs = list(obs.subscriptions or ())
    current = p.mem.current or box.subscription or ""
    cur = next((c for c in subs if c.name == current), None)
    # The first limit line a tab shows after a switch, before it was seen working again, was printed on
    # the old subscription: it is answered by that switch, not counted as the new subscription's limit.
    for name in sorted(p.mem.pre_switch):
        det = dets.get(name)
        if det is None or det.state == TabState.WORKING:
            # Seen working: it runs on the new login. An idle screen proves nothing (the live stream sees an
            # agent's screen half painted, before its limit line).
            p.mem = replace(p.mem, pre_switch=p.mem.pre_switch - {name})
        elif _usage_limited(det):
            p.mem = replace(p.mem, pre_switch=p.mem.pre_switch - {name})
            if limit_key(det) not in p.mem.switched_keys:
                _resume_on_new(p, name, det, current)
    fresh_limit = any(_usage_limited(d) and limit_key(d) not in p.mem.switched_keys for d in dets.values())
    p.mem = replace(p.mem, group_exhausted=False, sub_problem=None)
    if cur is None and not box.rotation:
        problem = (f"Subscription {current!r} was deleted or is missing; the box cannot be resumed "
                   "(set spec.subscription to another one, or enable rotation)")
        p.mem = replace(p.mem, sub_problem=problem)
        if p.note(f"missing-{current}"):
            p.event("Warning", C.R_SUBSCRIPTION_NOT_FOUND, problem)
    if not box.rotation:
        p.mem = replace(p.mem, next_sub=None)
        return
    members = group_members(box.rotation_group, [*box.rotation_selected, box.subscription or ""], box.provider, subs)
    nxt = choose_next(current, members)
    leave = must_leave(cur, fresh_limit)
    if leave.leave and nxt is not None:
        tabs = obs.tabs or ()
        limited = [t for t in tabs if _usage_limited(dets[t.name])]
        stop = tuple((t.name, t.pane) for t in limited if box.stop_to_switch and p.safe(replace(t, detection=dets[t.name])))
        done: Done = p.ask(SwitchSubscription(current or None, nxt.name, str(leave.reason), leave.trigger,
                                              tuple(t.name for t in limited), stop, p.now))
        if done.ok:
            for t in limited:
                _resume_on_new(p, t.name, dets[t.name], nxt.name)
            # A tab not seen limited now may still show the old subscription's limit line on the next
            # capture (printed just before the switch): that line is not a limit of the new one.
            p.mem = replace(p.mem, current=nxt.name,
                            pre_switch=frozenset(t.name for t in tabs) - {t.name for t in limited})
            p.count("SWITCHES", "$ns", "$name", leave.trigger)
            p.event("Normal", "Switched", f"Switched from {current or None} to {nxt.name}: {leave.reason}")
            nxt = choose_next(nxt.name, members)
        else:
            p.event("Warning", "SwitchFailed", f"Cannot switch to {nxt.name}: its login Secret is missing or invalid")
    elif leave.leave:
        p.mem = replace(p.mem, group_exhausted=True)
        first = first_to_reset(members, p.now)
        msg = "Every subscription of the rotation group is exhausted; waiting" + (
            f" for {first.name} to reset at {first.until:%H:%M} UTC" if first and first.until else "")
        if p.note("group-exhausted"):
            p.event("Warning", "RotationGroupExhausted", msg)
    else:
        p.unnote("group-exhausted")
    p.mem = replace(p.mem, next_sub=nxt.name if nxt else None)


# ---------------------------------------------------------------------------- the reserve
def _reserve(p: _Pass, dets: dict[str, Detection]) -> None:
    """The reserve: stop the box when its subscription is Reserved (unless rotation moved it away),
    stop agents started since at most once, restore the login and resume the stopped tabs at the lift."""
    current = p.mem.current or p.obs.box.subscription or ""
    cur = next((c for c in p.obs.subscriptions or () if c.name == current), None)
    if cur is not None and cur.state == "Reserved" and not p.mem.reserved:
        _reserve_stop(p, dets, cur)
    elif cur is not None and cur.state == "Reserved" and p.mem.reserve_pending:
        _reserve_late_starters(p, dets)
    elif p.mem.reserved and (cur is None or cur.state != "Reserved"):
        _reserve_restore(p, dets)


def _reserve_stop(p: _Pass, dets: dict[str, Detection], cur: Candidate) -> None:
    """Esc to the agents, remove the box's login file, print the stop line in each tab."""
    line, until = _stop_parts(p, cur)
    tabs = p.obs.tabs or ()
    p.mem = replace(p.mem, reserve_pending=frozenset(t.name for t in tabs if t.at_shell))
    for tab in tabs:
        if not tab.at_shell:
            p.actions.append(PressKey(tab.name, tab.pane, p.obs.box.stop_keys))
        # Esc went to a running agent: it counts as stopped by the reserve (resumed at the lift) unless
        # its screen showed it idle or waiting on a human. An agent that had not painted a recognisable
        # screen yet (a box started on a reserved subscription) is Unknown, not idle.
        busy = not tab.at_shell and dets[tab.name].state in (TabState.WORKING, TabState.RATE_LIMITED,
                                                             TabState.UNKNOWN)
        p.records[tab.name] = replace(p.rec(tab.name), stopped_by_reserve=busy)
    p.actions.append(RemoveLogin())
    for tab in tabs:
        p.actions.append(PrintNotice(tab.name, tab.pane, f"agentbox: {line}{until}"))
    p.mem = replace(p.mem, reserved=f"{line}{until}")
    p.count("RESERVE_STOPS", "$ns", cur.name, "five_hour" if "5-hour" in line else "weekly")
    p.event("Warning", "ReserveReached", f"{line} on {cur.name}{until}")


def _stop_parts(p: _Pass, cur: Candidate) -> tuple[str, str]:
    """(stop line, " (reserved until ...)" or "") of a reserved subscription."""
    reserve = p.obs.reserves.get(cur.name, Reserve())
    five, week = reserve.five_hour, reserve.weekly
    if five and cur.five_hour is not None and cur.five_hour >= 100 - five:
        line = f"Stopping to keep {_pct(five)}% of your 5-hour limit"
    elif week:
        line = f"Stopping to keep {_pct(week)}% of your weekly limit"
    else:
        line = "Stopping to keep the reserve of your limits"
    return line, f" (reserved until {cur.until:%Y-%m-%d %H:%M} UTC)" if cur.until else ""


def _stop_line(p: _Pass, cur: Candidate) -> str:
    """The Reserved condition's message for a reserved subscription (`Memory.reserved`)."""
    line, until = _stop_parts(p, cur)
    return f"{line}{until}"


def _pct(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _reserve_late_starters(p: _Pass, dets: dict[str, Detection]) -> None:
    """An agent started in a tab that was at its shell when the reserve stopped the box gets the same Esc
    once and is resumed at the lift like the others. Tabs already stopped are never pressed again."""
    for tab in p.obs.tabs or ():
        if tab.name not in p.mem.reserve_pending or tab.at_shell:
            continue
        if dets[tab.name].state != TabState.WORKING:
            # Not painted yet (Unknown right after it left the shell), idle or waiting on a human: a key sent
            # now would be lost before the agent reads its input; it is stopped once it is seen working.
            continue
        p.mem = replace(p.mem, reserve_pending=p.mem.reserve_pending - {tab.name})
        p.actions.append(PressKey(tab.name, tab.pane, p.obs.box.stop_keys))
        p.records[tab.name] = replace(p.rec(tab.name), stopped_by_reserve=True)


def _reserve_restore(p: _Pass, dets: dict[str, Detection]) -> None:
    """The reserve lifted (or the box moved): restore the login and resume the stopped tabs."""
    current = p.mem.current or p.obs.box.subscription or ""
    done: Done = p.ask(InstallLogin(current, "restore"))
    if not done.ok:
        return
    p.mem = replace(p.mem, reserved=None, reserve_pending=frozenset())
    p.event("Normal", "ReserveLifted", f"Reserve lifted on {p.mem.current}; login restored")
    resumes: list[RunJournal] = []
    for tab in p.obs.tabs or ():
        rec = p.rec(tab.name)
        if not rec.stopped_by_reserve:
            continue
        p.records[tab.name] = replace(rec, stopped_by_reserve=False)
        view = replace(tab, detection=dets[tab.name])
        if not p.obs.box.resume_after_reset or not p.safe(view):
            continue
        if dets[tab.name].state in (TabState.IDLE, TabState.RATE_LIMITED, TabState.UNKNOWN):
            resumes.append(RunJournal(tab.name, tab.pane, p.resume_journal(None), "restore"))
    if not resumes:
        return
    for action in resumes:
        p.records[action.tab] = replace(p.records[action.tab], journal=action.journal)
    results: list[Performed] = p.ask_all(list(resumes))
    for action, res in zip(resumes, results):
        p.records[action.tab] = replace(p.records[action.tab], journal=None)
        p.event("Normal" if res.ok else "Warning", "Resumed" if res.ok else C.R_RESUME_FAILED,
                f"Tab {action.tab}: {describe(res, action.journal.action)} after the reserve lifted")


# ---------------------------------------------------------------------------- tabs
def _plan_tabs(p: _Pass, dets: dict[str, Detection], annotations: Mapping[str, str], resume_on: bool) -> None:
    """Journals left unfinished first, then each tab's plan; menus answered; due tabs resumed together."""
    tabs = p.obs.tabs or ()
    cfg = p.cfg.resume
    done: set[str] = set()
    # Unfinished journals first (a controller stopped mid-action, or a pass that failed mid-way): each is
    # completed from the step it reached, judged by the screen, before anything else.
    recovering: list[tuple[TabView, RunJournal, str, str]] = []
    for tab in tabs:
        rec = p.records.get(tab.name)
        if rec is None or rec.journal is None:
            continue
        done.add(tab.name)
        pending = _recover(p, tab, rec, dets[tab.name])
        if pending is not None:
            recovering.append((tab, *pending))
    if recovering:
        results: list[Performed] = p.ask_all([a for _, a, _, _ in recovering])
        for (tab, again, what, reason), res in zip(recovering, results):
            _recovered(p, tab, again, what, reason, res)

    menus: list[tuple[TabView, RunJournal, TabPlan]] = []
    due: list[TabView] = []
    plans: dict[str, TabPlan] = {}
    for tab in tabs:
        if tab.name in done:
            continue
        det = dets[tab.name]
        plan = plan_tab(p.rec(tab.name), det, tab.last_input_at, p.now, cfg, resume_on)
        digest = screen_digest(tab.screen)
        seen = p.seen.get(tab.name)
        if seen is None or seen[0] != digest:
            seen = p.seen[tab.name] = (digest, p.now)
        stalled = stall_plan(plan.record, det, seen[1], p.now, p.obs.stall_s, last_lines(tab.screen))
        stall_at: datetime | None = None
        if stalled is not None:
            plan = stalled
        elif det.state in (TabState.WORKING, TabState.UNKNOWN):
            # On the live stream an unchanged screen wakes nothing: the stall instant is a deadline.
            stall_at = seen[1] + timedelta(seconds=p.obs.stall_s)
        plan = _apply_annotations(p, plan, det, annotations)
        _announce(p, tab.name, det, plan)
        plans[tab.name] = plan
        p.records[tab.name] = plan.record
        p.wake[tab.name] = min((w for w in (plan.wake_at, stall_at) if w is not None), default=None)
        if plan.action == PlanAction.ANSWER_MENU and plan.menu_choice is not None:
            journal = start_journal(JournalAction.ANSWER_MENU, p.now, plan.record.limit_key, str(plan.menu_choice),
                                    pod=p.pod_uid)
            p.records[tab.name] = replace(plan.record, journal=journal)
            menus.append((tab, RunJournal(tab.name, tab.pane, journal, "menu"), plan))
        elif plan.action == PlanAction.CHECK_USAGE:
            due.append(tab)
    if menus:
        results = p.ask_all([a for _, a, _ in menus])
        for (tab, answer, plan), res in zip(menus, results):
            choice = answer.journal.text
            p.event("Normal", "AnsweredLimitMenu",
                    f"Tab {tab.name}: chose option {choice} 'Stop and wait for limit to reset'"
                    + ("" if res.ok else " (screen did not change)"))
            # Once per limit event: the next passes wait for the menu to close (domain.resume._schedule).
            p.records[tab.name] = replace(plan.record, journal=None, menu_for=plan.record.limit_key, menu_at=res.at)
            p.wake[tab.name] = p.now + timedelta(seconds=1)
    if due:
        _resume_due(p, due)


def _announce(p: _Pass, tab: str, det: Detection, plan: TabPlan) -> None:
    """The Event (and metric) of a plan that entered a state worth announcing."""
    rec = plan.record
    if plan.event == "LimitDetected":
        p.count("DETECTIONS", "$ns", p.obs.box.agent, (det.detected_by or "").split(":")[0],
                det.kind.value if det.kind else "")
        when = f"resets {rfc3339(det.resets_at)}" if det.resets_at else "no reset time on screen"
        nxt = rec.message or "the reset has passed; checking the subscription's usage now"
        p.event("Normal", "LimitDetected", f"Tab {tab}: usage limit ({when}); {nxt}")
    elif plan.event in ("ResumeNotTakingEffect", "PromptNotEmpty", "OutOfCredits", "NeedsAttention", "Stalled",
                        "LimitMenuStillOpen"):
        p.event("Warning", plan.event, f"Tab {tab}: {rec.message}")
    elif plan.event == "LimitCameBack":
        p.event("Normal", "LimitCameBack", f"Tab {tab}: {rec.message}")


_WHAT = {JournalAction.CONTINUE: "the continue", JournalAction.RESTART: "the restart and continue",
         JournalAction.ANSWER_MENU: "the menu answer"}


def _recover(p: _Pass, tab: TabView, rec: TabRecord, det: Detection) -> tuple[RunJournal, str, str] | None:
    """Judge an unfinished journal by the screen (`recovery_step`): abandon it, record it done, or
    return the action that completes it (with what it was and why)."""
    journal = rec.journal
    assert journal is not None
    verdict = recovery_step(journal, det, tab.at_shell, tab.last_input_at, p.pod_uid, p.now)
    settle = p.now + timedelta(seconds=p.cfg.resume.settle_s)
    what = _WHAT[journal.action]
    p.count("JOURNAL_RECOVERIES", journal.action.value, journal.step.value, verdict.outcome)
    sent = journal.action != JournalAction.ANSWER_MENU
    if verdict.outcome == "abandon":
        if verdict.attention:
            event = "PromptNotEmpty" if "prompt holds" in verdict.reason else "NeedsAttention"
            p.event("Warning", event, f"Tab {tab.name}: {what} was interrupted; {verdict.reason}")
            p.records[tab.name] = replace(rec, journal=None, phase=Phase.NEEDS_ATTENTION, resume_at=None,
                                          message=f"{what.capitalize()} was interrupted; {verdict.reason}")
            p.wake[tab.name] = None
            return None
        p.records[tab.name] = replace(rec, journal=None, message=f"{what.capitalize()} was interrupted; {verdict.reason}")
        p.wake[tab.name] = settle
        return None
    if verdict.outcome == "done":
        if sent:
            p.event("Normal", "Resumed", f"Tab {tab.name}: {what} took effect before the controller restarted "
                    f"({verdict.reason})")
        p.records[tab.name] = replace(rec, journal=None, message=f"Resumed: {verdict.reason}" if sent else rec.message)
        p.wake[tab.name] = settle
        return None
    assert verdict.step is not None
    journal = replace(journal, recoveries=journal.recoveries + 1).at(verdict.step, p.now)
    p.records[tab.name] = replace(rec, journal=journal)
    # An armed continue whose instant is still ahead: the executor waits for it, then checks that the screen
    # is still the one judged here before its first key.
    armed = journal.not_before is not None and journal.not_before > p.now
    return (RunJournal(tab.name, tab.pane, journal_to_perform(journal, p.obs.box.continue_text), "recover",
                       verdict.reason, expect=screen_digest(tab.screen) if armed else ""), what, verdict.reason)


def journal_to_perform(journal: Journal, continue_text: str) -> Journal:
    """The journal as the executor performs it (it types `journal.text` and nothing else).

    Args:
        journal: a journal, possibly read from the status of an older controller.
        continue_text: the agent's continue text (`BoxFacts.continue_text`).
    Returns:
        `journal` itself when it carries its text; else (a journal written before journals carried their
        text: None or "") the same journal with `continue_text`, which is what that controller typed. Only
        the action's copy gets it: the record (and so status) keeps the journal as it was read, and
        `recovery_step` judges the screen by that.
    """
    return journal if journal.text else replace(journal, text=continue_text)


def _held(p: _Pass, tab: TabView, rec: TabRecord) -> None:
    """An armed continue typed but not entered (`Performed.held`: the screen moved between the typing and the
    instant). The journal stays, at its Enter step (written ahead), from the instant it was written: the next
    pass judges the screen (`recovery_step`): our text alone in the prompt gets its Enter; a line a human
    added is left intact and a human is asked; a human who typed since gets nothing."""
    journal = rec.journal
    if journal is None:  # pragma: no cover - a held result always answers a journaled action
        return
    p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "screen_changed")
    p.records[tab.name] = replace(rec, journal=replace(journal, step=Step.ENTER), message=(
        f"Typed '{journal.text or p.obs.box.continue_text}' but did not press Enter: the screen changed before "
        "the resume instant (a human typed or the agent moved); judging the screen again"))
    p.wake[tab.name] = p.now


def _recovered(p: _Pass, tab: TabView, action: RunJournal, what: str, reason: str, res: Performed) -> None:
    if res.held:
        _held(p, tab, p.records[tab.name])
        return
    rec = replace(p.records[tab.name], journal=None)
    settle = p.now + timedelta(seconds=p.cfg.resume.settle_s)
    if res.screen_changed:
        # An armed continue completed after a restart, but the screen moved while it waited for its instant:
        # nothing was sent; the tab is limited again with its instant and the next pass plans it afresh.
        p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "screen_changed")
        p.records[tab.name] = replace(
            rec, phase=Phase.RATE_LIMITED, sent_for=None, sent_at=None, attempts=max(0, rec.attempts - 1),
            resume_at=action.journal.not_before,
            message=f"{what.capitalize()} was not completed: the screen changed while it waited; planning again")
        p.wake[tab.name] = p.now
        return
    if action.journal.action == JournalAction.ANSWER_MENU:  # answered once per limit event
        p.records[tab.name] = replace(rec, menu_for=action.journal.for_key or rec.limit_key, menu_at=res.at)
        p.wake[tab.name] = p.now + timedelta(seconds=1)
        return
    p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "ok" if res.ok else "no_effect")
    how = describe(res, action.journal.action)
    if res.ok:
        p.event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset "
                f"(completed after a controller restart: {reason})")
        p.records[tab.name] = replace(rec, phase=Phase.RESUMING, sent_for=action.journal.for_key or rec.sent_for,
                                      sent_at=res.at, message=f"Resumed: {how}")
        p.wake[tab.name] = settle
        return
    p.event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
    p.records[tab.name] = replace(rec, phase=Phase.NEEDS_ATTENTION, message=f"{how}; a human should look")
    p.wake[tab.name] = None


def usage_known(read: UsageRead, provider: str) -> Usage | None:
    """The usage a resume may rely on from a `ReadUsage`'s raw result.

    Args:
        read: the result (the usage, the provider of the subscription's login).
        provider: the box's agent's provider (`BoxFacts.provider`).
    Returns:
        `read.usage` when the subscription's login is a login of `provider`; else None (unknown, never
        "exhausted": no usable login, or a login of another provider, whose usage says nothing of this
        agent's). The resume then goes by the screen's reset time.
    """
    return read.usage if read.login_provider == provider else None


def _resume_due(p: _Pass, due: list[TabView]) -> None:
    """Resume every due tab together: one usage read, one write-ahead of every journal, then the keys:
    agents that only need `continue` get it in one batched call per send instant; agents that restart are
    restarted concurrently.

    A read during the margin (`controller.domain.resume.prepare_at`) that finds the window reset **arms**
    the send: the journal is written ahead with `not_before` = the resume instant, the action carries it
    with the digest of the screen decided on (`expect`), and the executor presses Enter at that instant.
    A tab whose screen changed before the keys (`Performed.screen_changed`) got nothing: its record is the
    one before the read (the attempt is not counted) and the next pass plans it again from its new screen."""
    box = p.obs.box
    current = p.mem.current or box.subscription or ""
    max_age = p.obs.usage_max_age_s
    for tab in due:
        resets = p.records[tab.name].resets_at
        if resets is not None:
            max_age = min(max_age, max(0.0, (p.now - resets).total_seconds()))
    read: UsageRead = p.ask(ReadUsage(current, max_age, tuple(t.name for t in due), box.provider))
    now = read.at
    known = usage_known(read, box.provider)
    sending: list[tuple[TabView, TabRecord, datetime | None]] = []  # (tab, its record before, not_before)
    for tab in due:
        rec = p.records[tab.name]
        nxt = after_usage(rec, usage_verdict(known, rec.window, now), now, p.cfg.resume)
        p.records[tab.name] = nxt.record
        p.wake[tab.name] = nxt.wake_at
        if nxt.record.phase == Phase.RESUMING:
            if nxt.not_before is None:
                p.count("DEADLINE_LAG", value=max(0.0, (now - (rec.resume_at or now)).total_seconds()))
            sending.append((tab, rec, nxt.not_before))
        elif nxt.event == "ResetNotYet":
            p.event("Normal", "ResetNotYet", f"Tab {tab.name}: {nxt.record.message}")
    if not sending:
        return
    # Write-ahead: every tab is marked as being resumed for its limit event, with the journal of the action
    # at its first step (and the instant its Enter waits for), before any key is sent. A controller restarted
    # mid-way completes the journal from the step it reached (never twice, never zero, never before
    # `not_before`).
    for tab, _, not_before in sending:
        rec = p.records[tab.name]
        p.records[tab.name] = replace(rec, journal=replace(p.resume_journal(rec.sent_for), started_at=now,
                                                           step_at=now, not_before=not_before))
    journal_action = JournalAction.RESTART if box.restarts else JournalAction.CONTINUE
    results: list[Performed]
    if box.restarts:
        actions = [RunJournal(t.name, t.pane, p.records[t.name].journal, "resume",  # type: ignore[arg-type]
                              expect=screen_digest(t.screen) if nb is not None else "") for t, _, nb in sending]
        results = p.ask_all(list(actions))
    else:
        # One batched call per send instant (tabs of one box due at different instants are rare).
        instants = list(dict.fromkeys(nb for _, _, nb in sending))
        batches = [[t for t, _, nb in sending if nb == at] for at in instants]
        sends = [SendContinue(tuple((t.name, t.pane) for t in batch), box.continue_text, not_before=at,
                              expect=tuple(screen_digest(t.screen) for t in batch) if at is not None else ())
                 for at, batch in zip(instants, batches)]
        outcomes: list[tuple[Performed, ...]] = p.ask_all(list(sends))
        by_tab = {res.tab: res for outcome in outcomes for res in outcome}
        results = [by_tab[t.name] for t, _, _ in sending]
    for (tab, before, not_before), res in zip(sending, results):
        if res.screen_changed:
            # Nothing was typed: the screen moved since the decision (the agent resumed by itself, a human
            # typed, a menu opened). Back to the plan before the read; the next pass plans from the new screen.
            p.count("RESUMES", "$ns", "$name", box.agent, "screen_changed")
            p.records[tab.name] = replace(before, journal=None, message=(
                "The screen or the box changed before the armed continue was typed (the agent moved, a human "
                "typed, a menu opened, the box's spec or annotations changed); nothing was sent; planning again"))
            p.wake[tab.name] = p.now
            continue
        if res.held:
            _held(p, tab, p.records[tab.name])
            continue
        if not_before is not None and res.entered_at is not None:
            p.count("DEADLINE_LAG", value=max(0.0, (res.entered_at - not_before).total_seconds()))
        p.count("RESUMES", "$ns", "$name", box.agent, "ok" if res.ok else "no_effect")
        rec = replace(p.records[tab.name], journal=None)
        how = describe(res, journal_action)
        if res.ok:
            # Said when the reset could not be confirmed (usage API down, refused, throttled): the tab was
            # resumed on the screen's reset time, late rather than never.
            unconfirmed = "" if known is not None else (
                " (the usage API could not be read; resumed on the screen's reset time; see the "
                "Subscription's UsageFetched condition)")
            p.event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset{unconfirmed}")
            p.records[tab.name] = replace(rec, message=f"Resumed: {how}")
        else:
            p.event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
            p.records[tab.name] = replace(rec, phase=Phase.NEEDS_ATTENTION, message=f"{how}; a human should look")
            p.wake[tab.name] = None


# ---------------------------------------------------------------------------- status and conditions
def _conds(p: _Pass) -> list[dict[str, Any]]:
    return [dict(c) for c in p.obs.conditions]


def _pod_date(p: _Pass, conds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PodOutOfDate: True while the pod predates spec.template; False once it was set and is current."""
    gen = p.obs.generation
    if p.mem.out_of_date:
        return set_condition(conds, C.COND_POD_OUT_OF_DATE, True, C.R_TEMPLATE_CHANGED, p.mem.out_of_date, p.now, gen)
    if any(c.get("type") == C.COND_POD_OUT_OF_DATE for c in conds):
        return set_condition(conds, C.COND_POD_OUT_OF_DATE, False, C.R_UP_TO_DATE,
                             "The pod was built from the current spec.template", p.now, gen)
    return conds


def _ready(p: _Pass, conds: list[dict[str, Any]], view: ContainerView, session: bool | None,
           watched: bool = True) -> list[dict[str, Any]]:
    """Ready: True only when the box container runs and the tmux session exists (`session` None: not
    checked, the condition is left as it is when the container runs). A Ready the reconcile set for a
    reason of its own (not `READY_REASONS`) is kept."""
    conds = _pod_date(p, conds)
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


def _owned(conds: list[dict[str, Any]], types: tuple[str, ...] = WATCHER_CONDITIONS,
           ready_reasons: frozenset[str] | None = READY_REASONS) -> tuple[dict[str, Any], ...]:
    """The conditions of `types` the watcher writes. A Ready under a reason outside `ready_reasons` is the
    reconcile's (a failure it reported): kept as it is, so never written back by the watcher, whose copy
    may be older than the reconcile's newer Ready (a fixed spec). None: every Ready is the watcher's."""
    return tuple(c for c in conds if c.get("type") in types and not (
        c.get("type") == C.COND_READY and ready_reasons is not None and c.get("reason") not in ready_reasons))


def _not_owned(p: _Pass) -> BoxStatus:
    """A squatting pod: Ready=False PodNotOwned (kept until the pod is the box's again), one Warning per
    appearance; no exec, no login push."""
    msg = p.obs.not_owned
    conds = set_condition(_conds(p), C.COND_READY, False, POD_NOT_OWNED, msg, p.now, p.obs.generation)
    if p.mem.squatter != msg:
        p.mem = replace(p.mem, squatter=msg)
        current = next((c for c in p.obs.conditions if c.get("type") == C.COND_READY), {})
        if current.get("reason") != POD_NOT_OWNED:
            p.event("Warning", POD_NOT_OWNED, msg)
    return BoxStatus({"state": "Error"}, _owned(conds, (C.COND_READY,), None), guard_ready=False)


def _ready_status(p: _Pass, view: ContainerView, session: bool | None, watched: bool = True) -> BoxStatus:
    """Only Ready (and PodOutOfDate) and the box state: boxes whose tabs are not watched, or containers
    that do not run."""
    conds = _ready(p, _conds(p), view, session, watched)
    state = p.obs.state
    ready = next((c for c in conds if c.get("type") == C.COND_READY), {})
    if ready.get("reason") not in READY_REASONS and ready:
        # The reconcile's failure: its Ready and state are left to it (this copy may be older than its fix).
        return BoxStatus({}, _owned(conds, (C.COND_POD_OUT_OF_DATE,)))
    if state != "Error" and ready.get("reason") in READY_REASONS:
        state = ("Running" if ready.get("status") == "True"
                 else "NeedsAttention" if ready.get("reason") == C.R_SESSION_MISSING else "Pending")
    return BoxStatus({"state": state}, _owned(conds, (C.COND_READY, C.COND_POD_OUT_OF_DATE)))


def _tabs_status(p: _Pass, obs: Observation, problem: tuple[str, str] | None = None,
                 session: bool = True) -> BoxStatus:
    """status.tabs, state, resumeAt, subscription, nextSubscription and the watcher's conditions."""
    records = list(p.records.values())
    limited = [r for r in records if r.phase in (Phase.RATE_LIMITED, Phase.RESUMING)]
    attention = [r for r in records if r.phase == Phase.NEEDS_ATTENTION]
    resume_ats = [r.resume_at for r in records if r.resume_at]
    now, gen, mem = p.now, obs.generation, p.mem
    conds = _ready(p, _conds(p), ContainerView(True, "ContainerRunning", ""), session)
    if limited:
        conds = set_condition(conds, C.COND_RATE_LIMITED, True, C.R_WAITING_FOR_RESET,
                              f"{len(limited)} tab(s) wait for a usage reset", now, gen)
    else:
        conds = set_condition(conds, C.COND_RATE_LIMITED, False, C.R_NONE_LIMITED, "No tab is rate limited", now, gen)
    if attention or problem:
        msg = problem[1] if problem else "; ".join(f"tab {r.name}: {r.message}" for r in attention)
        reason = C.R_RESUME_FAILED if attention else problem[0]  # type: ignore[index]
        conds = set_condition(conds, C.COND_NEEDS_ATTENTION, True, reason, msg, now, gen)
    else:
        conds = set_condition(conds, C.COND_NEEDS_ATTENTION, False, C.R_ALL_CLEAR, "No tab needs a human", now, gen)
    if mem.ignored:
        first = next(iter(mem.ignored.values()))[0]
        conds = set_condition(conds, C.COND_INPUT_IGNORED, True, first,
                              "; ".join(m for _, msgs in mem.ignored.values() for m in msgs), now, gen)
    elif any(c.get("type") == C.COND_INPUT_IGNORED for c in conds):
        conds = set_condition(conds, C.COND_INPUT_IGNORED, False, C.R_ALL_CLEAR,
                              "Every pattern, annotation and box file read is valid", now, gen)
    if mem.reserved:
        conds = set_condition(conds, C.COND_RESERVED, True, "ReserveReached", mem.reserved, now, gen)
    else:
        conds = set_condition(conds, C.COND_RESERVED, False, "BelowReserve",
                              "The subscription's reserve is not reached", now, gen)
    stream = obs.stream
    if stream is not None:
        if stream.connected:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, True, C.R_STREAMING,
                                  "The live tmux stream is attached", now, gen)
        elif stream_given_up(stream):
            why = f"Polling the tabs: {stream.why or 'the live tmux stream failed again and again'}"
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_UNUSABLE, why, now, gen)
            if p.mem.stream_warned != stream.pod:
                p.mem = mem = replace(p.mem, stream_warned=stream.pod)
                p.event("Warning", C.R_STREAM_UNUSABLE, why)
        elif stream.why:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_NO_CONTROL_MODE,
                                  f"Polling the tabs: {stream.why}", now, gen)
        else:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_RECONNECTING,
                                  "Polling the tabs: the live tmux stream is down; reconnecting with backoff", now, gen)
    elif obs.stream_disabled:
        conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_DISABLED,
                              "Polling the tabs: settings.tmuxStream is off", now, gen)
    state = ("NeedsAttention" if attention or problem else "Reserved" if mem.reserved
             else "RateLimited" if limited or mem.group_exhausted else "Running")
    fields = {
        "tabs": [record_to_status(r, mem.tab_ids.get(r.name)) for r in records], "state": state,
        "resumeAt": rfc3339(min(resume_ats)) if resume_ats else None,
        "subscription": mem.current, "nextSubscription": mem.next_sub,
    }
    gauges = {"TABS_NEEDING_HUMAN": float(len(attention)), "TABS_RATE_LIMITED": float(len(limited)),
              "ROTATION_GROUP_EXHAUSTED": 1.0 if mem.group_exhausted else 0.0}
    return BoxStatus(fields, _owned(conds), gauges=gauges)
