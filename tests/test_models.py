"""Model-level validation that the CRD schema cannot express (reported as InvalidSpec naming the field)."""

import pytest
from pydantic import ValidationError

from controller.models import AgentBoxSpec
from controller.models import validation_message

pytestmark = pytest.mark.unit


def test_unknown_time_zone_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as err:
        AgentBoxSpec.model_validate({"agent": "claude-code", "template": {}, "timeZone": "Europe/Pariss"})
    assert validation_message(err.value).startswith("spec.timeZone: ")
    assert "unknown time zone 'Europe/Pariss'" in validation_message(err.value)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "Asia/Calcutta", "Etc/GMT+5", None])
def test_known_and_legacy_zones_are_accepted(zone):
    spec = AgentBoxSpec.model_validate({"agent": "claude-code", "template": {}, "timeZone": zone})
    assert spec.time_zone == zone
