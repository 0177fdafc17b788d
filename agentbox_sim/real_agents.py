"""The real agent CLIs (Claude Code, Codex) in the emulated world, pointed at the provider emulator.

What lives here (see notes/real-agents.md for the measurements behind each setting):

* `ensure_installed()`: the pinned npm packages installed once into ``<repo>/.agents`` (cached
  across runs; `AgentsUnavailable` with a reason when npm is missing or the install fails);
* `DenyProxy`: the HTTPS_PROXY the CLIs get, on loopback; it logs and refuses every CONNECT (and
  every plain proxied request), so nothing leaves the machine;
* `write_claude_home()` / `write_codex_home()`: first-run skips, onboarding, trust, settings and
  login files in the agent's own HOME / CODEX_HOME;
* `RealAgents`: puts it together for a `World` — the login tokens registered with the emulator,
  the HTTPS port for ChatGPT-mode Codex, the ``claude`` / ``codex`` shims for `World.run_pod`
  (so the controller's ``codex resume --last`` finds the same contained CLI) and `cleanup()`, which
  stops every process started under its run marker (Codex leaves an app-server daemon per
  CODEX_HOME, reparented to PID 1) by pid.

Versions are pinned: the detection profiles were measured against them (Claude Code 2.1.328,
2.1.332 and 2.1.337, Codex 0.169.0 and 0.171.0; screens in tests/fixtures/real-screens/<version>/). The
environment variables AGENTBOX_AGENTS_DIR / AGENTBOX_CLAUDE_VERSION / AGENTBOX_CODEX_VERSION point
the same code at other releases in another folder (`make agents-latest`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_PACKAGE = "@openai/codex"
# The pins: the releases the profiles and tests/fixtures/real-screens/<version>/ were checked against.
PINNED_CLAUDE_VERSION = "2.1.337"
PINNED_CODEX_VERSION = "0.171.0"
# `make agents-latest` runs the same tests against other releases in another folder:
# AGENTBOX_AGENTS_DIR, AGENTBOX_CLAUDE_VERSION, AGENTBOX_CODEX_VERSION override the pins.
CLAUDE_VERSION = os.environ.get("AGENTBOX_CLAUDE_VERSION") or PINNED_CLAUDE_VERSION
CODEX_VERSION = os.environ.get("AGENTBOX_CODEX_VERSION") or PINNED_CODEX_VERSION
PINNED = {CLAUDE_PACKAGE: CLAUDE_VERSION, CODEX_PACKAGE: CODEX_VERSION}

REPO = pathlib.Path(__file__).resolve().parents[1]
AGENTS_DIR = pathlib.Path(os.environ.get("AGENTBOX_AGENTS_DIR") or REPO / ".agents")
RUN_MARKER = "AGENTBOX_REAL_AGENT_RUN"


class AgentsUnavailable(RuntimeError):
    """The real CLIs cannot be used here (the message says why)."""


# ---------------------------------------------------------------------------------------------- install

def _installed_version(prefix: pathlib.Path, package: str) -> str | None:
    try:
        return json.loads((prefix / "node_modules" / package / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None


def installed(prefix: pathlib.Path = AGENTS_DIR) -> bool:
    """True when both pinned packages (and their native binaries) are in ``prefix``."""
    if any(_installed_version(prefix, p) != v for p, v in PINNED.items()):
        return False
    try:
        claude_binary(prefix), codex_binary(prefix)
    except AgentsUnavailable:
        return False
    return True


def ensure_installed(prefix: pathlib.Path = AGENTS_DIR, timeout: float = 900.0) -> pathlib.Path:
    """Install the pinned CLIs into ``prefix`` with npm unless already there; returns ``prefix``.

    Raises:
        AgentsUnavailable: npm is missing or the install failed (with npm's last lines).
    """
    if installed(prefix):
        return prefix
    npm = shutil.which("npm")
    if npm is None:
        raise AgentsUnavailable("npm is not installed: the real Claude Code and Codex CLIs come from npm")
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "package.json").write_text(json.dumps(
        {"name": "agentbox-real-agents", "private": True, "dependencies": PINNED}, indent=2) + "\n")
    try:
        res = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                              "--loglevel=error"], capture_output=True, text=True, timeout=timeout, cwd=prefix)
    except subprocess.TimeoutExpired:
        raise AgentsUnavailable(f"npm install of the pinned CLIs did not finish in {timeout:.0f} s") from None
    if res.returncode != 0 or not installed(prefix):
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise AgentsUnavailable(f"npm install of {', '.join(f'{p}@{v}' for p, v in PINNED.items())} failed: {tail}")
    return prefix


def claude_binary(prefix: pathlib.Path = AGENTS_DIR) -> pathlib.Path:
    """Claude Code's native executable (the package's bin/claude.exe, placed by its postinstall)."""
    for cand in (prefix / "node_modules" / CLAUDE_PACKAGE / "bin" / "claude.exe",
                 *sorted((prefix / "node_modules" / "@anthropic-ai").glob("claude-code-linux-*/claude"))):
        if cand.is_file() and os.access(cand, os.X_OK) and cand.stat().st_size > 1_000_000:
            return cand
    raise AgentsUnavailable(f"Claude Code's native binary is missing under {prefix}")


def codex_binary(prefix: pathlib.Path = AGENTS_DIR) -> pathlib.Path:
    """Codex's native executable (run directly: the node wrapper would sit between tmux and Codex)."""
    found = sorted((prefix / "node_modules" / "@openai").glob("codex-linux-*/vendor/*/bin/codex"))
    found += sorted((prefix / "node_modules" / "@openai").glob("codex-linux-*/vendor/*/codex/codex"))
    for cand in found:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    raise AgentsUnavailable(f"Codex's native binary is missing under {prefix}")


