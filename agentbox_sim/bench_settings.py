"""Operator settings of the benchmarks (bench/*.py): one definition, per-bench overrides. The product never
imports this package.

``fast`` is the component tests' fast timing with a realistic 5 s scan (the watcher's cadence, resume margin,
human-idle and grace times, retries and exec timeout short enough for a run of minutes); ``default`` is the
controller's shipped settings (for benches that measure the default cadence) with the metrics server off.
"""

from __future__ import annotations

from typing import Any, Literal

from controller.settings import Settings

FAST: dict[str, Any] = dict(
    scan_interval_s=5.0, resume_margin_s=1.0, human_idle_s=4.0, auto_continue_grace_s=6.0, settle_s=4.0,
    max_attempts=3, unknown_reset_recheck_s=5.0, send_pause_s=0.15, verify_timeout_s=4.0, restart_timeout_s=15.0,
    usage_interval_s=30.0, usage_max_age_s=2.0, exec_timeout_s=10.0, metrics_port=0,
)
"""The fast bench timing (seconds): the fields :func:`bench_settings` sets over the defaults."""


def bench_settings(profile: Literal["fast", "default"] = "fast", **overrides: Any) -> Settings:
    """The settings of one bench: ``profile`` (:data:`FAST`, or the shipped defaults with ``metrics_port=0``)
    with ``overrides`` (Settings field names) on top, e.g. ``bench_settings(usage_interval_s=300.0)``.

    Raises:
        pydantic.ValidationError: an override is not a valid setting.
    """
    base: dict[str, Any] = dict(FAST) if profile == "fast" else {"metrics_port": 0}
    return Settings(**{**base, **overrides})
