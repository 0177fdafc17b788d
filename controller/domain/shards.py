"""Shards: which shard an object belongs to, and which shard Leases a replica takes, renews and gives back.

Pure: values in, values out, `now` passed in (UTC instants, durations in seconds). The Lease I/O
(`controller.kube.shardleases`) turns the API's Lease objects into `LeaseRecord`s and performs the plan
with optimistic concurrency (a 409 means another replica won the shard), so two replicas acting on the same
records never both hold a shard: a shard is only ever acquired when it is free or expired, and a write
conditional on the version read decides between two that try at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


def shard_of(namespace: str, name: str, total: int) -> int:
    """The shard (0 .. total-1) of the object `namespace/name` by a stable hash: the first 8 bytes of the
    SHA-256 of "namespace/name", modulo `total`. The same in every process and Python version (unlike
    `hash()`, salted per process). `total` < 1 counts as 1."""
    if total <= 1:
        return 0
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % total


@dataclass(frozen=True)
class BadShardLabel:
    """An object whose shard label is missing or not an integer in 0 .. total-1: no replica serves it until
    it is fixed. `message` names the label and the value (labels hold no credentials)."""

    message: str


def shard_of_labels(labels: Mapping[str, str] | None, label_key: str, total: int) -> int | BadShardLabel:
    """The shard given by the object's label `label_key` (label mode): its value as a decimal integer in
    0 .. total-1, else a `BadShardLabel` saying what is wrong."""
    value = (labels or {}).get(label_key)
    if value is None:
        return BadShardLabel(f"label {label_key} is missing (shards are 0..{total - 1})")
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        return BadShardLabel(f"label {label_key}={value!r} is not a shard number (0..{total - 1})")
    shard = int(text)
    if shard >= total:
        return BadShardLabel(f"label {label_key}={value!r} is out of range (0..{total - 1})")
    return shard


@dataclass(frozen=True)
class LeaseRecord:
    """One shard's Lease as this replica judges it.

    holder: the holder identity, "" or None when free (released, or never held).
    renewed_at: the UTC instant from which the holder's lease runs: the instant this replica saw the record
        change (its own clock, as client-go judges: the writer's clock is not trusted), or None when free.
    duration_s: the Lease's spec.leaseDurationSeconds, seconds.
    """

    holder: str | None
    renewed_at: datetime | None
    duration_s: float

    def live(self, now: datetime) -> bool:
        """Held and not expired at `now`: someone holds it and `duration_s` has not passed since `renewed_at`."""
        if not self.holder or self.renewed_at is None:
            return False
        return now - self.renewed_at < timedelta(seconds=self.duration_s)


FREE = LeaseRecord(None, None, 0)


@dataclass(frozen=True)
class ShardPlan:
    """What one replica does with the shard Leases at one look (shard numbers, ascending).

    acquire: free or expired shards to take (each may be lost to another replica: a 409).
    renew: shards it holds and keeps.
    release: shards it holds and gives back (it stops serving them first), to replicas under their share.
    """

    acquire: tuple[int, ...] = ()
    renew: tuple[int, ...] = ()
    release: tuple[int, ...] = ()

    @property
    def serving(self) -> tuple[int, ...]:
        """The shards this replica may serve after the plan, if every write succeeds: renewed and acquired."""
        return tuple(sorted(self.renew + self.acquire))


def live_replicas(leases: Sequence[LeaseRecord], identity: str, now: datetime,
                  members: Mapping[str, datetime] | None = None, member_ttl_s: float = 0.0) -> list[str]:
    """The replicas alive at `now`, sorted: this one, every holder of a live Lease, and every member whose
    heartbeat this replica saw change less than `member_ttl_s` seconds before `now` (`members`: identity ->
    UTC instant of its last seen change)."""
    alive = {identity} | {r.holder for r in leases if r.holder and r.live(now)}
    for member, seen in (members or {}).items():
        if member and now - seen < timedelta(seconds=member_ttl_s):
            alive.add(member)
    return sorted(alive)


def fair_share(identity: str, replicas: Collection[str], total: int) -> int:
    """How many of `total` shards `identity` should hold among `replicas` (alive, including it): total //
    n each, and one more for the first total % n identities in sorted order. The shares add up to `total`."""
    ordered = sorted(set(replicas) | {identity})
    base, extra = divmod(total, len(ordered))
    return base + (1 if ordered.index(identity) < extra else 0)


def _start(identity: str, total: int) -> int:
    """Where this replica starts looking for a free shard (replicas starting together spread out)."""
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:4], "big") % total


def plan_shards(leases: Sequence[LeaseRecord], identity: str, now: datetime,
                members: Mapping[str, datetime] | None = None, member_ttl_s: float = 0.0) -> ShardPlan:
    """The Lease-claim rule for one replica at `now` (UTC).

    Args:
        leases: one record per shard, index = shard number (`FREE` for a Lease that does not exist yet).
        identity: this replica's holder identity.
        now: the instant judged at (UTC).
        members: other replicas' heartbeats (identity -> UTC instant its heartbeat was seen to change), so a
            replica that holds nothing yet counts in the fair share; `member_ttl_s`: seconds a heartbeat counts.
    Returns:
        A `ShardPlan`: it renews what it holds up to its fair share; above it (another replica is alive and
        under its share) it gives back its highest shards; below it, it takes free or expired shards (never a
        live one held by another replica), starting at a place of its own so that replicas starting at
        once rarely reach for the same shard.
    """
    total = len(leases)
    if total == 0:
        return ShardPlan()
    replicas = live_replicas(leases, identity, now, members, member_ttl_s)
    share = fair_share(identity, replicas, total)
    held = [i for i, r in enumerate(leases) if r.holder == identity and r.live(now)]
    if len(held) > share:
        keep = held[:share]
        return ShardPlan(renew=tuple(keep), release=tuple(held[share:]))
    start = _start(identity, total)
    order = [(start + k) % total for k in range(total)]
    takeable = [i for i in order if not leases[i].live(now)]
    acquire = tuple(sorted(takeable[:share - len(held)]))
    return ShardPlan(acquire=acquire, renew=tuple(held))
