"""Leader election on a coordination.k8s.io Lease: with replicas > 1 only the Lease holder runs the operator.

Built on the Kubernetes client's `kubernetes.leaderelection` (the algorithm of client-go / controller-runtime:
a candidate takes the Lease once it saw no renewal for `lease_duration_s`; the holder renews every
`retry_period_s`), plus three guards that module lacks, so that two replicas never act at once:

* every Lease request has a timeout, and a transport error counts as a failed attempt (the module's own
  calls have no timeout: one hung request would keep a cut-off leader acting for ever);
* a watchdog thread ends the process once the last successful renewal was *sent* more than
  `renew_deadline_s` ago, whatever the election loop is doing (hung, paused, starved);
* a leader that reads another holder in the Lease ends the process at once.

A standby serves the liveness endpoint itself (kopf serves it once it runs), and on SIGTERM the leader
gives the Lease up (empty holder), so a rolling update hands over within one retry period instead of a
whole lease duration. Ending the process is how a replica stops acting: the kubelet restarts it as a
standby.
"""

from __future__ import annotations

import http.server
import logging
import os
import secrets
import signal
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger("agentbox.election")

# Start of the operator once the Lease is held (to its first AgentBox watch), an allowance in seconds used
# in the stated failover bound. With the imports warmed up while standing by (`run` does that) it is well
# under a second; bench/faults.py --failover measured 9.7-10.9 s from kill to first watch with 10/7/1 s.
OPERATOR_START_ALLOWANCE_S = 2.0
WATCHDOG_PERIOD_S = 0.2


@dataclass(frozen=True)
class ElectionTimings:
    """Seconds. `lease_duration_s`: a standby takes the Lease after seeing no renewal for this long (an int:
    the Lease's spec.leaseDurationSeconds). `renew_deadline_s`: a leader whose last successful renewal was
    sent longer ago than this stops acting (exits). `retry_period_s`: how often the leader renews and a
    standby looks at the Lease."""

    lease_duration_s: int = 10
    renew_deadline_s: float = 7.0
    retry_period_s: float = 1.0

    def problem(self) -> str | None:
        """None when usable, else one line saying why. A leader must be gone (renew deadline plus the
        watchdog's period) at least one second before a standby may take over (lease duration); the
        client's module wants retry >= 1 s and renew deadline > 1.2 x retry."""
        if self.retry_period_s < 1:
            return "--retry-period must be at least 1 s"
        if self.renew_deadline_s <= 1.2 * self.retry_period_s:
            return "--renew-deadline must be more than 1.2 x --retry-period"
        if self.lease_duration_s < self.renew_deadline_s + WATCHDOG_PERIOD_S + 1:
            return "--lease-duration must be at least --renew-deadline + 1.2 s (a leader stops before a standby starts)"
        return None

    @property
    def failover_bound_s(self) -> float:
        """Worst case from a leader's death to the standby's operator running, in seconds: the last renewal
        may be seen up to one retry late, the expiry is noticed up to one retry late, then the operator
        starts. 10/7/1 (the defaults): 14 s."""
        return self.lease_duration_s + 2 * self.retry_period_s + OPERATOR_START_ALLOWANCE_S


def new_identity() -> str:
    """`<hostname>_<pid>_<6 hex>`: the pod name (what `kubectl get lease` shows), the process, and a random
    part so that a restarted container (same pod, same pid 1) is a new candidate, not the old holder."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


class _TimedApi:
    """CoordinationV1Api with a timeout on every Lease call."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api, self._timeout = api, timeout_s

    def read_namespaced_lease(self, *args: Any, **kw: Any) -> Any:
        return self._api.read_namespaced_lease(*args, _request_timeout=self._timeout, **kw)

    def create_namespaced_lease(self, *args: Any, **kw: Any) -> Any:
        return self._api.create_namespaced_lease(*args, _request_timeout=self._timeout, **kw)

    def replace_namespaced_lease(self, *args: Any, **kw: Any) -> Any:
        return self._api.replace_namespaced_lease(*args, _request_timeout=self._timeout, **kw)


