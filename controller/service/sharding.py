"""Which objects this replica serves with `shards > 1`, and stopping what runs for a shard it gives back.

The shard of an AgentBox comes from `settings.shard_by` (`hash`: the SHA-256 of `namespace/name`; `label`:
its `settings.shard_label`); a Subscription's always from the hash, so its usage reader and login keeper run
in exactly one replica whatever shards its boxes are in. `served()` says which shards this replica holds
(`controller.kube.shardleases.ShardLeases.served`). With `shards` 1 there is no `Sharding` at all
(`Runtime.sharding` is None): every object is served, as without sharding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import constants as C
from controller.domain.shards import BadShardLabel, shard_of, shard_of_labels

logger = logging.getLogger("agentbox.shards")

STOP_TIMEOUT_S = 5.0
"""Longest wait for what runs for a shard given back to end after its cancellation, seconds."""


@dataclass
class Sharding:
    """This replica's view of the shards.

    Args:
        total: the number of shards (> 1).
        by: `hash` or `label` (AgentBoxes; Subscriptions always by hash).
        label: the shard label of the `label` mode.
        served: returns the shards this replica serves now.
    """

    total: int
    by: str = "hash"
    label: str = "agentbox.dev/shard"
    served: Callable[[], Collection[int]] = frozenset
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _serving: dict[tuple[str, str, str], tuple[int, asyncio.Task[Any]]] = field(default_factory=dict)

    def shard(self, plural: str, namespace: str, name: str,
              labels: Mapping[str, str] | None = None) -> int | BadShardLabel:
        """The shard of object `plural` `namespace/name` (its labels for the label mode)."""
        if plural == C.AGENTBOX_PLURAL and self.by == "label":
            return shard_of_labels(labels, self.label, self.total)
        return shard_of(namespace, name, self.total)

    def serves(self, plural: str, namespace: str, name: str, labels: Mapping[str, str] | None = None) -> bool:
        """This replica serves the object now (it holds the Lease of its shard)."""
        shard = self.shard(plural, namespace, name, labels)
        return not isinstance(shard, BadShardLabel) and shard in self.served()

    def running(self, plural: str, namespace: str, name: str) -> bool:
        """Work for the object runs here (`serve`), also while it is being stopped after a give-back."""
        return (plural, namespace, name) in self._serving

    def changed(self) -> None:
        """The served shards changed: wake every daemon waiting for its shard."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_served(self, plural: str, namespace: str, name: str, labels: Callable[[], Mapping[str, str] | None],
                          stopped: Any, gone: Callable[[], bool] = lambda: False, recheck_s: float = 1.0,
                          idle_recheck_s: float = 30.0) -> bool:
        """Wait until this replica serves the object: True then; False once `stopped` (kopf's DaemonStopped) is
        set or `gone()` says the object was deleted.

        A look ends the wait early when the served shards change (`changed`) or `stopped` is set. Otherwise,
        with shards by label, the labels are read again (`labels()`: the live body's) every `recheck_s`
        seconds; with shards by hash an object's shard never changes, so the wait looks again only every
        `idle_recheck_s` seconds (for `gone()`: a deletion the watch missed). Each replica runs a daemon for
        every object, most of them waiting here: at 10,000 boxes on 3 replicas (bench/shards.py) the 7,300
        waiting daemons of each replica woke every second, 35 % of its CPU (py-spy), and the last boxes
        created waited minutes for their first reconcile behind them."""
        timeout = recheck_s if self.by == "label" else idle_recheck_s
        while not self.serves(plural, namespace, name, labels()):
            if stopped or gone():
                return False
            waits = [asyncio.ensure_future(self._changed.wait())]
            stop = _stop_wait(stopped)
            if stop is not None:
                waits.append(stop)
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        return not stopped

    async def serve(self, plural: str, namespace: str, name: str, shard: int,
                    work: Coroutine[Any, Any, Any]) -> Any:
        """Run `work` for the object while this replica serves `shard`: its result when it ended by itself,
        None when it was cancelled because the shard was given back (`stop_serving`). A cancellation of the
        caller cancels `work` too; an error of `work` is raised."""
        task = asyncio.ensure_future(work)
        key = (plural, namespace, name)
        self._serving[key] = (shard, task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            if self._serving.get(key, (None, None))[1] is task:
                del self._serving[key]
        if task.cancelled():
            return None
        return task.result()

    def relabeled(self, plural: str, namespace: str, name: str, labels: Mapping[str, str] | None) -> bool:
        """The object's labels as its watch delivered them (label mode): when they put it in another shard than
        the one its work runs for here, cancel that work now (as `stop_serving` does for a shard given back: an
        action cut half-way is completed from its journal by the new owner), instead of letting a pass of the
        old owner that waits (an armed continue) go on after the new owner started. True when it was
        cancelled; the daemon then waits until this replica serves the object again (`wait_served`)."""
        running = self._serving.get((plural, namespace, name))
        if running is None or self.shard(plural, namespace, name, labels) == running[0]:
            return False
        running[1].cancel()
        logger.info("Stopped serving %s/%s: relabelled out of shard %s", namespace, name, running[0])
        return True

    async def stop_serving(self, shards: set[int]) -> bool:
        """Stop what runs for the objects of `shards` (cancelled, as a kill would: an action cut half-way is
        completed from its journal by the next owner) and return once it ended: True, or False when some of
        it still ran after `STOP_TIMEOUT_S` seconds (then the shards must not be given back)."""
        tasks = [task for shard, task in list(self._serving.values()) if shard in shards]
        for task in tasks:
            task.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
            if pending:
                logger.warning("%d daemons of the shards given back did not stop within %g s", len(pending),
                               STOP_TIMEOUT_S)
                return False
            logger.info("Stopped serving shards %s (%d objects)", sorted(shards), len(done))
        return True


def _stop_wait(stopped: Any) -> "asyncio.Future[Any] | None":
    """A future done once kopf's DaemonStopped `stopped` is set (`await stopped.wait()`), or None for a flag
    that cannot be awaited (the caller then reads it at each look)."""
    wait = getattr(stopped, "wait", None)
    if wait is None:
        return None
    try:
        return asyncio.ensure_future(wait())
    except (NotImplementedError, TypeError):
        return None
