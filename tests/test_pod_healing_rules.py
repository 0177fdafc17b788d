"""What to do with a box pod (controller.domain.podheal), table-tested."""

import pytest

from controller.constants import ANNOTATION_TEMPLATE_HASH
from controller.domain.podheal import decide_pod, template_hash

pytestmark = pytest.mark.unit

T = {"spec": {"containers": [{"name": "box", "image": "a"}]}}
H = template_hash(T)


def pod(phase="Running", hash_=H, deleting=False, reason=None):
    meta = {"name": "b", "annotations": {ANNOTATION_TEMPLATE_HASH: hash_} if hash_ else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase, **({"reason": reason, "message": "low on memory"} if reason else {})}
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize("p,policy,idle,deleting,action,reason,out", [
    (None, "OnDelete", True, False, "create", "PodMissing", False),
    (None, "OnDelete", True, True, "none", "", False),                        # the box itself is going
    (pod(deleting=True), "OnDelete", True, False, "none", "PodTerminating", False),
    (pod("Failed", reason="Evicted"), "OnDelete", False, False, "delete", "PodFailed", False),
    (pod("Succeeded"), "OnDelete", False, False, "delete", "PodFailed", False),
    (pod(), "OnDelete", True, False, "none", "", False),
    (pod(hash_=None), "WhenIdle", True, False, "none", "", False),            # made before the hash existed
    (pod(hash_="old"), "OnDelete", True, False, "none", "", True),
    (pod(hash_="old"), "WhenIdle", False, False, "none", "", True),           # a tab works: wait
    (pod(hash_="old"), "WhenIdle", True, False, "delete", "TemplateChanged", True),
])
def test_decide_pod(p, policy, idle, deleting, action, reason, out):
    d = decide_pod(p, "b", H, policy, idle, deleting)
    assert (d.action, d.reason, d.out_of_date) == (action, reason, out), d.message


def test_evicted_message_carries_the_kubelet_reason_bounded():
    d = decide_pod(pod("Failed", reason="Evicted" + "x" * 500), "b", H, "OnDelete", True, False)
    assert "Evicted" in d.message and len(d.message) < 500


def test_template_hash_is_stable_and_order_free():
    assert template_hash({"a": 1, "b": [1, 2]}) == template_hash({"b": [1, 2], "a": 1})
    assert template_hash({"a": 1}) != template_hash({"a": 2})
