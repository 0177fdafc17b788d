"""A whole emulated world in one process tree: the Kubernetes API emulator (with pod exec into
per-pod tmux servers), the provider usage emulator, the real kopf operator in its own thread, and
a "kubelet" that starts box pods as tmux sessions whose tabs run scripted (or real) agents.

Used by the component tests and by `agentbox-controller demo`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import aiohttp

from controller import constants as C
from controller.crdgen import render_crds
from controller.settings import Settings
from agentbox_sim.kube import KubeEmulator, LocalExec, TmuxSockets
from agentbox_sim.provider import ProviderEmulator


def claude_login(token: str, expires_at_ms: int = 4102444800000) -> str:
    """A Claude Code `.credentials.json` for the emulator (default: a far-future expiry, so the controller
    never refreshes it; `expires_at_ms` in Unix epoch milliseconds)."""
    return json.dumps({"claudeAiOauth": {
        "accessToken": token, "refreshToken": f"{token}-refresh", "expiresAt": expires_at_ms,
        "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}})


def codex_login(token: str, account: str) -> str:
    """A Codex `auth.json` in ChatGPT mode for the emulator."""
    return json.dumps({"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": {
        "id_token": "x.y.z", "access_token": token, "refresh_token": f"{token}-refresh", "account_id": account},
        "last_refresh": "2026-01-01T00:00:00Z"})


class PodExec(LocalExec):
    """LocalExec whose commands see the pod's sandbox directory as $HOME (the pod's own filesystem)."""

    async def __call__(self, namespace: str, pod: str, container: str, argv: list[str],
                       stdin: bytes | None) -> tuple[bytes, bytes, int]:
        # Set just before the call: LocalExec reads `env` synchronously before its first await.
        self.env = {**os.environ, "HOME": str(self.workdir(namespace, pod))}
        return await super().__call__(namespace, pod, container, argv, stdin)

    async def spawn(self, namespace: str, pod: str, container: str, argv: list[str]) -> Any:
        """A streamed exec (stdin open) with the same $HOME."""
        self.env = {**os.environ, "HOME": str(self.workdir(namespace, pod))}
        return await super().spawn(namespace, pod, container, argv)


@dataclass
class TabSpec:
    """One tab of an emulated box pod: its tmux window name and the command typed at its shell."""

    name: str
    command: list[str]


@dataclass
class World:
    """The emulated environment. Use `async with World(workdir, settings) as w:`.

    Attributes:
        workdir: scratch directory (pod sandboxes, logs, kubeconfig).
        settings: operator settings (short intervals for tests and the demo).
        namespace: the namespace the operator watches.
        memo: the kopf memo of the operator started last (its `runtime` once started), None before.
    """

    workdir: pathlib.Path
    settings: Settings
    namespace: str = "default"
    kube: KubeEmulator = field(init=False)
    provider: ProviderEmulator = field(init=False)
    sockets: TmuxSockets = field(init=False)
    local_exec: LocalExec = field(init=False)
    kubeconfig: pathlib.Path = field(init=False)
    _session: aiohttp.ClientSession | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event | None = None
    _operator_error: BaseException | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _killed: bool = False
    _kill_flag: threading.Event | None = None
    _zombies: list[threading.Thread] = field(default_factory=list)
    kubelet: Any = None
    memo: Any = None

    def __post_init__(self) -> None:
        # Absolute: pods' processes run with their sandbox as working directory, so a relative path
        # (e.g. `bench/faults.py --workdir tmp/x`) would point their log and state files elsewhere.
        self.workdir = pathlib.Path(self.workdir).resolve()

    async def start_kubelet(self, images: dict[str, Any], **options: Any) -> Any:
        """Let the kubelet model (agentbox_sim.kubelet) run the pods of images it knows, as a node
        would: volumes, the container's user, restarts, containerStatuses, exec inside the container.
        Needs root (see `kubelet_unavailable`). Returns the Kubelet."""
        from agentbox_sim.kubelet import Kubelet, KubeletExec

        self.kubelet = Kubelet(self.kube, images, self.workdir / "kubelet", **options)
        self.kube.exec_handler = KubeletExec(self.kubelet, self.local_exec)
        await self.kubelet.start()
        return self.kubelet

    async def __aenter__(self) -> "World":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the API emulator and the provider emulator (not the operator)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sockets = TmuxSockets()
        self.local_exec = PodExec(self.workdir / "pods", self.sockets, timeout=30.0)
        self.kube = KubeEmulator([], exec_handler=self.local_exec, namespaces=(self.namespace,))
        for crd in render_crds().values():
            self.kube.add_crd(crd)
        await self.kube.start()
        self.provider = ProviderEmulator()
        await self.provider.start()
        self.kubeconfig = self.kube.write_kubeconfig(self.workdir / "kubeconfig")
        self.settings = self.settings.model_copy(update={
            "anthropic_base_url": self.provider.url, "openai_base_url": self.provider.url, "metrics_port": 0})
        self._session = aiohttp.ClientSession(base_url=self.kube.url)

    async def stop(self) -> None:
        """Stop the operator, the emulators and every tmux server."""
        await self.stop_operator()
        for thread in self._zombies:
            await asyncio.to_thread(thread.join, 40)
        if self.kubelet is not None:
            await self.kubelet.stop()
        if self._session:
            await self._session.close()
        await self.provider.stop()
        await self.kube.stop()
        self.sockets.close()

    # ------------------------------------------------------------------ operator
    def start_operator(self) -> None:
        """Run the real kopf operator (our handlers) in its own thread and event loop."""
        import kopf

        from controller.handlers import REGISTRY

        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        # This operator's own flags: a killed predecessor whose loop runs its kill steps late (a loaded
        # machine) sets its own stop flag, never this one (tests/test_world_restart.py).
        stop = self._stop = threading.Event()
        killed = self._kill_flag = threading.Event()
        self._killed = False
        ready = threading.Event()
        memo = self.memo = kopf.Memo(settings=self.settings, kubeconfig=str(self.kubeconfig), no_metrics=True)

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            await kopf.operator(registry=REGISTRY, standalone=True, namespaces=[self.namespace], memo=memo,
                                stop_flag=stop, ready_flag=ready)

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(main())
            except BaseException as exc:  # noqa: BLE001 - surfaced by stop_operator()
                if not killed.is_set():
                    self._operator_error = exc
                ready.set()
            finally:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.wait(pending, timeout=10))
                loop.run_until_complete(loop.shutdown_asyncgens())
                if not killed.is_set():  # a graceful stop waits for calls in flight; a killed process does not
                    loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        self._thread = threading.Thread(target=run, name="kopf-operator", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the operator did not start within 30 s")
        if self._operator_error:
            raise RuntimeError("the operator failed to start") from self._operator_error

    def kill_operator_now(self) -> None:
        """Kill the operator as SIGKILL would, from any thread: every task of its event loop is cancelled
        at once (nothing after its current await runs; no graceful stop). Join with `kill_operator()`."""
        loop = self._loop
        if loop is None or self._thread is None or self._killed:
            return
        self._killed = True
        # The flags of the operator killed now: the steps below may run after a restart replaced them.
        stop, killed = self._stop, self._kill_flag
        if killed is not None:
            killed.set()

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            # kopf shields parts of its own shutdown from cancellation: its stop flag ends those, and
            # tasks its shutdown spawns (the Event poster's scheduler close) are cancelled again below.
            if stop is not None:
                stop.set()

        def again() -> None:
            cancel_all()
            for delay in (0.05, 0.2, 0.5, 1.0):
                loop.call_later(delay, cancel_all)
        loop.call_soon_threadsafe(again)

    async def kill_operator(self) -> None:
        """`kill_operator_now()`, then forget the operator. Its thread gets 2 s to end; kopf shields its
        Event poster's shutdown from cancellation (up to ~30 s), which a SIGKILL would not wait for, so a
        thread still ending is left to finish on its own (joined by `stop()`); none of our handlers runs
        in it any more (every task was cancelled)."""
        self.kill_operator_now()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2)
            if self._thread.is_alive():
                self._zombies.append(self._thread)
            self._thread = None
        self._loop = None

    async def stop_operator(self) -> None:
        """Stop the operator thread (as a controller restart would) and wait for it."""
        if self._thread is None or self._stop is None:
            return
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)
        self._thread = None

    # ------------------------------------------------------------------ API over HTTP
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST an object to the API emulator (e.g. path '/api/v1/namespaces/default/secrets')."""
        assert self._session is not None
        async with self._session.post(path, json=body) as resp:
            data = await resp.json()
            if resp.status >= 300:
                raise RuntimeError(f"POST {path} -> {resp.status}: {data.get('message')}")
            return data

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge-PATCH an object over HTTP."""
        assert self._session is not None
        async with self._session.patch(path, json=body,
                                       headers={"Content-Type": "application/merge-patch+json"}) as resp:
            data = await resp.json()
            if resp.status >= 300:
                raise RuntimeError(f"PATCH {path} -> {resp.status}: {data.get('message')}")
            return data

    async def delete(self, path: str) -> None:
        """DELETE an object over HTTP."""
        assert self._session is not None
        async with self._session.delete(path) as resp:
            if resp.status >= 300:
                raise RuntimeError(f"DELETE {path} -> {resp.status}")

    def sub_path(self, name: str = "") -> str:
        """API path of the Subscription collection, or of one subscription."""
        base = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{self.namespace}/{C.SUBSCRIPTION_PLURAL}"
        return f"{base}/{name}" if name else base

    def box_path(self, name: str = "") -> str:
        """API path of the AgentBox collection, or of one box."""
        base = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{self.namespace}/{C.AGENTBOX_PLURAL}"
        return f"{base}/{name}" if name else base

    async def add_secret(self, name: str, key: str, text: str) -> None:
        """Create an Opaque Secret with one key."""
        await self.create(f"/api/v1/namespaces/{self.namespace}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {key: base64.b64encode(text.encode()).decode()}})

    async def add_subscription(self, name: str, provider: str, secret: str, key: str, **spec: Any) -> None:
        """Create a Subscription."""
        await self.create(f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{self.namespace}/{C.SUBSCRIPTION_PLURAL}", {
            "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND, "metadata": {"name": name},
            "spec": {"provider": provider, "credentialsSecretRef": {"name": secret, "key": key}, **spec}})

    async def add_box(self, name: str, agent: str, subscription: str | None, **spec: Any) -> None:
        """Create an AgentBox with a one-container template."""
        body_spec = {"agent": agent, "timeZone": "UTC",
                     "template": {"spec": {"containers": [{"name": "box", "image": "agentbox-box:dev"}]}}, **spec}
        if subscription:
            body_spec["subscription"] = subscription
        await self.create(self.box_path(), {"apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND,
                                            "metadata": {"name": name}, "spec": body_spec})

    def box(self, name: str) -> dict[str, Any] | None:
        """The stored AgentBox."""
        return self.kube.get(C.AGENTBOX_PLURAL, self.namespace, name)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Stored Events (optionally only those about object `name`)."""
        evs = self.kube.objects("v1/events", self.namespace)
        return [e for e in evs if name is None or (e.get("involvedObject") or {}).get("name") == name]

    # ------------------------------------------------------------------ the kubelet
    def pod_dir(self, pod: str) -> pathlib.Path:
        """The sandbox directory standing for a pod's filesystem."""
        return self.local_exec.workdir(self.namespace, pod)

    def tmux(self, pod: str, *args: str, check: bool = True) -> str:
        """Run tmux against a pod's server (as the test, not through exec); returns stdout.

        Raises:
            RuntimeError: tmux exited non-zero (its stderr in the message) and `check` is true: a session
                the test (playing the box's entrypoint) failed to start is reported where it failed, not
                as a wait for Ready that times out much later.
        """
        import subprocess

        sock = self.sockets(self.namespace, pod)
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        nice = getattr(self.local_exec, "nice", 0)  # the pods' niceness (a bench's), their tmux server's too
        res = subprocess.run([*(["nice", "-n", str(nice)] if nice else []), "tmux", "-S", str(sock), *args],
                             capture_output=True, text=True, env=env, timeout=10)
        if check and res.returncode != 0:
            raise RuntimeError(f"tmux {args[0] if args else ''} in pod {pod} exited {res.returncode}: "
                               f"{res.stderr.strip()[:200]}")
        return res.stdout

    async def run_pod(self, pod: str, tabs: list[TabSpec], shims: dict[str, list[str]] | None = None,
                      timeout: float = 15.0) -> None:
        """Play the kubelet: wait for the pod object, start its tmux session with one tab per
        TabSpec (a shell that runs the command), then mark the pod Running.

        `shims`: executables put on the tabs' PATH, {name: argv prefix} (e.g. a `codex` that runs
        the fake agent), so `codex resume --last` typed by the controller finds them.
        """
        await self.kube.wait_for("v1/pods", self.namespace, pod, lambda o: o is not None, timeout=timeout)
        root = self.pod_dir(pod)
        bindir = root / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        for name, argv in (shims or {}).items():
            path = bindir / name
            path.write_text("#!/bin/sh\nexec " + shlex.join(argv) + ' "$@"\n')
            path.chmod(0o755)
        # The box image's entrypoint copies the mounted credentials Secret into the agent's home.
        for key, rel in (("credentials.json", ".claude/.credentials.json"), ("auth.json", ".codex/auth.json")):
            text = self.box_secret(pod).get(key)
            if text is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
                (root / rel).chmod(0o600)
        env_path = f"{bindir}:{os.environ.get('PATH', '')}"
        for i, tab in enumerate(tabs):
            log = root / f"{tab.name}.log"
            env = ["-e", f"AGENTBOX_FAKE_LOG={log}", "-e", "PS1=$ ",
                   "-e", f"PYTHONPATH={pathlib.Path(__file__).resolve().parents[1]}"]
            # tmux gives new panes the client's PATH, so PATH is set by `env` in the pane itself.
            # No history file: a shell killed with its pod must not write into the removed sandbox.
            shell = ["env", f"PATH={env_path}", f"HOME={root}", "HISTFILE=/dev/null", "bash", "--norc", "--noprofile"]
            if i == 0:
                self.tmux(pod, "new-session", "-d", "-s", C.TMUX_SESSION, "-x", "160", "-y", "45", "-n", tab.name,
                          "-c", str(root), *env, *shell)
            else:
                self.tmux(pod, "new-window", "-d", "-t", f"={C.TMUX_SESSION}", "-n", tab.name, "-c", str(root),
                          *env, *shell)
            await asyncio.sleep(0.2)
            self.tmux(pod, "send-keys", "-t", f"={C.TMUX_SESSION}:{tab.name}", "-l", shlex.join(tab.command))
            self.tmux(pod, "send-keys", "-t", f"={C.TMUX_SESSION}:{tab.name}", "Enter")
        await self.kube.set_pod_phase(self.namespace, pod, "Running")

    def agent_log(self, pod: str, tab: str) -> list[dict[str, Any]]:
        """What the fake agent in a tab recorded (keys, submitted lines, restarts)."""
        path = self.pod_dir(pod) / f"{tab}.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def login_file(self, pod: str, agent: str = "claude-code") -> str | None:
        """The agent's live login file in the pod (None when absent)."""
        rel = ".codex/auth.json" if agent == "codex" else ".claude/.credentials.json"
        path = self.pod_dir(pod) / rel
        return path.read_text() if path.exists() else None

    def box_secret(self, box: str) -> dict[str, str]:
        """Decoded data of a box credentials Secret."""
        sec = self.kube.get("v1/secrets", self.namespace, f"{box}-credentials") or {}
        return {k: base64.b64decode(v).decode() for k, v in (sec.get("data") or {}).items()}

    def screen(self, pod: str, tab: str) -> str:
        """The visible screen of a tab ("" when the tab or the pod's tmux server is gone)."""
        return self.tmux(pod, "capture-pane", "-p", "-J", "-t", f"={C.TMUX_SESSION}:{tab}", check=False)


