"""Pydantic models of the AgentBox and Subscription resources (spec and status).

These models are the one source of truth for the CRD schemas: `controller.crdgen` renders
`crds/*.yaml` from them and a test fails when the files drift. Field names are the API's
camelCase names (aliases); Python code uses snake_case.
"""

from __future__ import annotations

from typing import Any, Literal

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        """Return the API (camelCase) form without unset optional fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# An instant as the API shows it: RFC 3339, UTC ("2026-03-01T17:05:00Z"). The CRD says `format: date-time`,
# so the API server refuses anything else.
Instant = Annotated[str, Field(json_schema_extra={"format": "date-time"})]

# A list the API server merges by key (server-side apply, strategic merge) and keeps unique by it.
def _list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


Provider = Literal["anthropic", "openai"]
# A Kubernetes object name (DNS-1123 subdomain): what a Secret or a Subscription can be called. A name with
# `/`, `..` or upper case can never name one, so it is refused at apply instead of reaching an API path.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

AgentName = Literal["claude-code", "codex", "opencode", "gemini-cli", "claude-wrapper", "shell"]


# ----------------------------------------------------------------------------- Subscription
class SecretKeyRef(_Model):
    """A key of a Secret in the same namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Name of the Secret in the same namespace.")
    key: str = Field(min_length=1, max_length=253, description="Key in the Secret's data holding the login file.")


class Reserve(_Model):
    """Share of each window kept for the human, in percent (0 = off)."""

    five_hour_percent: int = Field(0, ge=0, le=95, description="Percent of the 5-hour window kept for the human (0-95, 0 = off).")
    weekly_percent: int = Field(0, ge=0, le=95, description="Percent of the weekly window kept for the human (0-95, 0 = off).")


class SubscriptionSpec(_Model):
    """One provider account."""

    provider: Provider = Field(description="anthropic (Claude Code) or openai (Codex).")
    credentials_secret_ref: SecretKeyRef = Field(
        description="Secret key holding the agent's own login file (Claude Code .credentials.json, Codex auth.json)."
    )
    reserve: Reserve = Field(default_factory=Reserve, description="Share of each window kept for the human.")
    display_name: str | None = Field(None, max_length=253, description="Label shown in status and Events (e.g. the account e-mail). Never a token.")


class WindowStatus(_Model):
    """One usage window as last read."""

    utilization: float = Field(description="Percent of the window used (0-100; values above 100 are kept as read).")
    resets_at: Instant | None = Field(None, description="Reset instant, UTC RFC 3339.")


class Windows(_Model):
    """Usage windows named by their length."""

    five_hour: WindowStatus | None = Field(None, description="The rolling 5-hour window.")
    weekly: WindowStatus | None = Field(None, description="The rolling 7-day window.")


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(description="Condition type, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: Instant | None = Field(None, description="When status last changed (UTC RFC 3339).")
    observed_generation: int | None = Field(None, description="metadata.generation this condition was computed from.")


SubscriptionState = Literal["Available", "Exhausted", "Reserved", "Disconnected", "Unknown"]


class SubscriptionStatus(_Model):
    """Observed state of a Subscription."""

    windows: Windows | None = Field(None, description="Usage windows as last read.")
    read_at: Instant | None = Field(None, description="When the windows were read (UTC RFC 3339).")
    state: SubscriptionState | None = Field(None, description="Available | Exhausted | Reserved | Disconnected | Unknown.")
    reserved_until: Instant | None = Field(None, description="While Reserved: the reset that lifts the reserve (UTC RFC 3339).")
    login_expires_at: Instant | None = Field(None, description="When the subscription's current access token expires (UTC RFC 3339); the controller renews it `settings.loginRefreshBeforeS` earlier.")
    threshold: str | None = Field(None, description="The reserve in a sentence.")
    message: str | None = Field(None, description="Latest state in a sentence.")
    conditions: list[Condition] = Field(default_factory=list, description="CredentialsValid, UsageFetched.",
                                        json_schema_extra=_list_map("type"))
    refresh_in_flight: str | None = Field(None, max_length=64, description="While the controller spends the login's refresh token: 'sha256:' + 8 hex digits of it (write-ahead). Found equal to the Secret's refresh token after a restart, it means the answer was lost: that token is never sent again (condition LoginRefreshed=False, reason RefreshAnswerLost). Never a token.")
    account: str | None = Field(None, max_length=64, description="Identity of the login's account as the provider confirmed it ('sha256:' + 16 hex digits of the provider's account ids), recorded while the Secret's login is valid; a login found in a box is adopted only when the provider names this account. Never a token.")
    observed_generation: int | None = Field(None, description="metadata.generation last reconciled.")


# ----------------------------------------------------------------------------- AgentBox
class Rotation(_Model):
    """Rotation over several subscriptions of the same provider."""

    enabled: bool = Field(False, description="Switch to another subscription when the current one runs out.")
    group: Literal["All", "Selected"] = Field("All", description="All: every Subscription of the provider in the namespace; Selected: the list below.")
    subscriptions: list[Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]] = Field(
        default_factory=list, max_length=64,
        description="With group Selected: the subscriptions to rotate over (the box's own and at least one other).")


