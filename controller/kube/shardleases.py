"""Shard Leases (`coordination.k8s.io/v1`, `<prefix>-shard-<i>`): with `shards > 1` every replica runs the
operator and serves only the objects of the shards whose Lease it holds.

The same guards as the one Lease of `controller/kube/election.py`, per shard:

* every write is conditional on the resourceVersion read (409: another replica won), every request has a
  timeout; expiry is judged by this replica's own clock (client-go's rule: renewed when seen to change);
* a shard is served only while its last successful renewal was *sent* less than `renew_deadline_s` ago,
  and a watchdog thread ends the process when a held shard was not renewed for that long, whatever the
  event loop is doing (hung, starved): a replica stops acting before any other may take its shards
  (`lease_duration_s` later). A replica that reads another holder in a shard it serves ends the process.
* a shard given back to a replica under its share (`controller.domain.shards.plan_shards`) stops being
  served first (its daemons are stopped and awaited by `stop_serving`), then its holder is emptied.

Requests: a look every `retry_period_s` renews the held shards only, each with one PUT conditional on the
version its last renewal answered (no read first: a 409 says someone else wrote it, then it is read); the
other shards and the heartbeats are read every `scan_period_s` (default a quarter of the lease duration) and
at the instant another replica's Lease expires by this replica's clock, so a dead replica's shard is taken at
most `lease_duration_s` + `scan_period_s` after its last renewal (12 shards, 3 replicas: 8 requests a second).

The looks run on a thread and event loop of their own (`LeaseThread`): a replica whose main loop is busy
(starting a dead peer's hundreds of tab streams) still renews on time; a full garbage collection stops every
thread, so it waits for a renewal first (`controller.heap`). What serves stays on the main loop.

Who is alive counts in the fair share: every replica keeps a heartbeat (`shards.agentbox.dev/<digest of its
identity>`) in the annotations of the Lease `<prefix>-shards`, so one that holds no shard yet gets its share.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
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


class _LeaseRequests:
    """The Lease requests and records of `ShardLeases` (its I/O half: reads, conditional writes, what this
    replica saw of each Lease and of the heartbeats). Uses the dataclass's fields: `rest`, `namespace`,
    `prefix`, `identity`, `timings`, `requests`, `_seen`, `_members`, `_beat`, `_beat_sent`."""

    rest: Rest
    namespace: str
    prefix: str
    identity: str
    timings: ElectionTimings
    requests: int
    _seen: dict[str, _Seen]
    _members: dict[str, tuple[str, datetime]]
    _beat: int
    _beat_sent: float | None

    def _path(self, name: str | None = None) -> str:
        parts = ["apis", "coordination.k8s.io", "v1", "namespaces", self.namespace, "leases"]
        return path_of(*parts, name) if name else path_of(*parts)

    async def _get(self, name: str) -> dict[str, Any] | None:
        self.requests += 1
        lease = await asyncio.wait_for(self.rest.request("GET", self._path(name), missing_ok=True), self._timeout)
        return lease if isinstance(lease, dict) else None

    @property
    def _timeout(self) -> float:
        return max(1.0, self.timings.renew_deadline_s / 3)

    async def _write(self, name: str, lease: dict[str, Any] | None, spec: dict[str, Any],
                     annotations: dict[str, str | None] | None = None) -> dict[str, Any] | None:
        """Create the Lease (`lease` None) or replace the version read; None when another replica won (409)
        or the request failed."""
        return (await self._put(name, lease, spec, annotations))[0]

    async def _put(self, name: str, lease: dict[str, Any] | None, spec: dict[str, Any],
                   annotations: dict[str, str | None] | None = None) -> tuple[dict[str, Any] | None, int]:
        """`_write`, with the HTTP status: (answer, 200), (None, 409) when the version was not the current one,
        (None, 0) when the request failed or timed out."""
        self.requests += 1
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
            return None, 409 if exc.status == 409 else 0
        except asyncio.TimeoutError:
            logger.info("Shard Lease %s: write timed out", name)
            return None, 0
        return (answer, 200) if isinstance(answer, dict) else (None, 0)

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

    def _body(self, name: str) -> dict[str, Any] | None:
        seen = self._seen.get(name)
        return seen.body if seen is not None else None



@dataclass
class ShardLeases(_LeaseRequests):
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
        scan_period_s: seconds between reads of the shards not held and of the heartbeats (None: a quarter of
            the lease duration, at least the retry period).
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
    scan_period_s: float | None = None
    renewed_sent: dict[int, float] = field(default_factory=dict)  # shard -> monotonic s of its last renewal sent
    requests: int = 0  # Lease requests sent (reads and writes), for the bench and tests
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _next_scan: datetime | None = None
    _releasing: dict[int, float] = field(default_factory=dict)  # shards being given back -> their last renewal sent
    _writes: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)  # renewal rounds vs give-backs
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _members: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # annotation -> (value, seen change)
    _beat: int = 0
    _beat_sent: float | None = None

    # ------------------------------------------------------------------------------------------ serving
    def serves(self, shard: int) -> bool:
        """This replica holds `shard` and renewed it less than `renew_deadline_s` ago (monotonic clock).
        Safe from any thread."""
        sent = self.renewed_sent.get(shard)
        return sent is not None and time.monotonic() - sent <= self.timings.renew_deadline_s

    @property
    def served(self) -> frozenset[int]:
        """The shards served now. Safe from any thread (the looks run on the Lease thread)."""
        with self._lock:
            held = list(self.renewed_sent.items())
        now = time.monotonic()
        return frozenset(s for s, sent in held if now - sent <= self.timings.renew_deadline_s)

    def renewal_ages(self) -> list[float]:
        """Seconds since each held shard's last answered renewal was sent. Safe from any thread."""
        now = time.monotonic()
        with self._lock:
            return [now - sent for sent in self.renewed_sent.values()]

    def _held(self) -> list[int]:
        with self._lock:
            return sorted(self.renewed_sent)

    def _sent(self, shard: int, at: float | None) -> None:
        with self._lock:
            if at is None:
                self.renewed_sent.pop(shard, None)
            else:
                self.renewed_sent[shard] = at

    @property
    def _scan_period(self) -> float:
        if self.scan_period_s is not None:
            return self.scan_period_s
        return max(self.timings.retry_period_s, self.timings.lease_duration_s / 4)

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
                with self._lock:
                    held = list(self.renewed_sent.items()) + list(self._releasing.items())
                late = [s for s, sent in held if now - sent > self.timings.renew_deadline_s]
                if late:
                    self._end(1, f"No renewal of the shard Lease(s) {late} for {self.timings.renew_deadline_s:g} s")
        thread = threading.Thread(target=watch, name="shard-lease-watchdog", daemon=True)
        thread.start()
        return thread

    async def look(self) -> None:
        """One look: renew the held shards (first, at once). When a scan is due (every `scan_period_s`, and
        at the instant another replica's Lease expires): read the heartbeats and the shards not held, plan
        (`plan_shards`), then give back and take, while the held shards go on being renewed every
        `retry_period_s` (a scan's requests, each up to a request timeout, and a give-back's stop may take
        longer than the renew deadline). Every write is conditional on the version last read or answered;
        no held shard is read before its renewal."""
        now = self.clock()
        held = set(self._held())
        if self._next_scan is not None and now < self._next_scan:
            await self._renew(sorted(held), now)
            return
        done, renewed = asyncio.Event(), asyncio.Event()
        keeper = asyncio.ensure_future(self._keep_renewing(done, renewed))
        try:
            await self._scan(now, held, renewed)
        finally:
            done.set()
            await keeper

    async def _keep_renewing(self, done: asyncio.Event, renewed: asyncio.Event | None = None) -> None:
        """Renew the held shards and those being given back now and every `retry_period_s` until `done`;
        `renewed` is set once the first round ended."""
        while True:
            async with self._writes:
                with self._lock:
                    shards = sorted(set(self.renewed_sent) | set(self._releasing))
                await self._renew(shards, self.clock())
            if renewed is not None:
                renewed.set()
            try:
                await asyncio.wait_for(done.wait(), self.timings.retry_period_s)
                return
            except asyncio.TimeoutError:
                continue

    async def _scan(self, now: datetime, held: set[int], renewed: asyncio.Event) -> None:
        names = [shard_lease_name(self.prefix, i) for i in range(self.total)]
        try:
            await self._read_members(now)
            read = await asyncio.gather(*(self._get(names[i]) for i in range(self.total) if i not in held))
        except (KubeApiError, asyncio.TimeoutError) as exc:
            logger.info("Shard Leases: read failed (%s)", getattr(exc, "status", None) or type(exc).__name__)
            return
        await renewed.wait()  # the held shards' records are their renewals' answers
        fresh = iter(read)
        leases = [self._body(names[i]) if i in held else next(fresh) for i in range(self.total)]
        records = [self._record(n, lease, now) for n, lease in zip(names, leases)]
        # The next scan: a scan period from now, or the instant another replica's Lease expires by this
        # replica's clock if sooner (a dead replica's shards are taken at expiry, not up to a period later).
        expiries = [r.renewed_at + timedelta(seconds=r.duration_s) for i, r in enumerate(records)
                    if i not in held and r.holder and r.renewed_at is not None and r.live(now)]
        self._next_scan = min([now + timedelta(seconds=self._scan_period)] + expiries)
        plan = plan_shards(records, self.identity, now, self._member_beats(),
                           member_ttl_s=float(self.timings.lease_duration_s))
        before = self.served
        if plan.release:
            released = set(plan.release)
            # Given back: not served from now on, but renewed (by `_keep_renewing`) until what ran for them has
            # stopped and their Leases are emptied, so no replica may take them while it still runs.
            with self._lock:
                for shard in released:
                    self._releasing[shard] = self.renewed_sent.pop(shard, time.monotonic())
            try:
                if self.on_change is not None:
                    self.on_change()
                if self.stop_serving is not None and not await self._stopped_serving(released):
                    self._end(1, f"What ran for the shards {sorted(released)} did not stop")
                    return
                async with self._writes:  # after any renewal in flight: the version it answered
                    for shard in plan.release:
                        lease = self._body(names[shard])
                        spec = dict((lease or {}).get("spec") or {}, holderIdentity=None, leaseDurationSeconds=1)
                        if await self._write(names[shard], lease, spec) is not None:
                            logger.info("Gave the shard Lease %s back", names[shard])
                    with self._lock:  # before any later renewal round: an emptied Lease is not renewed
                        for shard in released:
                            self._releasing.pop(shard, None)
            finally:
                with self._lock:
                    for shard in released:
                        self._releasing.pop(shard, None)
        # A shard the plan keeps that this replica does not renew (a take or renewal the server applied but
        # whose answer was lost): its Lease names this replica, renewed on the version read, as a held one.
        unrenewed = [s for s in plan.renew if s not in held]
        if plan.acquire or unrenewed:
            await self._renew(unrenewed, now, acquire=plan.acquire, leases=leases, adopt=frozenset(unrenewed))
        if self.served != before and self.on_change is not None:
            self.on_change()

    async def _stopped_serving(self, shards: set[int]) -> bool:
        """`stop_serving(shards)`; False when it raised (nothing says what ran for them stopped)."""
        assert self.stop_serving is not None
        try:
            return bool(await self.stop_serving(shards))
        except Exception as exc:  # noqa: BLE001 -- the caller ends the process
            logger.warning("Shard Leases: stopping shards %s failed (%s)", sorted(shards), type(exc).__name__)
            return False

    async def _renew(self, renew: list[int], now: datetime, acquire: tuple[int, ...] = (),
                     leases: list[dict[str, Any] | None] | None = None, adopt: frozenset[int] = frozenset()) -> None:
        """Renew `renew` (held: the body is the last one answered) and take `acquire` (the body read), all at
        once: one round trip a look whatever the number of shards (one after the other, a slow API server
        made the first shard's renewals a look's duration apart). A renewal answered 409 reads the Lease: held
        by another replica now, the process ends; still this replica's (its metadata was edited), it is
        renewed again on the version read."""
        duration = int(self.timings.lease_duration_s)

        async def hold(shard: int) -> None:
            name = shard_lease_name(self.prefix, shard)
            taking = shard in acquire
            lease = leases[shard] if taking and leases is not None else self._body(name)
            for _attempt in range(2):
                spec = dict((lease or {}).get("spec") or {})
                stamp = _micro(self.clock())
                if taking:
                    spec.update(acquireTime=stamp, leaseTransitions=int(spec.get("leaseTransitions") or 0)
                                + (1 if spec.get("holderIdentity") else 0))
                spec.update(holderIdentity=self.identity, leaseDurationSeconds=duration, renewTime=stamp)
                sent = time.monotonic()
                answer, status = await self._put(name, lease, spec)
                if answer is not None:
                    with self._lock:
                        if shard in self._releasing:  # renewed, not served
                            self._releasing[shard] = sent
                        elif shard in self.renewed_sent or taking or shard in adopt:
                            self.renewed_sent[shard] = sent
                        # else: given back while this renewal was in flight; it is not served again
                    self._record(name, answer, now)
                    if taking:
                        logger.info("Acquired the shard Lease %s/%s as %s", self.namespace, name, self.identity)
                    return
                if status != 409 or taking:
                    return
                try:
                    lease = await self._get(name)
                except (KubeApiError, asyncio.TimeoutError):
                    return
                holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
                if holder != self.identity:
                    self._end(1, f"The shard Lease {name} is held by {holder} now")
                    return
                self._record(name, lease, now)

        await asyncio.gather(*(hold(shard) for shard in list(renew) + list(acquire)))

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
        with self._lock:
            held = set(self.renewed_sent)
            self._releasing.update(self.renewed_sent)  # renewed, not served, until they stopped
            self.renewed_sent.clear()
        if not held:
            return
        if self.on_change is not None:
            self.on_change()
        done = asyncio.Event()
        keeper = asyncio.ensure_future(self._keep_renewing(done))
        try:
            stopped = self.stop_serving is None or await self._stopped_serving(held)
        finally:
            done.set()
            await keeper
            with self._lock:
                for shard in held:
                    self._releasing.pop(shard, None)
        if not stopped:
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



