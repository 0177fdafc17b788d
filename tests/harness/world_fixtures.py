"""Fixture `world`: the emulated API server, provider emulator, tmux pods and (on demand) the real
kopf operator with short intervals. See agentbox_sim/world.py."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator

import pytest_asyncio

from controller.settings import Settings
from agentbox_sim.world import World

FAST = Settings(
    scan_interval_s=1.0, resume_margin_s=1.0, human_idle_s=4.0, auto_continue_grace_s=6.0, settle_s=4.0,
    max_attempts=3, unknown_reset_recheck_s=5.0, send_pause_s=0.15, verify_timeout_s=4.0, restart_timeout_s=15.0,
    usage_interval_s=30.0, usage_max_age_s=2.0, exec_timeout_s=10.0, metrics_port=0, retry_delay_s=2.0,
    usage_near_interval_s=5.0, usage_min_interval_s=1.0,
    # the live tmux stream is the default; AGENTBOX_TEST_TMUX_STREAM=0 runs every scenario on the polling fallback
    tmux_stream=os.environ.get("AGENTBOX_TEST_TMUX_STREAM", "1") != "0",
)


@pytest_asyncio.fixture
async def world(tmp_path: pathlib.Path) -> AsyncIterator[World]:
    async with World(tmp_path / "world", FAST) as w:
        yield w


def watcher_passes(world: World, box: str) -> int:
    """Passes the tab watcher of `box` has started so far, in either mode (polling or the live stream),
    read from the controller's own counter `agentbox_watcher_passes_total` (the operator runs in a thread of
    this process: one metrics registry). A pass makes no request of its own any more (its existence check is
    answered from the watch), so the API journal cannot count them; a pass on the live stream runs no exec.
    The series is removed when the box's watcher ends: count passes of a watcher that runs."""
    from controller import metrics

    value = metrics.REGISTRY.get_sample_value("agentbox_watcher_passes_total",
                                              {"namespace": world.namespace, "box": box})
    return int(value or 0)
