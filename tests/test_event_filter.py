"""The sharded watch-event filter of the box-event handler (`controller.handlers.daemons.events_here`): with shards
by hash a replica's handler gets only the events of the boxes it serves, still runs work for, or that were
deleted; without shards, or by label, every event."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import kopf
import pytest

from controller import constants as C
from controller.domain.shards import shard_of
from controller.handlers.daemons import events_here
from controller.service.sharding import Sharding

pytestmark = pytest.mark.unit

NS, TOTAL = "team-a", 4


def body(name: str) -> kopf.Body:
    return kopf.Body({"metadata": {"namespace": NS, "name": name, "labels": {"agentbox.dev/shard": "0"}}})


def box_in(shard: int) -> str:
    return next(f"box-{i}" for i in range(1000) if shard_of(NS, f"box-{i}", TOTAL) == shard)


def memo(sharding: Sharding | None) -> SimpleNamespace:
    return SimpleNamespace(runtime=SimpleNamespace(sharding=sharding))


def test_hash_shards_pass_only_served_running_or_deleted_boxes() -> None:
    when = events_here(C.AGENTBOX_PLURAL)
    sharding = Sharding(TOTAL, served=lambda: {1})
    served, other = box_in(1), box_in(2)
    assert when(body=body(served), memo=memo(sharding), type="MODIFIED")
    assert not when(body=body(other), memo=memo(sharding), type="MODIFIED")
    assert not when(body=body(other), memo=memo(sharding), type=None)  # kopf's initial listing
    assert when(body=body(other), memo=memo(sharding), type="DELETED")

    async def running() -> None:  # its work still runs here (given back, being stopped): its events pass
        task = asyncio.ensure_future(asyncio.sleep(10))
        sharding._serving[(C.AGENTBOX_PLURAL, NS, other)] = (2, task)
        try:
            assert when(body=body(other), memo=memo(sharding), type="MODIFIED")
        finally:
            task.cancel()
    asyncio.run(running())


def test_no_shards_or_label_shards_pass_every_event() -> None:
    when = events_here(C.AGENTBOX_PLURAL)
    assert when(body=body(box_in(2)), memo=memo(None), type="MODIFIED")
    assert when(body=body(box_in(2)), memo=memo(Sharding(TOTAL, by="label", served=lambda: {1})), type="MODIFIED")
