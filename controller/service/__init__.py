"""Application services: reconcile boxes and subscriptions, watch tabs. Called by the kopf handlers."""
