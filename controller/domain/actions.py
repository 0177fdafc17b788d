"""The actions of a box decision (`controller.domain.box.decide`) and the results of the blocking ones. Pure
values: the executor (`controller.service.executor`) maps each to terminal, file and API calls.

An action whose result the decision needs is *blocking* (`BLOCKING`); its result is given back in
`Observation.results` keyed by the action itself (actions are frozen values, equal when they are the same
request). Journaled actions (`JOURNALED`) have their tab journals written to status before their first key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Union

from controller.domain.resume import Journal, Step
from controller.domain.types import Usage


@dataclass(frozen=True)
class PostEvent:
    """Post a Kubernetes Event on the box (`type` Normal|Warning)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Count:
    """Count in a metric of `controller.metrics` (`metric` is its attribute name); `value` None = inc(),
    else observe(value) (seconds)."""

    metric: str
    labels: tuple[str, ...]
    value: float | None = None


@dataclass(frozen=True)
class PressKey:
    """Press tmux keys (e.g. the adapter's stop keys, "Escape") in a pane, the send pause between two."""

    tab: str
    pane: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class PrintNotice:
    """Print a line of text on a tab's terminal."""

    tab: str
    pane: str
    text: str


@dataclass(frozen=True)
class RemoveLogin:
    """Remove the agent's login file from the box (the reserve stop)."""


@dataclass(frozen=True)
class ClearAnnotation:
    """Remove an annotation from the box (a consumed request)."""

    key: str


@dataclass(frozen=True)
class ReadUsage:
    """Blocking: re-read the usage of subscription `subscription`, no older than `max_age_s` seconds, from the
    usage API of `provider` (the box's agent's, `BoxFacts.provider`), with the subscription's login when it
    is a login of that provider (a login is never sent to another provider's API). Result: `UsageRead`."""

    subscription: str
    max_age_s: float
    tabs: tuple[str, ...]
    provider: str = ""


@dataclass(frozen=True)
class CheckSession:
    """Blocking: does the box's tmux session exist (`tmux has-session`)? Asked for a box whose tabs are not
    watched (its Ready needs the session; a watched box learns it from reading its tabs).
    Result: `SessionSeen`."""


@dataclass(frozen=True)
class ReadStructured:
    """Blocking: read the agent's own machine-readable usage in the box (Claude Code's statusline input,
    Codex's rollout `token_count` events; the sources its adapter lists), `now` the pass's instant (UTC).
    Result: `StructuredRead`."""

    agent: str
    now: datetime


@dataclass(frozen=True)
class InstallLogin:
    """Blocking: install the login of `subscription` (box Secret and the agent's live file).
    Result: `Done` (ok False when its login Secret is missing or invalid). `why`: "restore" | "complete"."""

    subscription: str
    why: str


@dataclass(frozen=True)
class SwitchSubscription:
    """Blocking: move the box from `old` to `new`, journaled in status.switch: stop the agents of `stop`
    (tab, pane) with the adapter's interrupt keys, install the new login, record the new subscription.
    Result: `Done` (ok False when the new login is unusable: nothing changed)."""

    old: str | None
    new: str
    reason: str
    trigger: str
    limited: tuple[str, ...]
    stop: tuple[tuple[str, str], ...]
    started_at: datetime


@dataclass(frozen=True)
class SendContinue:
    """Blocking: type the continue text in every pane of `tabs` ((tab, pane) pairs) in one call, then Enter
    in a second. Journaled: each tab's record holds its journal (written ahead). Result: a tuple of
    `Performed`, one per tab.

    Armed (`not_before`, UTC): the text is typed shortly before that instant (the send pause plus the
    budget of the Enter step's status write, `settings.resume_write_budget_s`) and Enter is pressed at it,
    never before. `expect`: per tab of `tabs`, the digest (`screen_digest`) of the screen the decision was
    made on; right before typing, a tab whose screen differs gets nothing (`Performed.screen_changed`).
    Empty: no such check (a send decided on the screen just read)."""

    tabs: tuple[tuple[str, str], ...]
    text: str
    not_before: datetime | None = None
    expect: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunJournal:
    """Blocking: perform `journal` in one tab from its current step (written ahead step by step): a
    restart-and-continue, a menu answer, a continue, or one left unfinished. `why` is what the result
    answers: "resume" | "menu" | "recover" | "restore". Result: `Performed`.

    The journal's `not_before` (an armed continue) holds its Enter until that instant (its text is typed
    shortly before, as `SendContinue`). `expect`: the digest (`screen_digest`) of the screen the decision
    was made on; before the first key (after the wait for the first step's instant) a different screen
    sends nothing (`Performed.screen_changed`). Empty: no check."""

    tab: str
    pane: str
    journal: Journal
    why: str
    for_recovery: str = ""
    expect: str = ""


