"""kopf handlers (the only place with @kopf.on...). Importing this package registers them in
`REGISTRY` (controller.handlers.registry), which `run` and the emulated world pass to kopf."""

from controller.handlers import boxes, startup, subscriptions  # noqa: F401
from controller.handlers.registry import REGISTRY  # noqa: F401