def fake_agent_argv(agent: str, reset_epoch: float, *extra: str) -> list[str]:
    """argv starting the scripted agent (see agentbox_sim.fake_agent)."""
    return [sys.executable, "-m", "agentbox_sim.fake_agent", agent, "--reset-epoch", f"{reset_epoch:.3f}", *extra]


async def eventually(probe: Callable[[], Any], timeout: float, every: float = 0.2,
                     what: str = "condition") -> Any:
    """Poll `probe` (sync or async) until it returns a truthy value; raise TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(every)


def utc_in(seconds: float) -> datetime:
    """An instant `seconds` from now (UTC)."""
    return datetime.fromtimestamp(time.time() + seconds, tz=timezone.utc)


class Human:
    """A person at the keyboard: a real `tmux attach` client on a pseudo-terminal, so keys move
    tmux's `client_activity` exactly as typing does (send-keys does not)."""

    def __init__(self, world: World, pod: str) -> None:
        import pty
        import subprocess

        self._master, slave = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        env["TERM"] = "xterm-256color"
        self._proc = subprocess.Popen(
            ["tmux", "-S", str(world.sockets(world.namespace, pod)), "attach", "-t", f"={C.TMUX_SESSION}"],
            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self._alive = True
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while self._alive:
            try:
                if not os.read(self._master, 65536):
                    break
            except OSError:
                break

    def type(self, text: str) -> None:
        """Type characters (\\r is Enter, \\x7f is Backspace)."""
        os.write(self._master, text.encode())

    def close(self) -> None:
        """Detach and stop the client."""
        self._alive = False
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except Exception:  # noqa: BLE001
            self._proc.kill()
        try:
            os.close(self._master)
        except OSError:
            pass
