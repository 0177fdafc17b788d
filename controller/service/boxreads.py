"""The reads a box's decision asks for and waits on: the subscription's usage, whether the box's tmux session
exists, and the agent's structured usage files. Each answer is a raw fact for the next `decide`
(`UsageRead`, `SessionSeen`, `StructuredRead`); a failed read is an answer too (unknown), never raised.

Touches: the subscription's login (through the runtime's shared loader) and the runtime's usage cache (the
provider's usage API), and the box container's exec (read only). A login is only sent to its own provider's
API; tokens never reach a log line.
"""

from __future__ import annotations

import logging
from typing import Any

from controller import metrics
from controller.domain.box import ReadStructured, ReadUsage, SessionSeen, StructuredRead, UsageRead
from controller.service import boxfiles
from controller.service.boxlogin import subscription_login
from controller.terminal import tmux
from controller.terminal.session import BoxTerminal

log = logging.getLogger("agentbox.executor")


class BoxReads:
    """Reads facts about one box for its decision.

    Args:
        rt: runtime (the shared login loader, the usage cache, the clock).
        namespace, name: the box.
        term: the box terminal (its exec).
    """

    def __init__(self, rt: Any, namespace: str, name: str, term: BoxTerminal) -> None:
        self.rt, self.namespace, self.name, self.term = rt, namespace, name, term

    async def usage(self, action: ReadUsage) -> UsageRead:
        """The subscription's usage from `action.provider`'s API, no older than the action allows, and the
        provider of the login it was read with (`UsageRead`, raw: the decision says what counts,
        `controller.domain.box.usage_known`). A login of another provider is not sent to that API (the call
        cannot be made with it): usage None, its provider said. A failed read: usage None."""
        provider = action.provider
        login_provider: str | None = None
        usage: Any = None
        try:
            found = await subscription_login(self.rt, self.namespace, action.subscription)
            login_provider = found[0] if found is not None else None
            if found is not None and login_provider == provider:
                usage = await self.rt.usage.get((self.namespace, action.subscription), provider, found[2],
                                                max_age_s=action.max_age_s, now=self.rt.clock)
                metrics.USAGE_READS.labels(provider, "ok").inc()
        except Exception as exc:  # noqa: BLE001 - a failed read is no usage (the decision: unknown)
            metrics.USAGE_READS.labels(provider, "error").inc()
            log.info("Box %s/%s: usage read failed (%s)", self.namespace, self.name, type(exc).__name__)
        return UsageRead(usage, self.rt.clock(), login_provider)

    async def session(self) -> SessionSeen:
        """`tmux has-session` in the box container; unknown (None) when the exec itself failed."""
        try:
            result = await self.term.exec_fn(tmux.has_session_argv())
        except Exception as exc:  # noqa: BLE001 - exec transport errors: unknown, retried next scan
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return SessionSeen(None)
        return SessionSeen(result.rc == 0)

    async def structured(self, action: ReadStructured) -> StructuredRead:
        """The agent's structured usage files (`boxfiles.read_structured`); a failed exec is `failed`."""
        problems: list[str] = []
        try:
            usage, source = await boxfiles.read_structured(self.term.exec_fn, action.agent, action.now, problems)
        except Exception as exc:  # noqa: BLE001 - no structured data is a normal case
            log.debug("Box %s/%s: no structured usage (%s)", self.namespace, self.name, type(exc).__name__)
            return StructuredRead(None, failed=True)
        return StructuredRead(usage, source, tuple(problems))
