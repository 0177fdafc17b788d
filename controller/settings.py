"""Operator settings (environment variables `AGENTBOX_*`), and the clock.

Intervals are settings so tests and the demo run them short; defaults suit a real cluster.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

from pydantic import Field
from pydantic import BaseModel


def utcnow() -> datetime:
    """The current instant, UTC, tz-aware."""
    return datetime.now(timezone.utc)


Clock = Callable[[], datetime]


class Settings(BaseModel):
    """Tunables of the operator. All durations in seconds.

    Read from the environment by `Settings.from_env()`: each field `x_y` is `AGENTBOX_X_Y`.
    """

    scan_interval_s: float = Field(5.0, gt=0, description="How often each running box's tabs are captured (two exec calls per box; bounds how fast a limit line is seen, and so rotation).")
    resume_margin_s: float = Field(10.0, ge=0, le=30, description="Delay after a reset before `continue` is sent.")
    human_idle_s: float = Field(60.0, ge=0, description="A tab typed in during this time is left alone.")
    auto_continue_grace_s: float = Field(120.0, ge=0, description="Time after the reset left to Claude Code's own continue.")
    settle_s: float = Field(20.0, ge=0, description="After a send, the same limit line within this time is the old one.")
    max_attempts: int = Field(5, ge=1, description="Resumes for a limit that keeps coming back before asking a human.")
    unknown_reset_recheck_s: float = Field(300.0, gt=0, description="Re-check period when no reset time is known.")
    stall_s: float = Field(1800.0, gt=0, description="A tab whose screen has not changed for this long, with no "
                           "limit recognised, needs a human (NeedsAttention).")
    send_pause_s: float = Field(0.3, ge=0, description="Pause between typed text and Enter (Ink takes a paste otherwise).")
    verify_timeout_s: float = Field(8.0, gt=0, description="How long to wait for a pane to change after sending.")
    restart_timeout_s: float = Field(30.0, gt=0, description="How long a Codex restart may take.")
    retry_delay_s: float = Field(30.0, gt=0, description="Retry delay of a box whose Subscription or Secret is missing.")
    usage_interval_s: float = Field(300.0, gt=0, description="Usage read period of a subscription far from thresholds.")
    usage_near_interval_s: float = Field(60.0, gt=0, description="Usage read period within 10 points of a threshold.")
    usage_min_interval_s: float = Field(5.0, gt=0, description="Shortest period between usage reads of one subscription.")
    usage_stale_s: float = Field(900.0, gt=0, description="Windows older than this make the state Unknown.")
    usage_max_age_s: float = Field(60.0, ge=0, description="A usage read younger than this is reused.")
    exec_timeout_s: float = Field(10.0, gt=0, description="Timeout of one pod exec call.")
    anthropic_base_url: str = Field("https://api.anthropic.com", description="Anthropic usage API base URL.")
    openai_base_url: str = Field("https://chatgpt.com", description="ChatGPT usage API base URL.")
    # --- login lifecycle (controller/service/logins.py, docs/logins.md)
    login_refresh_before_s: float = Field(1800.0, gt=0, description="Refresh a subscription's login this long before its access token expires (the agents refresh at about 5 minutes: the controller must come first; a longer lead tolerates a longer controller outage).")
    login_retry_s: float = Field(30.0, gt=0, description="First retry delay after a failed login refresh (5xx, timeout) or a failed push to a box; doubles up to 10 minutes.")
    anthropic_token_url: str = Field("https://platform.claude.com/v1/oauth/token", description="Claude Code's OAuth token endpoint (login refresh).")
    openai_token_url: str = Field("https://auth.openai.com/oauth/token", description="Codex's OAuth token endpoint (login refresh).")
    # --- end login lifecycle
    event_refresh_s: float = Field(60.0, gt=0, description="Shortest period between two writes of a repeated Event's count (repeats are counted, not re-posted).")
    event_quiet_s: float = Field(600.0, gt=0, description="A repeated Event that was quiet this long is announced again (the webhook too).")
    metrics_port: int = Field(8080, ge=0, le=65535, description="Prometheus metrics port (0 = off).")
    namespace: str | None = Field(None, description="Watch one namespace only (None = cluster-wide).")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Settings":
        """Build settings from `AGENTBOX_*` variables; unknown values raise pydantic.ValidationError."""
        import os

        env = os.environ if environ is None else environ
        values = {}
        for name in cls.model_fields:
            key = f"AGENTBOX_{name.upper()}"
            if key in env:
                values[name] = env[key]
        return cls(**values)
