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

The modules, by concern (each says what it decides and what it may touch); the rules are listed in the order
`decision._decide` first calls them:

* values: `observation` (what a pass observed), `model` (memory, status, decision, the owned conditions),
  `codec` (status <-> records, journals, memory; Subscription views), `screens` (screen keys and digests,
  the wording of an outcome), `passstate` (`Pass`, the working state of one call);
* rules: `conditions` (Ready, PodOutOfDate, the squatter, boxes not watched), `heal` (the pod),
  `state` (capture failures and the watched box's status), `structured` (the agent's usage files),
  `annotations` (resume-now, resume-at, cancel), `switch` (the switch left unfinished, spec.subscription
  followed, rotation), `reserve` (stop and restore), `tabplan` (each tab's plan), `recover` (unfinished
  journals), `due` (the due resumes);
* `decision`: `decide` and the pass period.

Every name below is importable from `controller.domain.box` (the action types of `controller.domain.actions`
included: they are part of this interface).
"""

from __future__ import annotations

from controller.domain.actions import (
    BLOCKING, JOURNALED, Act, CheckSession, ClearAnnotation, Count, CreatePod, DeletePod, Done, InstallLogin, PatchStatus,
    PodCreated, Performed, PostEvent, PressKey, PrintNotice, ReadStructured, ReadUsage, RemoveLogin, RunJournal, SendContinue,
    SessionSeen, StructuredRead, SwitchSubscription, UsageRead,
)
from controller.domain.box.codec import (
    candidate_from, journal_from_status, journal_to_status, memory_from_status, parse_time, record_from_status,
    record_to_status, reserve_from,
)
from controller.domain.box.decision import decide
from controller.domain.box.due import usage_known
from controller.domain.box.heal import HEAL_RETRY_S, POD_CREATED_REASON, pod_creation
from controller.domain.box.model import (
    POD_NOT_OWNED, READY_REASONS, WATCHER_CONDITIONS, BoxDecision, BoxStatus, DecideConfig, Memory,
)
from controller.domain.box.observation import (
    CAPTURE_NO_SESSION, CAPTURE_TOO_LARGE, CAPTURE_TRANSPORT, INVALID_SPEC_BOX, AgentFacts, BoxFacts, CaptureFailure,
    Observation, PodFacts, Reserve, StreamView, TabView, box_facts, stream_given_up,
)
from controller.domain.box.recover import journal_to_perform
from controller.domain.box.screens import agent_ready, describe, screen_digest, screen_key
from controller.domain.box.switch import switch_patches
from controller.domain.resume import start_journal  # imported from here by tests/test_subscription_change.py

__all__ = [
    # the decision
    "decide", "Observation", "Memory", "BoxDecision", "BoxStatus", "DecideConfig",
    # what a pass observes
    "TabView", "BoxFacts", "AgentFacts", "box_facts", "INVALID_SPEC_BOX", "PodFacts", "StreamView", "stream_given_up",
    "CAPTURE_NO_SESSION", "CAPTURE_TOO_LARGE", "CAPTURE_TRANSPORT", "CaptureFailure", "Reserve",
    # the conditions the watcher owns
    "READY_REASONS", "POD_NOT_OWNED", "WATCHER_CONDITIONS",
    # status <-> memory, Subscription views
    "parse_time", "journal_from_status", "journal_to_status", "record_from_status", "record_to_status",
    "memory_from_status", "candidate_from", "reserve_from",
    # screens, outcomes and patches the watcher and the executor use
    "screen_key", "screen_digest", "agent_ready", "describe", "switch_patches", "HEAL_RETRY_S", "POD_CREATED_REASON",
    "pod_creation", "journal_to_perform", "usage_known", "start_journal",
    # the action types (controller.domain.actions)
    "BLOCKING", "JOURNALED", "Act", "CheckSession", "ClearAnnotation", "Count", "CreatePod", "DeletePod", "Done",
    "InstallLogin", "PatchStatus", "PodCreated", "Performed", "PostEvent", "PressKey", "PrintNotice", "ReadStructured",
    "ReadUsage", "RemoveLogin", "RunJournal", "SendContinue", "SessionSeen", "StructuredRead", "SwitchSubscription",
    "UsageRead",
]
