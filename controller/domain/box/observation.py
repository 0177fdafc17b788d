"""What one pass observed (`Observation` and its parts: tabs, pod, stream, capture failure, reserves)
and the box's spec and adapter facts (`BoxFacts`, `box_facts`).

Plain frozen values the watcher (`controller.service.tabs`) builds before `decide`. Decides only what the
observer asks of raw facts (`box_facts`: are the tabs watched; `stream_given_up`); touches no pass state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Protocol, Sequence

from controller.domain.actions import Act
from controller.domain.podstate import ContainerView
from controller.domain.rotation import Candidate
from controller.domain.types import Detection


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
