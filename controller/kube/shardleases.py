"""Shard Leases (`coordination.k8s.io/v1`, `<prefix>-shard-<i>`): with `shards > 1` every replica runs the
operator and serves only the objects of the shards whose Lease it holds.

The same guards as the one Lease of `controller/kube/election.py`, per shard:

* every write is conditional on the resourceVersion read (a 409 means another replica won the shard) and
  every request has a timeout (the REST transport's, bounded here by the renew deadline);
* expiry is judged by this replica's own clock: a Lease counts as renewed at the instant this replica saw
  it change, never by the time its writer put in it (client-go's rule);
* a shard is served only while its last successful renewal was *sent* less than `renew_deadline_s` ago,
  and a watchdog thread ends the process when a held shard was not renewed for that long, whatever the
  event loop is doing (hung, starved): a replica stops acting before any other may take its shards
  (`lease_duration_s` later). A replica that reads another holder in a shard it serves ends the process.
* a shard given back to a replica under its share (`controller.domain.shards.plan_shards`) stops being
  served first (its daemons are stopped and awaited by `stop_serving`), then its holder is emptied.

Who is alive counts in the fair share: every replica keeps a heartbeat in the annotations of one more Lease,
`<prefix>-shards` (one annotation per replica, `shards.agentbox.dev/<digest of its identity>`), so a replica
that holds no shard yet is counted and the holders give it its share.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from controller.domain.shards import FREE, LeaseRecord, plan_shards
from controller.kube.election import WATCHDOG_PERIOD_S, ElectionTimings
from controller.kube.rest import KubeApiError, Rest, path_of

logger = logging.getLogger("agentbox.shards")

MEMBER_PREFIX = "shards.agentbox.dev/"


def shard_lease_name(prefix: str, shard: int) -> str:
    """The Lease of shard `shard`: `<prefix>-shard-<shard>`."""
    return f"{prefix}-shard-{shard}"


def members_lease_name(prefix: str) -> str:
    """The Lease holding the replicas' heartbeats: `<prefix>-shards`."""
    return f"{prefix}-shards"


def lease_names(prefix: str, total: int) -> list[str]:
    """Every Lease name the sharded replicas use (the chart's RBAC grants get/update on exactly these)."""
    return [shard_lease_name(prefix, i) for i in range(total)] + [members_lease_name(prefix)]