# ---------------------------------------------------------------------------------------------- proxy

@dataclass
class DenyProxy:
    """An HTTP proxy on 127.0.0.1 that refuses everything: CONNECT gets 403, so do plain requests.

    ``attempts`` lists what the CLIs tried to reach ("CONNECT api.anthropic.com:443", …).
    """

    host: str = "127.0.0.1"
    attempts: list[str] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://{self.host}:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target = (line.split(" ") + ["", ""])[:2]
            self.attempts.append(f"{method} {target}")
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


@dataclass
class TunnelProxy(DenyProxy):
    """`DenyProxy` that tunnels CONNECTs to a few named hosts to loopback ports, refusing the rest.

    ``routes``: {"platform.claude.com": ("127.0.0.1", <emulator TLS port>)}. Claude Code's token
    refresh has no URL override (notes/real-agents.md): with ``HTTPS_PROXY`` here and the test CA
    in ``NODE_EXTRA_CA_CERTS`` its POST to https://platform.claude.com/v1/oauth/token reaches the
    provider emulator, whose certificate names that host. ``tunnels`` lists what was tunnelled.
    """

    routes: dict[str, tuple[str, int]] = field(default_factory=dict)
    tunnels: list[str] = field(default_factory=list)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, target = (line.split(" ") + ["", ""])[:2]
        host = target.rsplit(":", 1)[0] if method == "CONNECT" else ""
        route = self.routes.get(host)
        if route is None:
            self.attempts.append(f"{method} {target}")
            try:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
            except ConnectionError:
                pass
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*route)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        self.tunnels.append(target)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                try:
                    dst.close()
                except RuntimeError:
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


# ---------------------------------------------------------------------------------------------- logins

def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fake_jwt(claims: dict[str, Any]) -> str:
    """An unsigned-looking JWT (Codex reads only the claims: exp and the auth namespace)."""
    return ".".join((_b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()),
                     _b64(json.dumps(claims).encode()), _b64(b"emulator-signature")))


def claude_credentials(token: str) -> str:
    """Claude Code's ``.credentials.json`` for an OAuth (subscription) login."""
    return json.dumps({"claudeAiOauth": {
        "accessToken": token, "refreshToken": f"{token}-refresh", "expiresAt": 4102444800000,
        "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
        "subscriptionType": "max", "rateLimitTier": "default_claude_max_5x"}})