@dataclass(frozen=True)
class DeletePod:
    """Blocking: delete the box pod `name` with a uid precondition (an ended or out-of-date pod; the next
    pass creates it again). Result: `Done` (ok False when it was already gone or replaced)."""

    name: str
    uid: str


@dataclass(frozen=True)
class CreatePod:
    """Blocking: create the missing box pod (the reconcile's builder, `controller.service.boxes`).
    Result: `PodCreated`."""

    name: str


@dataclass(frozen=True)
class PodCreated:
    """Result of `CreatePod`, as raw facts (`controller.domain.box.pod_creation` says what they mean).

    Attributes:
        events: the reconcile's Events, in order: (type Normal|Warning, reason, message).
        retry_after_s: the reconcile asked to be retried in this many seconds (a missing dependency may
            appear later), None when it did not.
    """

    events: tuple[tuple[str, str, str], ...]
    retry_after_s: float | None = None


@dataclass(frozen=True)
class UsageRead:
    """Result of `ReadUsage`, as raw facts (`controller.domain.box.usage_known` says what counts).

    Attributes:
        usage: the usage read (None: not read, or the read failed).
        at: the instant of the read (UTC).
        login_provider: the provider of the subscription's login as loaded ("anthropic" | "openai"...); None
            when the subscription has no usable login.
    """

    usage: Usage | None
    at: datetime
    login_provider: str | None = None


@dataclass(frozen=True)
class SessionSeen:
    """Result of `CheckSession`: True/False, None when the exec itself failed (unknown)."""

    exists: bool | None


@dataclass(frozen=True)
class StructuredRead:
    """Result of `ReadStructured`.

    Attributes:
        usage: the usage the files say (None: no source had any, or none counts).
        source: the name of the source it came from ("statusline", "rollout"...), "" when none.
        problems: one message per file that was oversized or unreadable (naming the file; InputIgnored).
        failed: the read itself failed (exec error): nothing is known, not even the problems.
    """

    usage: Usage | None
    source: str = ""
    problems: tuple[str, ...] = ()
    failed: bool = False


@dataclass(frozen=True)
class Performed:
    """Result of a journaled action on one tab, as raw facts (`controller.domain.box.describe` words them).

    Attributes:
        tab: the tab.
        ok: the tab moved on (its screen changed after Enter or the key; for a journal with nothing left
            to send, True).
        at: when the action ended (UTC).
        step: the journal step the action ended at: where it stopped (`Step.INTERRUPT`: the agent did not
            exit; `Step.AWAIT_AGENT`: its prompt did not come back) or its last step (`Step.ENTER`,
            `Step.PRESS`); None when nothing was left to send.
        restarted: the agent was relaunched in this action (`Step.RELAUNCH` or `Step.AWAIT_AGENT` performed).
        text: the text typed (or the key pressed at `Step.PRESS`).
        argv: the restart argv typed at the shell (the adapter's), () when none.
        keys: the interrupt keys pressed (the adapter's), () when none.
        screen_changed: nothing was sent: right before the first key the tab's screen was not the one the
            decision was made on (`expect`: the agent moved by itself, a human typed, a menu opened), or the
            box changed while an armed send waited to type (its spec, a resume annotation, its pod).
        entered_at: when Enter was pressed (UTC), None when it was not.
        held: the text was typed but Enter was not pressed: right before an armed Enter the tab's screen was
            no longer the one after the typing (a human typed after it, the agent moved). The journal stays
            at its Enter step, written ahead; the next pass judges the screen (`recovery_step`).
    """

    tab: str
    ok: bool
    at: datetime
    step: Step | None = None
    restarted: bool = False
    text: str = ""
    argv: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    screen_changed: bool = False
    entered_at: datetime | None = None
    held: bool = False


@dataclass(frozen=True)
class PatchStatus:
    """Write these status fields now, through the box's one status writer (a field None removes it);
    `fields` are (name, value) pairs in order."""

    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Done:
    """Result of `InstallLogin` / `SwitchSubscription` / `DeletePod`: it was done (`ok`)."""

    ok: bool


Act = Union[PostEvent, Count, PressKey, PrintNotice, RemoveLogin, ClearAnnotation, PatchStatus, CheckSession,
            ReadUsage, ReadStructured, InstallLogin, SwitchSubscription, SendContinue, RunJournal, DeletePod, CreatePod]
BLOCKING = (CheckSession, ReadUsage, ReadStructured, InstallLogin, SwitchSubscription, SendContinue, RunJournal, DeletePod, CreatePod)
"""Actions whose result the decision needs (`Observation.results`)."""
JOURNALED = (SendContinue, RunJournal)
"""Actions whose tab journals are written to status before their first key."""
