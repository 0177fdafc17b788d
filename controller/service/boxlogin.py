"""A box's login, as its decisions change it: install a subscription's login, remove it, and move the box to
another subscription (journaled in ``status.switch``, so a controller killed mid-switch completes it).

Touches: the subscription's login (through the runtime's shared loader, `Runtime.logins`), the box's own
credentials Secret, the agent's live login file (`controller.service.boxfiles`), the box's status fields
through the executor's status writer, and the interrupt keys of the tabs a switch stops. A login's text never
reaches a log line or an exception.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Mapping

from controller.domain.box import Done, InstallLogin, SwitchSubscription, switch_patches
from controller.kube.objects import make_box_secret
from controller.service import boxfiles
from controller.terminal.session import BoxTerminal

log = logging.getLogger("agentbox.executor")


async def subscription_login(rt: Any, namespace: str, subscription: str) -> tuple[str, str, Any] | None:
    """(provider, login file text, parsed Login) of a subscription; None when unusable
    (:func:`controller.service.loginload.load_login_of`; simultaneous loads of one subscription by
    several boxes share one read started after each asked: `SharedLogins`)."""
    loaded = await rt.logins.load(rt.kube, namespace, subscription)
    if not loaded.usable:
        return None
    return loaded.provider, loaded.text or "", loaded.login


class BoxLogins:
    """Installs, removes and switches the login of one box.

    Args:
        rt: runtime (kube, the shared login loader).
        namespace, name, uid: the box (its credentials Secret is owned by it through ``uid``).
        adapter: the box's agent adapter (login Secret key, login file argv, interrupt keys).
        term: the box terminal (its exec).
        write: writes status fields now through the box's one status writer.
        press: `async (pane, keys)`: presses keys in a tab (the interrupt of a switch).
    Attributes:
        switch_written: ``status.switch`` as written ahead by a switch not finished yet (None otherwise).
    """

    def __init__(self, rt: Any, namespace: str, name: str, uid: str | None, adapter: Any, term: BoxTerminal,
                 write: Callable[[dict[str, Any]], Awaitable[None]],
                 press: Callable[[str, tuple[str, ...]], Awaitable[None]]) -> None:
        self.rt, self.namespace, self.name, self.uid = rt, namespace, name, uid
        self.adapter, self.term, self.write, self.press = adapter, term, write, press
        self.switch_written: Mapping[str, Any] | None = None

    async def put_login(self, text: str) -> None:
        """Write a login into the box credentials Secret and the agent's live login file.

        Raises:
            NoLoginFile: the agent has no login Secret key (nothing is written).
            BoxFileError, the API error: the write failed.
        """
        body = {"metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}
        await self.rt.kube.ensure_secret(make_box_secret(body, self.adapter.login_secret_key(), text))
        await boxfiles.write_login(self.term.exec_fn, self.adapter, text)

    async def remove(self) -> None:
        """Remove the agent's live login file (`RemoveLogin`); a failure is logged, never raised."""
        try:
            await boxfiles.remove_login(self.term.exec_fn, self.adapter)
        except boxfiles.BoxFileError as exc:
            log.warning("Box %s/%s: %s", self.namespace, self.name, exc)

    async def install(self, action: InstallLogin) -> Done:
        """Install the subscription's login in the box (Secret and live file); not ok when it is unusable."""
        login = await subscription_login(self.rt, self.namespace, action.subscription)
        if login is None:
            return Done(False)
        await self.put_login(login[1])
        return Done(True)

    async def switch(self, action: SwitchSubscription) -> Done:
        """Move the box to `action.new`, journaled in status.switch (a controller killed mid-switch finds it
        and completes it). Nothing changes when the new login is unusable."""
        login = await subscription_login(self.rt, self.namespace, action.new)
        if login is None:
            return Done(False)
        started, installing, finished = switch_patches(action)
        await self.write(started)
        self.switch_written = started["switch"]
        for _, pane in action.stop:
            await self.press(pane, self.adapter.interrupt_keys)
        await self.write(installing)
        self.switch_written = installing["switch"]
        await self.put_login(login[1])
        await self.write(finished)
        self.switch_written = None
        return Done(True)