def _micro(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _digest(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


@dataclass
class _Seen:
    """What this replica last read of one Lease and when it saw it change (UTC, its own clock)."""

    key: tuple[Any, ...] = ()
    changed_at: datetime | None = None
    body: dict[str, Any] | None = None


@dataclass
class ShardLeases:
    """One replica's shard Leases.

    Args:
        rest: the process's REST transport.
        namespace, prefix: where the Leases are and how they are named.
        total: the number of shards (> 1).
        identity: this replica's holder identity (`election.new_identity()`).
        timings: seconds (`ElectionTimings`: lease duration, renew deadline, retry period).
        clock: the current UTC instant.
        stop_serving: `async (shards) -> bool`, called before shards are given back; it returns once
            nothing of theirs runs any more (True), or False when something still runs: then the process
            ends instead of giving them back (their Leases expire; nothing acts twice).
        exit: `(code, why) -> None` ending the process (default: log and `os._exit`; tests record).
        on_change: called (no arguments) whenever the served shards change.
    """

    rest: Rest
    namespace: str
    prefix: str
    total: int
    identity: str
    timings: ElectionTimings = field(default_factory=ElectionTimings)
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    stop_serving: Callable[[set[int]], Awaitable[bool]] | None = None
    on_change: Callable[[], None] | None = None
    exit: Callable[[int, str], None] | None = None
    renewed_sent: dict[int, float] = field(default_factory=dict)  # shard -> monotonic s of its last renewal sent
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _members: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # annotation -> (value, seen change)
    _beat: int = 0
    _beat_sent: float | None = None

    # ------------------------------------------------------------------------------------------ serving
    def serves(self, shard: int) -> bool:
        """This replica holds `shard` and renewed it less than `renew_deadline_s` ago (monotonic clock)."""
        sent = self.renewed_sent.get(shard)
        return sent is not None and time.monotonic() - sent <= self.timings.renew_deadline_s

    @property
    def served(self) -> frozenset[int]:
        """The shards served now."""
        return frozenset(s for s in self.renewed_sent if self.serves(s))

    def _end(self, code: int, why: str) -> None:
        if self.exit is not None:
            self.exit(code, why)
            return
        logger.warning("%s; exiting", why)
        logging.shutdown()
        os._exit(code)

    def start_watchdog(self) -> threading.Thread:
        """A thread that ends the process once a held shard was not renewed within the renew deadline."""
        def watch() -> None:
            while True:
                time.sleep(WATCHDOG_PERIOD_S)
                now = time.monotonic()
                late = [s for s, sent in list(self.renewed_sent.items())
                        if now - sent > self.timings.renew_deadline_s]
                if late:
                    self._end(1, f"No renewal of the shard Lease(s) {late} for {self.timings.renew_deadline_s:g} s")
        thread = threading.Thread(target=watch, name="shard-lease-watchdog", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------------------------------ I/O
    def _path(self, name: str | None = None) -> str:
        parts = ["apis", "coordination.k8s.io", "v1", "namespaces", self.namespace, "leases"]
        return path_of(*parts, name) if name else path_of(*parts)

    async def _get(self, name: str) -> dict[str, Any] | None:
        lease = await asyncio.wait_for(self.rest.request("GET", self._path(name), missing_ok=True), self._timeout)
        return lease if isinstance(lease, dict) else None

    @property
    def _timeout(self) -> float:
        return max(1.0, self.timings.renew_deadline_s / 3)

    async def _write(self, name: str, lease: dict[str, Any] | None, spec: dict[str, Any],
                     annotations: dict[str, str | None] | None = None) -> dict[str, Any] | None:
        """Create the Lease (`lease` None) or replace the version read; None when another replica won (409)
        or the request failed."""
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace}
        if lease is not None:
            meta = dict(lease.get("metadata") or {}, **meta)
        if annotations is not None:
            meta["annotations"] = {k: v for k, v in annotations.items() if v is not None}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
        try:
            if lease is None:
                answer = await asyncio.wait_for(self.rest.request("POST", self._path(), body=body), self._timeout)
            else:
                answer = await asyncio.wait_for(self.rest.request("PUT", self._path(name), body=body), self._timeout)
        except KubeApiError as exc:
            if exc.status not in (409,):
                logger.info("Shard Lease %s: write failed (%s)", name, exc.status or exc.reason)
            return None
        except asyncio.TimeoutError:
            logger.info("Shard Lease %s: write timed out", name)
            return None
        return answer if isinstance(answer, dict) else None

    def _record(self, name: str, lease: dict[str, Any] | None, now: datetime) -> LeaseRecord:
        spec = (lease or {}).get("spec") or {}
        holder = spec.get("holderIdentity") or None
        key = (holder, spec.get("renewTime"), (lease or {}).get("metadata", {}).get("resourceVersion"))
        seen = self._seen.setdefault(name, _Seen())
        if seen.key != key:
            seen.key, seen.changed_at = key, now
        seen.body = lease
        if holder is None:
            return FREE
        return LeaseRecord(holder, seen.changed_at, float(spec.get("leaseDurationSeconds") or 0))

    async def _read_members(self, now: datetime) -> dict[str, Any] | None:
        name = members_lease_name(self.prefix)
        lease = await self._get(name)
        ann = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        current = {k: v for k, v in ann.items() if k.startswith(MEMBER_PREFIX)}
        for key, value in current.items():
            if self._members.get(key, ("", now))[0] != value:
                self._members[key] = (value, now)
        for key in list(self._members):
            if key not in current:
                del self._members[key]
        own = MEMBER_PREFIX + _digest(self.identity)
        beat_due = self._beat_sent is None or time.monotonic() - self._beat_sent >= self.timings.lease_duration_s / 3
        if beat_due:
            self._beat += 1
            stale = self.timings.lease_duration_s * 3
            new = {k: v for k, (v, seen) in self._members.items() if (now - seen).total_seconds() < stale}
            new.update({k: v for k, v in ann.items() if not k.startswith(MEMBER_PREFIX)})
            new[own] = f"{self.identity} {self._beat}"
            sent = time.monotonic()
            if await self._write(name, lease, {}, new) is not None:
                self._beat_sent = sent
        return lease

    def _member_beats(self) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        for value, seen in self._members.values():
            identity = value.rsplit(" ", 1)[0]
            if identity != self.identity:
                out[identity] = seen
        return out

    async def look(self) -> None:
        """One look: read the heartbeats and every shard Lease, plan (`plan_shards`), then give back, renew
        and take, each write conditional on the version read."""
        now = self.clock()
        try:
            await self._read_members(now)
            names = [shard_lease_name(self.prefix, i) for i in range(self.total)]
            leases = await asyncio.gather(*(self._get(n) for n in names))
        except (KubeApiError, asyncio.TimeoutError) as exc:
            logger.info("Shard Leases: read failed (%s)", getattr(exc, "status", None) or type(exc).__name__)
            return
        records = [self._record(n, lease, now) for n, lease in zip(names, leases)]
        for shard in list(self.renewed_sent):
            if records[shard].holder not in (None, self.identity):
                self._end(1, f"The shard Lease {names[shard]} is held by {records[shard].holder} now")
        plan = plan_shards(records, self.identity, now, self._member_beats(),
                           member_ttl_s=float(self.timings.lease_duration_s))
        before = self.served
        if plan.release:
            released = set(plan.release)
            for shard in released:
                self.renewed_sent.pop(shard, None)
            if self.on_change is not None:
                self.on_change()
            if self.stop_serving is not None and not await self.stop_serving(released):
                self._end(1, f"What ran for the shards {sorted(released)} did not stop")
                return
            for shard in plan.release:
                lease = leases[shard]
                spec = dict((lease or {}).get("spec") or {}, holderIdentity=None, leaseDurationSeconds=1)
                if await self._write(names[shard], lease, spec) is not None:
                    logger.info("Gave the shard Lease %s back", names[shard])
        duration = int(self.timings.lease_duration_s)

        async def hold(shard: int) -> None:
            lease = leases[shard]
            spec = dict((lease or {}).get("spec") or {})
            stamp = _micro(self.clock())
            if shard in plan.acquire:
                spec.update(acquireTime=stamp, leaseTransitions=int(spec.get("leaseTransitions") or 0)
                            + (1 if spec.get("holderIdentity") else 0))
            spec.update(holderIdentity=self.identity, leaseDurationSeconds=duration, renewTime=stamp)
            sent = time.monotonic()
            answer = await self._write(names[shard], lease, spec)
            if answer is not None:
                self.renewed_sent[shard] = sent
                self._record(names[shard], answer, now)
                if shard in plan.acquire:
                    logger.info("Acquired the shard Lease %s/%s as %s", self.namespace, names[shard], self.identity)

        # Every renewal and take at once: one round trip a look whatever the number of shards held (one after
        # the other, a slow API server made the first shard's renewals a look's duration apart).
        await asyncio.gather(*(hold(shard) for shard in plan.renew + plan.acquire))
        if self.served != before and self.on_change is not None:
            self.on_change()

    async def run(self, stopped: asyncio.Event) -> None:
        """Look every `retry_period_s` until `stopped`; then give every held shard back (best effort)."""
        while not stopped.is_set():
            started = time.monotonic()
            try:
                await self.look()
            except Exception as exc:  # noqa: BLE001 -- a failed look is a failed attempt
                logger.warning("Shard Leases: look failed (%s)", type(exc).__name__)
            remaining = self.timings.retry_period_s - (time.monotonic() - started)
            try:
                await asyncio.wait_for(stopped.wait(), max(0.05, remaining))
            except asyncio.TimeoutError:
                pass
        await self.release_all()

    async def release_all(self) -> None:
        """Stop serving and give every held shard back (SIGTERM, the operator stopping)."""
        held = set(self.renewed_sent)
        self.renewed_sent.clear()
        if not held:
            return
        if self.on_change is not None:
            self.on_change()
        if self.stop_serving is not None and not await self.stop_serving(held):
            self._end(1, f"What ran for the shards {sorted(held)} did not stop")
            return
        for shard in sorted(held):
            name = shard_lease_name(self.prefix, shard)
            try:
                lease = await self._get(name)
            except (KubeApiError, asyncio.TimeoutError):
                continue
            if lease is None or ((lease.get("spec") or {}).get("holderIdentity")) != self.identity:
                continue
            spec = dict(lease.get("spec") or {}, holderIdentity=None, leaseDurationSeconds=1)
            await self._write(name, lease, spec)
        logger.info("Gave the shard Leases %s back", sorted(held))