def _guarded_lock(name: str, namespace: str, identity: str, timeout_s: float,
                  on_other_holder: Callable[[str], None]) -> Any:
    """A LeaseLock that records when its last successful write was sent (`renewed_at`, monotonic s),
    turns transport errors into failed attempts, and calls `on_other_holder(holder)` when, while leading,
    it reads another holder."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class GuardedLeaseLock(LeaseLock):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(name, namespace, identity)
            self.api_instance = _TimedApi(client.CoordinationV1Api(), timeout_s)
            self.renewed_at: float | None = None
            self.leading = False

        def get(self, name: str, namespace: str) -> tuple[bool, Any]:
            try:
                found, record = super().get(name, namespace)
            except Exception as exc:  # noqa: BLE001 -- a transport error is a failed attempt (no body)
                return False, ApiException(status=0, reason=type(exc).__name__)
            if found and self.leading and record.holder_identity not in (None, identity):
                on_other_holder(str(record.holder_identity))
            return found, record

        def _write(self, call: Callable[[], bool]) -> bool:
            sent = time.monotonic()
            try:
                ok = call()
            except Exception as exc:  # noqa: BLE001
                logger.info("Lease write failed: %s", type(exc).__name__)
                return False
            if ok:
                self.renewed_at = sent
            return ok

        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            return self._write(lambda: LeaseLock.create(self, name, namespace, election_record))

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            return self._write(lambda: LeaseLock.update(self, name, namespace, updated_record))

        def release(self) -> None:
            """Give the Lease up (empty holder, as client-go's ReleaseOnCancel): a standby takes it at its
            next look. Best effort; a conflict means someone else holds it already."""
            try:  # read it again: the module keeps the version it read before its last renewal
                lease = self.api_instance.read_namespaced_lease(name, namespace)
                if lease.spec is None or lease.spec.holder_identity != identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self.api_instance.replace_namespaced_lease(name=name, namespace=namespace, body=lease)
                logger.info("Released the Lease %s/%s", namespace, name)
            except Exception as exc:  # noqa: BLE001
                logger.info("Could not release the Lease: %s", type(exc).__name__)

    return GuardedLeaseLock()


class _StandbyHealth:
    """The liveness endpoint while standing by (kopf serves it once it leads): 200 on any GET of its path."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        path = parsed.path or "/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- the stdlib's name
                ok = self.path.split("?", 1)[0] == path
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"standby": true}' if ok else b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((parsed.hostname or "0.0.0.0", parsed.port or 80), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="standby-health", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_elected(lease_name: str, lease_namespace: str, timings: ElectionTimings, operate: Callable[[], None],
                *, liveness: str = "", identity: str | None = None) -> int:
    """Stand by until this process holds the Lease `lease_namespace/lease_name`, then run `operate` (the
    operator; blocking) in a thread while the main thread renews. Never returns while leading: the process
    ends (os._exit) when `operate` returns (0), when the Lease is lost or not renewed within the renew
    deadline (1), or on SIGTERM (0, after giving the Lease up). The kube client config must be loaded.
    Returns 1 only if the election loop itself ends."""
    from kubernetes.leaderelection import electionconfig, leaderelection

    identity = identity or new_identity()
    exiting = threading.Lock()

    def end(code: int, why: str) -> None:
        if exiting.acquire(blocking=False):
            (logger.info if code == 0 else logger.warning)("%s; exiting", why)
            logging.shutdown()
            os._exit(code)

    def other_holder(holder: str) -> None:
        end(1, f"The Lease {lease_namespace}/{lease_name} is held by {holder} now")

    timeout = max(1.0, timings.renew_deadline_s / 3)
    lock = _guarded_lock(lease_name, lease_namespace, identity, timeout, other_holder)
    health = _StandbyHealth(liveness) if liveness else None

    def watchdog() -> None:
        while True:
            time.sleep(WATCHDOG_PERIOD_S)
            if lock.leading and lock.renewed_at is not None and \
                    time.monotonic() - lock.renewed_at > timings.renew_deadline_s:
                end(1, f"No renewal of the Lease {lease_namespace}/{lease_name} for {timings.renew_deadline_s:g} s")

    def lead() -> None:
        lock.leading = True
        logger.info("Acquired the Lease %s/%s as %s; starting the operator", lease_namespace, lease_name, identity)
        if health is not None:
            health.close()  # kopf serves the same endpoint from now on
        try:
            operate()
        finally:
            end(0, "The operator stopped")  # give the Lease up by exiting: a standby takes it

    def lost() -> None:
        end(1, f"Could not renew the Lease {lease_namespace}/{lease_name} within {timings.renew_deadline_s:g} s")

    def terminate(signum: int, frame: Any) -> None:
        if lock.leading:
            lock.release()
        end(0, "SIGTERM")

    signal.signal(signal.SIGTERM, terminate)
    threading.Thread(target=watchdog, name="lease-watchdog", daemon=True).start()
    threading.excepthook = lambda args: end(1, f"Thread {args.thread.name if args.thread else '?'} failed")
    logger.info("Waiting for the Lease %s/%s as %s", lease_namespace, lease_name, identity)
    cfg = electionconfig.Config(lock, lease_duration=timings.lease_duration_s, renew_deadline=timings.renew_deadline_s,
                                retry_period=timings.retry_period_s, onstarted_leading=lead, onstopped_leading=lost)
    leaderelection.LeaderElection(cfg).run()
    return 1
