"""The operator's own kopf registry: handlers register here explicitly, never in kopf's process-wide
default (which a test or an embedding program may replace)."""

import kopf

REGISTRY = kopf.OperatorRegistry()
