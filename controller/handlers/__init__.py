"""kopf handlers (the only place with @kopf.on...). Importing this package registers them in
`REGISTRY` (controller.handlers.registry), which `run` and the emulated world pass to kopf."""

from controller.handlers import boxes, startup, subscriptions  # noqa: F401
from controller.handlers.registry import REGISTRY, run_daemons_without_finalizer

# No finalizer on AgentBoxes or Subscriptions: nothing must happen before they go (children are
# garbage-collected through owner references), and a finalizer left by an uninstalled controller
# keeps boxes, subscriptions, their namespaces and the CRDs Terminating. See docs/operations.md.
run_daemons_without_finalizer(REGISTRY)