class LeaseThread:
    """Runs one replica's `ShardLeases` on a thread of its own, on an event loop of its own.

    The main loop may be busy for seconds (a replica taking over a dead peer's shards opens hundreds of tab
    streams); the renewals must not wait for it, or the replica misses its renew deadline and ends, and its
    peers after it. The Leases' transport (`leases.rest`) must be used only from this thread: its session
    is opened on first use, on this loop. The `stop_serving` and `on_change` given to the `ShardLeases` are
    called here; wrap them with `on_loop` / `stop_on_loop` to run them on the main loop.

    A main loop that hangs must not hold its shards forever (the Lease thread would renew them for a
    replica that serves nothing): the main loop stamps a heartbeat every half second, and a thread ends the
    process (`leases.exit`) once the main loop has not run for `main_stall_s` seconds (default: three lease
    durations, at least 30 s; the pod's liveness probe, on the same loop, usually acts first).

    Use from the main loop: `await start()` (the first look, before any handler runs), then `await stop()`
    (stop serving, give every shard back, close the transport, end the thread).
    """

    BEAT_S = 0.5

    def __init__(self, leases: ShardLeases, main_stall_s: float | None = None) -> None:
        self.leases = leases
        self.loop = asyncio.new_event_loop()
        self.main_stall_s = main_stall_s if main_stall_s is not None else max(30.0, 3.0 * leases.timings.lease_duration_s)
        self.main_beat = time.monotonic()
        self._thread = threading.Thread(target=self._main, name="shard-leases", daemon=True)
        self._stopped: asyncio.Event | None = None
        self._running: Any = None
        self._beats: asyncio.Task[None] | None = None
        self._closing = threading.Event()

    async def _beat(self) -> None:
        while True:
            self.main_beat = time.monotonic()
            await asyncio.sleep(self.BEAT_S)

    def _watch_main(self) -> None:
        while not self._closing.wait(self.BEAT_S):
            stalled = time.monotonic() - self.main_beat
            if stalled > self.main_stall_s:
                self.leases._end(1, f"The event loop did not run for {stalled:.0f} s")
                return

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def _call(self, coro: Awaitable[Any]) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))  # type: ignore[arg-type]

    async def start(self) -> None:
        """Start the thread, take the first look there and wait for it, then look every retry period."""
        self._thread.start()
        self.main_beat = time.monotonic()
        self._beats = asyncio.get_running_loop().create_task(self._beat())
        threading.Thread(target=self._watch_main, name="shard-main-watchdog", daemon=True).start()
        await self._call(self.leases.look())

        async def loop() -> None:
            self._stopped = asyncio.Event()
            await self.leases.run(self._stopped)

        self._running = asyncio.run_coroutine_threadsafe(loop(), self.loop)

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Stop looking, give every held shard back (`ShardLeases.release_all`), close the transport, end the
        thread. Bounded by `timeout_s` seconds (then the thread is left to the process's exit). Idempotent."""
        async def close() -> None:
            if self._stopped is not None:
                self._stopped.set()
            if self._running is not None:
                await asyncio.wrap_future(self._running)
            await self.leases.rest.aclose()

        if self._closing.is_set() or not self._thread.is_alive():  # stopped already (or never started)
            return
        self._closing.set()
        if self._beats is not None:
            self._beats.cancel()
        try:
            await asyncio.wait_for(self._call(close()), timeout_s)
        except (asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001 -- best effort at shutdown
            logger.warning("Shard Leases: stop incomplete (%s)", type(exc).__name__)
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, 5.0)


def on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Callable[[], None]:
    """`callback`, called from any thread, run on `loop` (soon, not awaited)."""
    return lambda: loop.call_soon_threadsafe(callback)


def stop_on_loop(loop: asyncio.AbstractEventLoop, stop_serving: Callable[[set[int]], Awaitable[bool]],
                 timeout_s: float) -> Callable[[set[int]], Awaitable[bool]]:
    """`stop_serving`, awaited from another loop's thread, run on `loop`; False when it did not answer within
    `timeout_s` seconds (the main loop hung: the shards must not be given back)."""
    async def call(shards: set[int]) -> bool:
        future = asyncio.run_coroutine_threadsafe(stop_serving(shards), loop)  # type: ignore[arg-type]
        try:
            return bool(await asyncio.wait_for(asyncio.wrap_future(future), timeout_s))
        except asyncio.TimeoutError:
            future.cancel()
            return False
    return call
