"""Resume planning for one tab (DESIGN §3 "Resume after reset"). Pure: `now` is a parameter.

The scanner observes a tab (a `Detection` of its live bottom plus the last time a human typed)
and calls `plan_tab` with the tab's remembered `TabRecord`. The plan says what to do *now*
(nothing, answer the limit menu, check usage then resume, verify a sent resume) and when to look
again. When a resume is due the handler re-reads the subscription's usage and asks
`usage_verdict` whether the window really reset; `after_usage` turns that into "send" or
"wait for the new reset". Rules:

* resume at the reset instant + `margin_s` (at most 30 s); Claude Code's own automatic continue
  is given `auto_continue_grace_s` after the reset before we step in;
* prepare during the margin: the usage is re-read `prepare_s` before the resume instant (never before
  the reset + 1 s: `prepare_at`), and when it says the window reset the continue is *armed*: its journal
  is written ahead with `not_before` = the resume instant and the executor presses Enter at that instant
  (`after_usage` returns the plan with `not_before`); `prepare_s` 0 re-reads at the resume instant and
  sends at once (the behaviour before arming);
* leave a tab alone while a human typed in it during the last `human_idle_s` seconds, while it
  awaits input (permission prompt, question, menu), or while its prompt holds a half-typed line;
* send nothing when the agent is working again;
* never send twice for one limit event; after a send, a limit line that comes back is a new
  event, rescheduled from its own reset, at most `max_attempts` sends in a row;
* a state that does not change is neither re-announced (a plan's `event` is set only when the tab
  enters a state) nor re-handled at once: `next_pass_in` never returns 0 s for an instant already
  passed.

Where: `.record` (phases, `TabRecord`, `TabPlan`, the limit identity), `.plan` (`plan_tab`, `stall_plan`),
`.verdict` (`usage_verdict`, `after_usage`), `.timing` (`ResumeConfig`, `prepare_at`, `next_pass_in`, `write_budget_s`),
`.journal` (the write-ahead journal and `recovery_step`). Import from `controller.domain.resume`.
"""

from __future__ import annotations

from controller.domain.resume.journal import (
    MAX_ARMED_S,
    MAX_RECOVERIES,
    STEPS,
    Journal,
    JournalAction,
    Recovery,
    Step,
    recovery_step,
    start_journal,
)
from controller.domain.resume.plan import plan_tab, stall_plan
from controller.domain.resume.record import Action, Phase, TabPlan, TabRecord, first_reading, limit_key
from controller.domain.resume.timing import (PREPARE_AFTER_RESET_S, ResumeConfig, next_pass_in, prepare_at,
                                            write_budget_s)
from controller.domain.resume.verdict import UsageVerdict, after_usage, unknown_reset_plan, usage_verdict

__all__ = [
    "MAX_ARMED_S",
    "MAX_RECOVERIES",
    "PREPARE_AFTER_RESET_S",
    "STEPS",
    "Action",
    "Journal",
    "JournalAction",
    "Phase",
    "Recovery",
    "ResumeConfig",
    "Step",
    "TabPlan",
    "TabRecord",
    "UsageVerdict",
    "after_usage",
    "first_reading",
    "limit_key",
    "next_pass_in",
    "plan_tab",
    "prepare_at",
    "recovery_step",
    "stall_plan",
    "start_journal",
    "unknown_reset_plan",
    "usage_verdict",
    "write_budget_s",
]
