"""The operator's own kopf registry: handlers register here explicitly, never in kopf's process-wide
default (which a test or an embedding program may replace)."""

import kopf

REGISTRY = kopf.OperatorRegistry()


def run_daemons_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """Make the registry's daemons run without kopf's finalizer.

    kopf 1.45's ``@kopf.daemon`` always declares ``requires_finalizer=True`` (so it can stop daemons
    before the object goes) and offers no option; our daemons instead stop themselves once the object is
    gone (``run_passes(alive=...)``), so the handlers are re-registered with ``requires_finalizer=False``.
    With no handler requiring it, kopf also removes the finalizer that an older version put on objects.
    Relies on kopf's registry internals (``_spawning._handlers``, frozen dataclasses): kopf is pinned in
    pyproject.toml and tests/test_finalizers.py fails if this stops working.
    """
    import dataclasses

    spawning = registry._spawning  # noqa: SLF001 - no public way in kopf 1.45
    spawning._handlers = [dataclasses.replace(h, requires_finalizer=False)  # noqa: SLF001
                          for h in spawning._handlers]  # noqa: SLF001
