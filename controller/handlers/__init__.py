"""kopf handlers (the only place with @kopf.on...). Importing this package registers them."""

from controller.handlers import boxes, startup, subscriptions  # noqa: F401
