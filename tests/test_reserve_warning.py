"""The reserve in words at `kubectl apply`: the chart's ValidatingAdmissionPolicy ([Warn]) on Subscriptions,
its CEL evaluated with a real CEL implementation (cel-python, as the box policy's tests do) for every reserve
the CRD admits, and compared with the sentence the controller writes to status.threshold."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from test_box_policy import vap_refusals
from test_chart import KUBE_VERSION, by_kind, render

from controller.domain.subscription import threshold_sentence
from controller.models import Reserve

pytestmark = pytest.mark.unit


def _policy(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    vap = next(d for d in by_kind(docs, "ValidatingAdmissionPolicy") if d["metadata"]["name"].endswith("-reserve-warning"))
    binding = next(d for d in by_kind(docs, "ValidatingAdmissionPolicyBinding")
                   if d["spec"]["policyName"] == vap["metadata"]["name"])
    return vap, binding


def subscription(reserve: dict[str, int] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": "anthropic", "credentialsSecretRef": {"name": "login", "key": "credentials.json"}}
    if reserve is not None:
        spec["reserve"] = reserve
    return {"apiVersion": "agentbox.dev/v1alpha1", "kind": "Subscription", "metadata": {"name": "s", "namespace": "n"},
            "spec": spec}


def warnings(vap: dict[str, Any], obj: dict[str, Any], operation: str = "CREATE") -> list[str]:
    """What `kubectl apply` prints as warnings: the messages of the failed validations (messageExpression
    evaluated with the same variables)."""
    from test_box_policy import cel_eval

    import celpy

    spec = vap["spec"]
    act = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(None),
           "request": celpy.json_to_cel({"operation": operation})}
    variables: dict[str, Any] = {}
    for var in spec["variables"]:
        variables[var["name"]] = cel_eval(var["expression"], {**act, "variables": celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})})
    vmap = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
    out = []
    for val in spec["validations"]:
        if not cel_eval(val["expression"], {**act, "variables": vmap}):
            out.append(str(cel_eval(val["messageExpression"], {**act, "variables": vmap})))
    return out


def test_policy_warns_only_and_matches_subscription_writes():
    docs = render()
    vap, binding = _policy(docs)
    assert binding["spec"]["validationActions"] == ["Warn"], "a warning, never a refusal"
    assert vap["spec"]["failurePolicy"] == "Ignore"
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["resources"] == ["subscriptions"] and rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["apiGroups"] == ["agentbox.dev"]
    for doc in (vap, binding):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    assert not [d for d in render({"reserveWarning": {"enabled": False}})
                if d["kind"].startswith("ValidatingAdmissionPolicy") and "reserve" in d["metadata"]["name"]]


@pytest.mark.parametrize("five", [0, 1, 20, 50, 95])
@pytest.mark.parametrize("weekly", [0, 5, 10, 95, None])
def test_the_warning_is_the_status_sentence(five: int, weekly: int | None):
    vap, _ = _policy(render())
    reserve = {"fiveHourPercent": five} if weekly is None else {"fiveHourPercent": five, "weeklyPercent": weekly}
    got = warnings(vap, subscription(reserve))
    expected = threshold_sentence(five, weekly or 0)
    if five == 0 and not weekly:
        assert got == [], "no reserve: nothing to say"
    else:
        assert got == [expected]
    assert warnings(vap, subscription(reserve), "UPDATE") == got


def test_no_reserve_field_is_silent_and_bounds_are_the_crds():
    vap, _ = _policy(render())
    assert warnings(vap, subscription(None)) == []
    assert warnings(vap, subscription({})) == []
    assert warnings(vap, subscription({"weeklyPercent": 30})) == [threshold_sentence(0, 30)]
    # The CRD bounds the percents (0-95), so the sentence never says "at 0%".
    assert Reserve.model_fields["five_hour_percent"].metadata[-1].le == 95


def test_the_box_policy_evaluator_sees_no_refusal_here():
    """Under [Warn] a failed validation is only a warning; evaluated as h2's Deny evaluator would, it is the
    one validation that 'fails', with the sentence as its message."""
    vap, _ = _policy(render())
    spec = {**vap["spec"], "validations": [dict(v, message="reserve set") for v in vap["spec"]["validations"]]}
    assert vap_refusals(spec, subscription({"fiveHourPercent": 20})) == ["reserve set"]
    assert vap_refusals(spec, subscription(None)) == []