class WhenAgentStops(_Model):
    """What the controller does when an agent stops on a usage limit."""

    resume_after_reset: bool = Field(True, description="Send `continue` to a tab stopped on a usage limit when the limit resets.")
    rotation: Rotation = Field(default_factory=Rotation, description="Rotation over several subscriptions.")


class PatternSpec(_Model):
    """A user-supplied limit-line pattern."""

    regex: str = Field(min_length=1, max_length=500, description="Regular expression; named groups give the reset (epoch, year, month, day, hour, minute, ampm, zone, rel_days, rel_hours, rel_minutes).")
    kind: Literal["usage", "credits"] = Field("usage", description="usage: a reset lifts it; credits: no reset lifts it.")


class DetectionSpec(_Model):
    """Extra detection rules for a box."""

    patterns: list[PatternSpec] = Field(default_factory=list, max_length=32,
                                        description="User patterns tried after the built-in profiles.")


class AgentBoxSpec(_Model):
    """A pod whose tmux tabs run an agent on a subscription."""

    agent: AgentName = Field(description="The agent CLI running in the tabs.")
    subscription: str | None = Field(None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Subscription the box runs on (claude-code and codex only). Rotation off: changing it moves the box (its login, status.subscription, the tabs waiting on a limit). Rotation on: only where the box starts; the rotation moves status.subscription.")
    when_agent_stops: WhenAgentStops = Field(default_factory=WhenAgentStops, description="Resume and rotation behaviour.")
    detection: DetectionSpec = Field(default_factory=DetectionSpec, description="Extra detection rules.")
    time_zone: str | None = Field(None, max_length=64, description="IANA zone of the box's clock, for limit lines that print no zone (default: the container's TZ, else UTC).")
    container: str | None = Field(None, max_length=63, description="Container running tmux (default: the first container).")
    template: dict[str, Any] = Field(description="Pod template (metadata, spec) of the box pod.")
    pod_update: Literal["OnDelete", "WhenIdle"] = Field(
        "OnDelete", description="How a changed spec.template reaches the pod (condition PodOutOfDate meanwhile): "
                                "OnDelete: the next pod made after the current one is deleted or evicted; WhenIdle: "
                                "the pod is recreated once no tab is working (every tab idle at its prompt or at a "
                                "shell, no action in progress, no human typing).")

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        """An IANA zone name from the tz database (legacy aliases such as Asia/Calcutta included)."""
        if value is None:
            return value
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(value)
        except (ValueError, KeyError, OSError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Paris)") from None
        return value


class TabJournal(_Model):
    """A multi-step action on the tab, written before each step (a restarted controller completes it)."""

    action: Literal["Continue", "RestartAndContinue", "AnswerMenu"] = Field(
        description="Continue: type the continue text, then Enter. RestartAndContinue: Ctrl-C twice, relaunch the "
                    "agent, wait for it, then continue. AnswerMenu: press the 'Stop and wait' number.")
    step: Literal["Interrupt", "Relaunch", "AwaitAgent", "Type", "Enter", "Press"] = Field(
        description="The step written ahead of being performed; after a crash the screen tells whether it happened.")
    started_at: Instant = Field(description="When the action started (UTC RFC 3339).")
    step_at: Instant | None = Field(None, description="When this step was written (UTC RFC 3339).")
    for_key: str | None = Field(None, max_length=64, description="Identity of the limit event the action answers.")
    text: str | None = Field(None, max_length=64, description="The text the action types (the continue text) or the menu digit.")
    recoveries: int = Field(0, ge=0, description="Restarts that each picked the action up (after 3 a human is asked).")
    not_before: Instant | None = Field(None, description="An armed continue: its Enter is never pressed before this "
                                       "instant, the resume instant (UTC RFC 3339, rounded up to the second); the "
                                       "steps before it may run earlier. Absent: no wait.")
    pod: str | None = Field(None, max_length=64, description="UID of the pod whose tab the action types into; a "
                            "journal found with another pod under the box (deleted or replaced since) is abandoned, "
                            "never completed in the new pod.")


TabStateName = Literal["Working", "Idle", "RateLimited", "AwaitingInput", "Resuming", "NeedsAttention", "Unknown"]


class TabStatus(_Model):
    """One tmux tab of the box."""

    name: str = Field(description="tmux window name.")
    id: str | None = Field(None, description="tmux window id (@N).")
    state: TabStateName = Field("Unknown", description="Working | Idle | RateLimited | AwaitingInput | Resuming | NeedsAttention | Unknown.")
    resets_at: Instant | None = Field(None, description="Reset instant of the limit the tab stopped on (UTC RFC 3339).")
    resume_at: Instant | None = Field(None, description="When the controller will resume the tab (UTC RFC 3339).")
    detected_by: str | None = Field(None, description="Which rule recognised the limit.")
    message: str | None = Field(None, description="What the controller sees or does.")
    last_input_at: Instant | None = Field(None, description="Last time a human typed in this tab (UTC RFC 3339).")
    limit_key: str | None = Field(None, description="Identity of the limit event being handled.")
    sent_for: str | None = Field(None, description="Limit event a resume was already sent for (never twice).")
    sent_at: Instant | None = Field(None, description="When that resume was sent (UTC RFC 3339).")
    attempts: int = Field(0, description="Resumes sent for consecutive limit events without progress.")
    stopped_by_reserve: bool = Field(False, description="The reserve stopped this tab; it resumes when the reserve lifts.")
    journal: TabJournal | None = Field(None, description="The multi-step action in progress on this tab (absent when none).")
    menu_answered_for: str | None = Field(None, max_length=64, description="Limit event whose rate-limit menu the controller answered (once per limit event; a menu still open after settleS is left to a human).")
    menu_answered_at: Instant | None = Field(None, description="When that menu was answered (UTC RFC 3339).")


class SwitchJournal(_Model):
    """A subscription switch in progress, written before each step (a restarted controller completes it)."""

    to: str = Field(max_length=253, description="Subscription the box is moving to.")
    from_subscription: str | None = Field(None, max_length=253, description="Subscription the box is leaving.")
    step: Literal["StopAgents", "InstallLogin"] = Field(
        description="StopAgents: Ctrl-C twice to the limited Codex tabs; InstallLogin: the new login into the box "
                    "Secret and the agent's login file.")
    started_at: Instant = Field(description="When the switch started (UTC RFC 3339).")
    tabs: list[Annotated[str, StringConstraints(max_length=253)]] = Field(
        default_factory=list, max_length=64, description="Tabs stopped on the limit, resumed on the new subscription.")
    reason: str | None = Field(None, max_length=1024, description="Why the box switched.")


BoxState = Literal["Pending", "Running", "RateLimited", "Reserved", "NeedsAttention", "Error"]


class AgentBoxStatus(_Model):
    """Observed state of an AgentBox."""

    subscription: str | None = Field(None, description="Subscription the box runs on now: spec.subscription once its login is installed (rotation off), or where the rotation moved the box.")
    next_subscription: str | None = Field(None, description="Subscription the box would switch to next.")
    state: BoxState | None = Field(None, description="Pending | Running | RateLimited | Reserved | NeedsAttention | Error.")
    resume_at: Instant | None = Field(None, description="Earliest scheduled resume among the tabs (UTC RFC 3339).")
    pod: str | None = Field(None, description="Name of the box pod.")
    switch: SwitchJournal | None = Field(None, description="A subscription switch in progress (absent when none).")
    tabs: list[TabStatus] = Field(default_factory=list, description="Per-tab state.", json_schema_extra=_list_map("name"))
    conditions: list[Condition] = Field(default_factory=list, description="Ready, RateLimited, NeedsAttention, Reserved, InputIgnored (a pattern, annotation or box file is invalid and ignored).",
                                        json_schema_extra=_list_map("type"))
    observed_generation: int | None = Field(None, description="metadata.generation last reconciled.")


def validation_message(exc: ValidationError, prefix: str = "spec") -> str:
    """One line naming each invalid field (values are not echoed: they may be secrets)."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{prefix}.{loc}: {err['msg']}")
    return "; ".join(parts)
