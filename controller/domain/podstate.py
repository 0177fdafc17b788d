"""Is the box container really running? Read from a Pod's ``status`` (phase and containerStatuses), as a
kubelet reports it; pure (no I/O).

A crash-looping pod keeps ``phase: Running`` (restartPolicy Always) while its container waits in
``CrashLoopBackOff``: the phase alone never makes a box Ready.  Whether the tmux session exists is checked
by the tab watcher on top of this (reason ``SessionMissing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from controller.constants import R_CONTAINER_TERMINATED as CONTAINER_TERMINATED  # ended, not restarted
from controller.constants import R_CONTAINER_WAITING as CONTAINER_WAITING  # CrashLoopBackOff, ImagePullBackOff...
from controller.constants import R_POD_PENDING as POD_PENDING  # no pod yet, or phase is not Running


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {} (untrusted input: any shape may come)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else []."""
    return value if isinstance(value, list) else []


CONTAINER_RUNNING = "ContainerRunning"    # running: the session check decides Ready

_MAX_TEXT = 200


def _clip(text: Any) -> str:
    """Kubelet text is bounded and kept on one line (it ends up in a condition message)."""
    s = " ".join(str(text or "").split())
    return s if len(s) <= _MAX_TEXT else s[: _MAX_TEXT - 1] + "…"


@dataclass(frozen=True)
class ContainerView:
    """What the Pod status says of the box container.

    Attributes:
        running: the container's ``state.running`` is set (and the pod phase is Running).
        reason: one of the module's reason constants.
        message: one sentence for a condition message (bounded, no values from the box's files).
        waiting_reason: the kubelet's waiting reason (``CrashLoopBackOff``...) or None.
    """

    running: bool
    reason: str
    message: str
    waiting_reason: str | None = None


def box_container_view(pod: dict[str, Any] | None, pod_name: str, container: str | None) -> ContainerView:
    """Read the box container's state from a stored Pod (``None``: not created yet).

    ``container``: the box container's name (``None``: the pod's spec has no such container).
    """
    if pod is None:
        return ContainerView(False, POD_PENDING, f"Pod {pod_name} does not exist yet")
    status = _dict(pod.get("status"))
    phase = status.get("phase") or "Pending"
    statuses = _list(status.get("containerStatuses"))
    mine = next((s for s in statuses if isinstance(s, dict) and s.get("name") == container), None)
    state = _dict((mine or {}).get("state"))
    if phase != "Running":
        waiting = _dict(state.get("waiting")) or None
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            why = _clip(waiting.get("reason"))
            return ContainerView(False, CONTAINER_WAITING, f"Pod {pod_name} is {phase}; container {container} is "
                                 f"waiting: {why}" + (f" ({_clip(waiting.get('message'))})" if waiting.get("message")
                                                      else ""), why)
        return ContainerView(False, POD_PENDING, f"Pod {pod_name} is {_clip(phase)}")
    if mine is None:
        return ContainerView(False, CONTAINER_WAITING, f"Pod {pod_name} reports no status for container {container}")
    if isinstance(state.get("running"), dict):
        return ContainerView(True, CONTAINER_RUNNING, f"Container {container} is running")
    waiting = state.get("waiting")
    if isinstance(waiting, dict):
        why = _clip(waiting.get("reason") or "Unknown")
        last = _dict(_dict(mine.get("lastState")).get("terminated"))
        extra = f"; last exit code {last.get('exitCode')}" if isinstance(last, dict) and "exitCode" in last else ""
        restarts = mine.get("restartCount")
        extra += f"; restarted {restarts} time(s)" if isinstance(restarts, int) and restarts else ""
        return ContainerView(False, CONTAINER_WAITING, f"Container {container} is waiting: {why}{extra}", why)
    terminated = state.get("terminated")
    if isinstance(terminated, dict):
        return ContainerView(False, CONTAINER_TERMINATED, f"Container {container} terminated with exit code "
                             f"{_clip(terminated.get('exitCode'))}")
    return ContainerView(False, CONTAINER_WAITING, f"Container {container} has no known state")


def box_time_zone(spec_time_zone: str | None, pod: Mapping[str, Any] | None, container: str | None) -> str:
    """The time zone the agents print their reset times in: spec.timeZone, else the box container's `TZ`
    environment variable (a literal value in the pod spec), else "UTC". The pod is untrusted in shape."""
    if spec_time_zone:
        return spec_time_zone
    for ctr in _list(_dict(_dict(pod).get("spec")).get("containers")):
        if _dict(ctr).get("name") == container and container is not None:
            for env in _list(_dict(ctr).get("env")):
                value = _dict(env).get("value")
                if _dict(env).get("name") == "TZ" and value and isinstance(value, str):
                    return value
    return "UTC"
