"""What a decision remembers and returns (`Memory`, `BoxStatus`, `BoxDecision`, `DecideConfig`) and the
condition types and Ready reasons the watcher owns (`WATCHER_CONDITIONS`, `READY_REASONS`).

Plain frozen values; decides nothing but `BoxDecision.next_pass_in`; touches no pass state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from controller import constants as C
from controller.domain.actions import Act, StructuredRead
from controller.domain.resume import ResumeConfig, TabRecord, next_pass_in


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
        structured: the last structured read: (the tabs' (name, state, kind, limit) it was read for, the
            instant it was read (UTC), its result, the tabs' (name, screen digest) it was read with); reused on a
            live stream (`structured.merge_structured`).
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
    structured: tuple[tuple[Any, ...], datetime, StructuredRead, tuple[tuple[str, str], ...]] | None = None
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