def codex_tokens(account: str, plan: str = "plus", email: str = "codex@example.com") -> tuple[str, str]:
    """(access token, auth.json) of a ChatGPT-mode Codex login for ``account``."""
    exp = int(time.time()) + 30 * 86400
    auth = {"chatgpt_plan_type": plan, "chatgpt_account_id": account, "chatgpt_user_id": f"user-{account}"}
    id_token = fake_jwt({"email": email, "exp": exp, "iat": int(time.time()), "sub": f"user-{account}",
                         "https://api.openai.com/auth": auth})
    access = fake_jwt({"exp": exp, "iat": int(time.time()), "sub": f"user-{account}",
                       "https://api.openai.com/auth": auth, "jti": uuid.uuid4().hex})
    text = json.dumps({"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": {
        "id_token": id_token, "access_token": access, "refresh_token": f"rt-{account}", "account_id": account},
        "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return access, text


# ---------------------------------------------------------------------------------------------- homes

def write_claude_home(home: pathlib.Path, cwd: pathlib.Path, *, auto_continue: bool = True,
                      account: str = "claude-account", email: str = "claude@example.com") -> None:
    """First-run state of Claude Code in ``home``: onboarding done, ``cwd`` trusted, the OAuth
    account, and ``settings.json`` (``autoContinueAtUsageLimit: false`` when ``auto_continue`` is
    False — that key is read there, not in ``.claude.json``). The login file itself is written by
    the box (World copies the Secret to ``~/.claude/.credentials.json``)."""
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    project = {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True, "allowedTools": [],
               "projectOnboardingSeenCount": 1, "hasClaudeMdExternalIncludesApproved": False}
    state = {
        "hasCompletedOnboarding": True, "lastOnboardingVersion": CLAUDE_VERSION, "theme": "dark",
        "numStartups": 5, "installMethod": "npm", "autoUpdates": False, "bypassPermissionsModeAccepted": False,
        "hasSeenTasksHint": True, "hasUsedBackslashReturn": True, "shiftEnterKeyBindingInstalled": True,
        "userID": uuid.uuid5(uuid.NAMESPACE_URL, account).hex * 2,
        "oauthAccount": {"accountUuid": str(uuid.uuid5(uuid.NAMESPACE_URL, account)), "emailAddress": email,
                         "organizationUuid": str(uuid.uuid5(uuid.NAMESPACE_URL, account + "/org")),
                         "organizationName": "Emulated Org", "displayName": "Emulated"},
        "projects": {str(cwd): project, str(cwd.resolve()): project},
    }
    (home / ".claude.json").write_text(json.dumps(state, indent=2))
    settings: dict[str, Any] = {"autoUpdates": False, "spinnerTipsEnabled": False}
    if not auto_continue:
        settings["autoContinueAtUsageLimit"] = False
    (home / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))


def write_codex_home(codex_home: pathlib.Path, cwd: pathlib.Path, chatgpt_base_url: str) -> None:
    """``config.toml`` of a ChatGPT-mode Codex in ``codex_home``: the emulator as ``chatgpt_base_url``,
    ``cwd`` trusted, no update check, no analytics, first-run notices done, the model nudge hidden."""
    codex_home.mkdir(parents=True, exist_ok=True)
    base = chatgpt_base_url.rstrip("/") + "/backend-api/"
    lines = [
        f'chatgpt_base_url = "{base}"',
        'check_for_update_on_startup = false',
        'model = "gpt-5.1-codex"',
        'model_reasoning_effort = "medium"',
        'approval_policy = "on-request"',
        'sandbox_mode = "workspace-write"',
        "",
        f'[projects."{cwd}"]',
        'trust_level = "trusted"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[notice]",
        "hide_rate_limit_model_nudge = true",
        "hide_full_access_warning = true",
        "hide_gpt5_1_migration_prompt = true",
        '"hide_gpt-5.1-codex-max_migration_prompt" = true',
        "",
        "[notice.model_migrations]",
        '"gpt-5.1-codex" = "gpt-5.1-codex"',
        "",
        "[tui]",
        "screen_reader_detection_done = true",
        "",
    ]
    (codex_home / "config.toml").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------- env

def common_env(proxy_url: str, marker: str, tz: str = "UTC") -> dict[str, str]:
    """Containment for both CLIs: every outbound request goes to the refusing proxy, loopback bypasses it."""
    return {
        RUN_MARKER: marker, "TZ": tz, "TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": proxy_url, "https_proxy": proxy_url, "HTTP_PROXY": proxy_url, "http_proxy": proxy_url,
        "ALL_PROXY": proxy_url, "all_proxy": proxy_url,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }


def claude_env(base_url: str, proxy_url: str, marker: str, home: pathlib.Path) -> dict[str, str]:
    return {
        **common_env(proxy_url, marker), "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "IS_SANDBOX": "1",
    }


def codex_env(proxy_url: str, marker: str, home: pathlib.Path, ca_path: pathlib.Path) -> dict[str, str]:
    return {
        **common_env(proxy_url, marker), "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
        "CODEX_CA_CERTIFICATE": str(ca_path), "SSL_CERT_FILE": str(ca_path), "RUST_LOG": "error",
    }


def env_argv(env: dict[str, str], argv: list[str]) -> list[str]:
    """``env K=V … argv`` (for a World shim: the CLI then starts with exactly this environment on top)."""
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv]


