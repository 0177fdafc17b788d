"""Operator settings (environment variables `AGENTBOX_*`), and the clock.

Intervals are settings so tests and the demo run them short; defaults suit a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Callable, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars


def utcnow() -> datetime:
    """The current instant, UTC, tz-aware."""
    return datetime.now(timezone.utc)


Clock = Callable[[], datetime]


ENV_PREFIX = "AGENTBOX_"

GC_GEN0 = 50_000
"""Default `gc_gen0_threshold` (bench/README.md has the measurement behind it)."""

# The environment `Settings.from_env(environ)` reads instead of os.environ (None: os.environ).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("agentbox_settings_environ", default=None)


class Settings(BaseSettings):
    """Tunables of the operator. All durations in seconds.

    Read from the environment by pydantic-settings (`Settings()` or `Settings.from_env()`): each field
    `x_y` is `AGENTBOX_X_Y`; other `AGENTBOX_*` variables (the webhook's, read by controller/notify.py)
    are ignored. No .env or secrets-directory sources: the chart sets the environment.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=False)

    scan_interval_s: float = Field(5.0, gt=0, description="How often each running box's tabs are captured (two exec calls per box; bounds how fast a limit line is seen, and so rotation).")
    tmux_stream: bool = Field(True, description="Follow each box's tmux through one live control-mode exec stream (changed panes only, reaction under a second) instead of polling every scan_interval_s; polling stays the fallback (no tmux, tmux older than 3.2, stream down) and the TerminalStream condition says which is used.")
    stream_rescan_s: float = Field(300.0, gt=0, description="With tmux_stream attached: longest time between two passes of a box whose screens did not change and that has no deadline (such a pass runs no exec; its structured usage files are re-read only when a screen changed).")
    existence_recheck_s: float = Field(60.0, gt=0, description="A box's tab watcher and a Subscription's usage reader learn that their object still exists from the watch (no request per pass); when the watch has said nothing of the object for this long they GET it once (a watch can miss a deletion across a re-list).")
    resume_margin_s: float = Field(10.0, ge=0, le=30, description="Delay after a reset before `continue` is sent.")
    resume_prepare_s: float = Field(8.0, ge=0, le=60, description="How long before the resume instant (reset + resume_margin_s) the subscription's usage is re-read; when it says the window reset, the continue is armed (its journal written ahead) and its Enter pressed at the resume instant. Never earlier than 1 s after the reset; 0 re-reads at the resume instant and sends at once.")
    resume_write_budget_s: float = Field(2.0, ge=0, le=10, description="Time budgeted for the status write of the Enter step of an armed continue: its text is typed send_pause_s + this before the resume instant, so that Enter lands at that instant (1,000 boxes, 200 due at one instant: 0.5 s gave a resume lag p99 of 3.8 s, 2 s 0.9 s). The least budget: it grows with the sends armed for the same instant (resume_write_budget_per_send_s). Enter is pressed only if the screen did not change since the typing.")
    resume_write_budget_per_send_s: float = Field(0.008, ge=0, le=0.1, description="The write budget of the armed continues due at one instant is this many seconds per continue armed for it in this replica (each writes its Enter step to status before its Enter), in steps of 0.25 s, at least resume_write_budget_s and at most resume_write_budget_max_s: 500 at one instant type 4 s before it. 0: always resume_write_budget_s.")
    resume_write_budget_max_s: float = Field(6.0, ge=0, le=10, description="Most seconds the write budget grows to (resume_write_budget_per_send_s): the armed text waits in the prompt at most send_pause_s + this (never typed before its continue is armed, at most resume_prepare_s before the instant).")
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
    exec_max_output_bytes: int = Field(1048576, ge=65536, description="Most bytes one pod exec call may print (stdout and stderr together); a box printing more gets no further than that (condition BoxOutputTooLarge).")
    exec_timeout_s: float = Field(10.0, gt=0, description="Timeout of one pod exec call.")
    # --- the Kubernetes API transport (controller/kube/rest.py): one connection pool for REST and exec
    kube_max_requests: int = Field(64, ge=1, le=4096, description="Most Kubernetes API requests (REST, not exec streams) in flight at once; more wait for a slot. Bounds the controller's share of the API server's max-requests-inflight when a thousand boxes wake at one reset.")
    kube_request_timeout_s: float = Field(60.0, gt=0, le=600, description="Total time of one Kubernetes API request (connect included); no answer by then is a failed request (status 0, reason Timeout).")
    kube_connect_timeout_s: float = Field(10.0, gt=0, le=120, description="Time to connect to the Kubernetes API server (part of kube_request_timeout_s).")
    kube_keepalive_s: float = Field(30.0, gt=0, le=3600, description="How long an idle connection to the Kubernetes API server is kept for reuse.")
    # --- end Kubernetes API transport
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
    # --- box policy (controller/domain/boxpolicy.py, docs/security.md); the chart sets these from `boxPolicy`
    box_policy: bool = Field(True, description="Check every AgentBox pod template against the box policy (Pod Security restricted, no API token, allow-lists below) before creating its pod, and default the restricted profile's required fields.")
    box_policy_service_accounts: list[str] = Field(default_factory=list, description="ServiceAccounts a box pod may run as besides `default` (JSON list).")
    box_policy_allow_token: bool = Field(False, description="A box template may mount a ServiceAccount token (automountServiceAccountToken: true or a projected token).")
    box_policy_volume_types: list[str] = Field(default_factory=lambda: ["configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"], description="Volume sources a box template may use (JSON list; a subset of the restricted profile's; Secrets are box_policy_secret_names).")
    box_policy_secret_names: list[str] = Field(default_factory=list, description="Secrets a box template may use as a volume, projected source, env, envFrom or imagePullSecrets (JSON list).")
    box_policy_image_prefixes: list[str] = Field(default_factory=list, description="When non-empty, every box image must start with one of these (JSON list).")
    # --- end box policy
    gc_gen0_threshold: int = Field(GC_GEN0, ge=0, description="Garbage collector: allocations between two young-generation collections (CPython's default is 700; 0 keeps it). Higher: objects that live for one pass die before a collection walks them (bench/README.md).")
    gc_freeze_period_s: float = Field(600.0, ge=0, description="Garbage collector: about every this many seconds (+-20 %) one full collection, then the survivors are frozen out of the automatic collections, so those of a reset's burst walk only new objects; no automatic full collection meanwhile. With shards it starts right after a Lease renewal, and only when its predicted pause fits a third of the renew deadline (else only the young objects are collected and frozen) (0 = off; bench/README.md).")
    # --- sharding over replicas (controller/domain/shards.py, controller/kube/shardleases.py, docs/operations.md)
    shards: int = Field(1, ge=1, le=256, description="Number of shards the boxes and Subscriptions are divided into, each with its own Lease (`<lease>-shard-<i>`, `run --leader-elect <lease>`); every replica runs and serves only the shards whose Lease it holds, about shards/replicas each. 1: no shard Leases at all (one Lease for the whole operator, as without sharding).")
    shard_by: Literal["hash", "label"] = Field("hash", description="With shards > 1: `hash` puts an object in the shard given by the SHA-256 of `namespace/name`; `label` in the shard named by its shard_label label (an integer 0..shards-1; an object without a valid one is served by no replica).")
    shard_label: str = Field("agentbox.dev/shard", min_length=1, max_length=317, description="With shard_by=label: the label whose value is an object's shard number.")
    # --- end sharding
    metrics_port: int = Field(8080, ge=0, le=65535, description="Prometheus metrics port (0 = off).")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments first, then the environment (a given mapping in `from_env`); nothing else."""
        environ = _ENVIRON.get()
        if environ is not None and isinstance(env_settings, EnvSettingsSource):
            env_settings.env_vars = parse_env_vars(environ, env_settings.case_sensitive,
                                                   env_settings.env_ignore_empty, env_settings.env_parse_none_str)
        return init_settings, env_settings

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Settings from `AGENTBOX_*` variables of `environ` (default: the process environment).

        Raises pydantic.ValidationError on a bad value; `describe_error` turns it into one line naming
        the variable."""
        token = _ENVIRON.set(environ)
        try:
            return cls()
        finally:
            _ENVIRON.reset(token)


def describe_error(exc: ValidationError) -> str:
    """One line per bad setting, naming the environment variable: `AGENTBOX_SCAN_INTERVAL_S: Input should
    be greater than 0 (got '0')`. The value is shown: settings hold no credentials (the webhook URL is read
    from a file by controller/notify.py)."""
    parts = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err.get("loc") else "?"
        parts.append(f"{ENV_PREFIX}{name.upper()}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)