# ---------------------------------------------------------------------------------------------- the whole

@dataclass
class RealAgents:
    """The real CLIs wired into a started `World` (its provider emulator and pods).

    Use ``async with RealAgents(world) as ra:``; `cleanup()` on exit stops every process that runs
    under this instance's marker (agents and Codex's app-server daemons), by pid.
    """

    world: Any
    prefix: pathlib.Path = AGENTS_DIR
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    proxy: DenyProxy = field(default_factory=DenyProxy)
    ca_path: pathlib.Path | None = None
    # Route the CLIs' own token refreshes to the emulator: Claude Code through a CONNECT tunnel for
    # platform.claude.com (test CA in NODE_EXTRA_CA_CERTS), Codex through CODEX_REFRESH_TOKEN_URL_OVERRIDE.
    # Off: both refreshes go to the refusing proxy.
    route_token_endpoints: bool = False

    async def __aenter__(self) -> "RealAgents":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cleanup()

    async def start(self) -> None:
        ensure_installed(self.prefix)
        if self.route_token_endpoints and not isinstance(self.proxy, TunnelProxy):
            self.proxy = TunnelProxy()
        await self.proxy.start()
        self.ca_path = self.world.workdir / "tls" / "test-ca.pem"
        await self.world.provider.start_tls(self.ca_path)
        if isinstance(self.proxy, TunnelProxy):
            self.proxy.routes["platform.claude.com"] = ("127.0.0.1", int(self.world.provider.tls_url.rsplit(":", 1)[1]))

    # ----- Claude Code
    def claude_login(self, token: str, account: str) -> str:
        """Register an OAuth token with the emulator; returns the ``.credentials.json`` text."""
        self.world.provider.add_login(token, account)
        return claude_credentials(token)

    def claude_shims(self, pod: str, *, auto_continue: bool = True, account: str = "claude-account") -> dict[str, list[str]]:
        """Prepare the pod's HOME for Claude Code; returns the ``claude`` shim for `World.run_pod`."""
        home = self.world.pod_dir(pod)
        write_claude_home(home, home, auto_continue=auto_continue, account=account)
        env = claude_env(self.world.provider.url, self.proxy.url, self.marker, home)
        if self.route_token_endpoints and self.ca_path is not None:
            env["NODE_EXTRA_CA_CERTS"] = str(self.ca_path)
        return {"claude": env_argv(env, [str(claude_binary(self.prefix))])}

    # ----- Codex
    def codex_login(self, account: str, plan: str = "plus") -> str:
        """Register a ChatGPT login for ``account``; returns the ``auth.json`` text."""
        access, text = codex_tokens(account, plan)
        self.world.provider.add_login(access, account)
        return text

    def codex_shims(self, pod: str) -> dict[str, list[str]]:
        """Prepare the pod's CODEX_HOME for ChatGPT-mode Codex; returns the ``codex`` shim."""
        assert self.ca_path is not None, "start() first"
        home = self.world.pod_dir(pod)
        write_codex_home(home / ".codex", home, self.world.provider.tls_url)
        env = codex_env(self.proxy.url, self.marker, home, self.ca_path)
        if self.route_token_endpoints:
            env["CODEX_REFRESH_TOKEN_URL_OVERRIDE"] = self.world.provider.url + "/oauth/token"
        return {"codex": env_argv(env, [str(codex_binary(self.prefix))])}

    # ----- cleanup
    def processes(self) -> list[int]:
        """Pids of live processes started under this instance's marker."""
        needle = f"{RUN_MARKER}={self.marker}".encode()
        pids = []
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    async def cleanup(self, timeout: float = 5.0) -> list[int]:
        """Stop every process of this run (TERM, then KILL after ``timeout``) and the proxy; returns the pids."""
        pids = self.processes()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.processes():
            await asyncio.sleep(0.1)
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        await self.proxy.stop()
        return pids
