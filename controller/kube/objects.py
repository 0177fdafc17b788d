"""Thin Kubernetes IO: pure builders for the box's children, and reads/writes over the client.

Reads return None on 404; creates treat 409 as "exists"; Secrets are written only when their
content differs. Requests run on the event loop over one connection pool (:mod:`controller.kube.rest`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
from typing import Any, Awaitable, Callable, Mapping

from controller import constants as C
from controller.kube.rest import MERGE_PATCH, KubeApiError, Rest, path_of


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    """ownerReference pointing at an AgentBox (controller=True, blockOwnerDeletion=True)."""
    return {
        "apiVersion": C.API_VERSION,
        "kind": C.AGENTBOX_KIND,
        "name": body["metadata"]["name"],
        "uid": body["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class NotOwned(Exception):
    """An object the controller would act on exists under the box's name but is not controlled by the
    box (no ownerReference with the box's UID and ``controller: true``): a squatter. The controller
    never execs into it, pushes a login into it or writes it.

    Attributes:
        kind: "Pod" or "Secret".
        name: the object's name.
        reason: the condition reason, ``PodNotOwned`` or ``SecretNotOwned``.
    The message names kind, name and the box; never the object's content.
    """

    def __init__(self, kind: str, name: str, box: str, why: str | None = None) -> None:
        self.kind, self.name, self.box = kind, name, box
        self.reason = f"{kind}NotOwned"
        why = why or "no controller ownerReference with the box's UID"
        super().__init__(f"{kind} {name!r} exists but is not owned by AgentBox {box!r} ({why}); the controller "
                         f"will not use it. Delete it, or rename the box")


def owned_by(obj: dict[str, Any] | None, uid: str | None) -> bool:
    """True when ``obj`` (a dict with ``metadata``) has an ownerReference with ``uid`` and ``controller: true``.

    A missing ``uid`` never matches: without the box's UID, ownership cannot be proven.
    """
    if not obj or not uid:
        return False
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == uid and r.get("controller") is True for r in refs)


def require_owned(obj: dict[str, Any], uid: str | None, kind: str, box: str) -> dict[str, Any]:
    """``obj`` itself when owned by the box ``uid`` (see `owned_by`).

    Raises:
        NotOwned: it is not.
    """
    if not owned_by(obj, uid):
        raise NotOwned(kind, (obj.get("metadata") or {}).get("name") or "?", box)
    return obj


def _controller_uid(obj: dict[str, Any]) -> tuple[str | None, str]:
    """(uid, name) of the controller ownerReference of an object we are about to write."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return ref.get("uid"), ref.get("name") or "?"
    return None, "?"


def identity(obj: Any) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of an object as a watch event delivered it, or None when it is not a mapping or
    any of the three is missing or not a string (a watch event is read, never trusted to be well-formed)."""
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata") or {}
    ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if not (isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str)):
        return None
    return ns, name, uid


def child_labels(box_name: str) -> dict[str, str]:
    """Labels put on every child of a box."""
    return {C.LABEL_MANAGED_BY: C.MANAGER_NAME, C.LABEL_NAME: "agentbox", C.LABEL_BOX: box_name}


def pod_name(box_name: str) -> str:
    """Name of the box pod."""
    return box_name


def secret_name(box_name: str) -> str:
    """Name of the box credentials Secret."""
    return f"{box_name}-credentials"


def make_box_secret(body: dict[str, Any], key: str, login_text: str) -> dict[str, Any]:
    """The box credentials Secret: one key (`credentials.json` or `auth.json`) with the login file."""
    name = body["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(name),
            "namespace": body["metadata"]["namespace"],
            "labels": child_labels(name),
            "ownerReferences": [owner_reference(body)],
        },
        "data": {key: base64.b64encode(login_text.encode()).decode()},
    }


class TemplateError(ValueError):
    """spec.template cannot make a pod; the message names the field."""


CREDENTIALS_MODE = 0o440
"""Mode of the files of the mounted box credentials Secret: owner and group read (the group is the pod's
fsGroup, which a kubelet also adds to every container's groups), so a non-root image can copy its login."""

DEFAULT_FS_GROUP = 1000
"""fsGroup set on a box pod whose template sets none and no runAsGroup (the example image's GID; any GID
works, the container is made a member of it)."""


def credentials_fs_group(spec: dict[str, Any]) -> int:
    """The fsGroup a box pod gets when its template sets none: the pod's runAsGroup, else the first
    container's runAsGroup, else :data:`DEFAULT_FS_GROUP`. (A kubelet writes Secret files root-owned; with
    an fsGroup they are group-owned by it and group-readable, and the container joins that group.)"""
    psc = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
    if isinstance(psc.get("runAsGroup"), int):
        return int(psc["runAsGroup"])
    for ctr in spec.get("containers") or []:
        csc = ctr.get("securityContext") if isinstance(ctr.get("securityContext"), dict) else {}
        if isinstance(csc.get("runAsGroup"), int):
            return int(csc["runAsGroup"])
    return DEFAULT_FS_GROUP


def make_pod(body: dict[str, Any], template: dict[str, Any], agent: str, with_credentials: bool,
             credentials_key: str | None = None) -> dict[str, Any]:
    """The box pod from spec.template, owned by the box, with the credentials Secret mounted
    read-only at `/var/run/agentbox/credentials` in every container (mode 0440, group = the pod's
    fsGroup, set by :func:`credentials_fs_group` when the template sets none: a kubelet writes the files
    root-owned, and an image running as non-root could not read them otherwise). With
    `credentials_key` only that key of the Secret is projected (``items``): whatever else a Secret of
    that name may hold never reaches the box.

    Raises:
        TemplateError: the template is not shaped like a PodTemplateSpec (`template_problem`); the
            message names the field.
    """
    from controller.domain.podtemplate import template_problem

    problem = template_problem(template)
    if problem:
        raise TemplateError(problem)
    name = body["metadata"]["name"]
    tmpl = copy.deepcopy(template)
    spec = tmpl["spec"]
    containers = spec["containers"]
    meta = tmpl.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), **child_labels(name)}
    if with_credentials:
        volumes = [v for v in spec.get("volumes") or [] if v.get("name") != C.CREDENTIALS_VOLUME]
        source: dict[str, Any] = {"secretName": secret_name(name), "defaultMode": CREDENTIALS_MODE}
        if credentials_key:
            source["items"] = [{"key": credentials_key, "path": credentials_key}]
        volumes.append({"name": C.CREDENTIALS_VOLUME, "secret": source})
        spec["volumes"] = volumes
        psc = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
        if psc.get("fsGroup") is None:
            spec["securityContext"] = {**psc, "fsGroup": credentials_fs_group(spec)}
        for ctr in containers:
            mounts = [m for m in ctr.get("volumeMounts") or [] if m.get("name") != C.CREDENTIALS_VOLUME]
            mounts.append({"name": C.CREDENTIALS_VOLUME, "mountPath": C.CREDENTIALS_MOUNT_PATH, "readOnly": True})
            ctr["volumeMounts"] = mounts
    for ctr in containers:
        env = [e for e in ctr.get("env") or [] if e.get("name") != "AGENTBOX_AGENT"]
        env.append({"name": "AGENTBOX_AGENT", "value": agent})
        ctr["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name),
            "namespace": body["metadata"]["namespace"],
            "labels": labels,
            "annotations": meta.get("annotations") or {},
            "ownerReferences": [owner_reference(body)],
        },
        "spec": spec,
    }


def box_container(pod_spec: dict[str, Any], wanted: str | None) -> str | None:
    """The container that runs tmux: `wanted` if present, else the first one; None if absent."""
    names = [c.get("name") for c in pod_spec.get("containers") or []]
    if wanted:
        return wanted if wanted in names else None
    return names[0] if names else None


class FreshRead:
    """Concurrent callers of one read share it, and each still gets a result read AFTER it asked.

    A caller arriving while no read is in flight starts one; a caller arriving before that read has
    started (the same event-loop turn: callers woken together) joins it; a caller arriving while one is
    in flight (it may have started before the caller asked, so it may predate a write the caller saw)
    waits for the NEXT read, which starts when the current one ends and is shared by every caller queued
    meanwhile. So N simultaneous callers cost one read, N callers arriving over time at most two, and no
    caller gets an answer older than its call: the same guarantee as each doing its own read.

    Args:
        fetch: the read (``await fetch()``); its errors reach every caller of that read.
    """

    def __init__(self, fetch: Callable[[], Awaitable[Any]]) -> None:
        self._fetch = fetch
        self._current: asyncio.Future[Any] | None = None
        self._queued: asyncio.Future[Any] | None = None
        self._started = False  # the current read has called fetch (it may predate a new caller)
        self.reads = 0

    async def get(self) -> Any:
        """The result of a read started at or after this call."""
        loop = asyncio.get_running_loop()
        if self._current is None:
            fut = self._current = loop.create_future()
            self._started = False
            asyncio.ensure_future(self._drive(fut))
        elif not self._started:
            fut = self._current  # not started yet: it starts after this call, so it may be shared
        else:
            if self._queued is None:
                self._queued = loop.create_future()
            fut = self._queued
        return await asyncio.shield(fut)

    async def _drive(self, fut: asyncio.Future[Any]) -> None:
        while True:
            self.reads += 1
            self._started = True
            try:
                fut.set_result(await self._fetch())
            except Exception as exc:  # noqa: BLE001 - handed to every caller of this read
                fut.set_exception(exc)
                fut.exception()  # retrieved: callers that went away do not leave it unobserved
            if self._queued is None:
                self._current = None
                return
            fut, self._queued = self._queued, None
            self._current = fut


class Kube:
    """The operator's Kubernetes reads and writes, on the event loop over :class:`controller.kube.rest.Rest`
    (one session, one connection pool; JSON in, dicts out).

    Args:
        rest: the process's REST transport.
    Errors: every method raises :class:`controller.kube.rest.KubeApiError` for answers it does not turn into
    a result (documented per method: a 404 is ``None``/``False`` where a read or a delete says so, a 409 is
    ``False`` where a compare-then-write says so); its message holds no credential.
    """

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self._shared_lists: dict[tuple[str, str], FreshRead] = {}

    # ------------------------------------------------------------------ paths
    @staticmethod
    def _core(namespace: str, plural: str, name: str | None = None) -> str:
        return path_of("api", "v1", "namespaces", namespace, plural, *((name,) if name is not None else ()))

    @staticmethod
    def _ours(namespace: str, plural: str, name: str | None = None, *sub: str) -> str:
        return path_of("apis", C.GROUP, C.VERSION, "namespaces", namespace, plural,
                       *((name, *sub) if name is not None else ()))

    async def _object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any] | None:
        """``rest.request`` whose answer must be a JSON object (None only where ``missing_ok`` allowed it).

        Raises:
            KubeApiError: as :meth:`Rest.request`; reason ``BadResponse`` when the answer is not an object.
        """
        out = await self.rest.request(method, path, **kwargs)
        if out is None and kwargs.get("missing_ok"):
            return None
        if not isinstance(out, dict):
            raise KubeApiError(method, path, 200, "BadResponse")
        return out

    # ------------------------------------------------------------------ Secrets
    async def _read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._object("GET", self._core(namespace, "secrets", name), missing_ok=True)

    async def get_secret_value(self, namespace: str, name: str, key: str) -> tuple[bool, str | None]:
        """(secret exists, decoded value of `key` or None)."""
        sec = await self._read_secret(namespace, name)
        if sec is None:
            return False, None
        data = sec.get("data") or {}
        if key not in data:
            return True, None
        return True, base64.b64decode(data[key]).decode("utf-8", errors="replace")

    async def ensure_secret(self, secret: dict[str, Any]) -> str:
        """Create the Secret, or replace its data when it differs. Returns created|updated|unchanged.

        A Secret built with a controller ownerReference (a box's child) is only ever written when the
        stored one carries the same owner UID.

        Raises:
            NotOwned: a Secret of that name exists and is not controlled by the same owner (never patched).
        """
        ns, name = secret["metadata"]["namespace"], secret["metadata"]["name"]
        owner_uid, owner_name = _controller_uid(secret)
        current = await self._read_secret(ns, name)
        if current is None:
            try:
                await self.rest.request("POST", self._core(ns, "secrets"), body=secret)
                return "created"
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
            current = await self._read_secret(ns, name)
            if current is None:  # created and deleted meanwhile: the next pass creates it
                raise KubeApiError("GET", self._core(ns, "secrets", name), 404, "NotFound")
        if owner_uid is not None:
            require_owned(current, owner_uid, "Secret", owner_name)
            if (current.get("type") or "Opaque") != secret.get("type", "Opaque"):
                # Someone who may create Secrets can put the box's UID in an ownerReference; a Secret of
                # another type (a service-account token, say) is still not one the controller made.
                raise NotOwned("Secret", name, owner_name,
                               f"type {current.get('type')!r}, not {secret.get('type', 'Opaque')!r}")
        if (current.get("data") or {}) == secret["data"]:
            return "unchanged"
        await self.patch_secret_data(ns, name, secret["data"])
        return "updated"

    async def patch_secret_data(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Merge-patch ``data`` of a Secret: the keys given (base64 values) are replaced, others kept.

        Raises:
            KubeApiError: 404 when the Secret is absent, and any other failure.
        """
        await self.rest.request("PATCH", self._core(namespace, "secrets", name), body={"data": data},
                                content_type=MERGE_PATCH)

    # ------------------------------------------------------------------ Pods
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as a dict, or None."""
        return await self._object("GET", self._core(namespace, "pods", name), missing_ok=True)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the pod `name` only if it is still the object with `uid` (a precondition: a pod re-created
        meanwhile under the same name is never deleted). Returns False when it is already gone or replaced."""
        try:
            await self.rest.request("DELETE", self._core(namespace, "pods", name),
                                    body={"preconditions": {"uid": uid}})
        except KubeApiError as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    async def ensure_pod(self, pod: dict[str, Any]) -> str:
        """Create the pod unless it exists (pods are immutable; a changed template needs a
        recreate, which the controller leaves to the user). Returns created|exists.

        Raises:
            NotOwned: a pod of that name exists and is not controlled by the pod's owner (a squatter).
        """
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        owner_uid, owner_name = _controller_uid(pod)
        current = await self.get_pod(ns, name)
        if current is None:
            try:
                await self.rest.request("POST", self._core(ns, "pods"), body=pod)
                return "created"
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
                current = await self.get_pod(ns, name)
        if current is not None and owner_uid is not None:
            require_owned(current, owner_uid, "Pod", owner_name)
        return "exists"

    async def get_owned_pod(self, namespace: str, name: str, uid: str | None, box: str) -> dict[str, Any] | None:
        """The pod as a dict when it exists and is controlled by the box ``uid``; None when absent.

        Every exec and login push into a box starts here (or at `controller.kube.exec.owned_exec`).

        Raises:
            NotOwned: the pod exists but is not the box's (a squatter).
        """
        pod = await self.get_pod(namespace, name)
        return None if pod is None else require_owned(pod, uid, "Pod", box)

    # ------------------------------------------------------------------ our custom objects
    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One of our custom objects, or None."""
        return await self._object("GET", self._ours(namespace, plural, name), missing_ok=True)

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """All our custom objects of a kind in a namespace."""
        result = await self._object("GET", self._ours(namespace, plural))
        return list((result or {}).get("items") or [])

    async def list_custom_versioned(self, plural: str, namespace: str) -> tuple[list[dict[str, Any]], str]:
        """All our custom objects of a kind in a namespace, and the list's ``metadata.resourceVersion`` (the
        version the list is a snapshot at; "" if the answer had none)."""
        result = await self._object("GET", self._ours(namespace, plural)) or {}
        return list(result.get("items") or []), str((result.get("metadata") or {}).get("resourceVersion") or "")

    async def list_custom_shared(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """As :meth:`list_custom`, but simultaneous callers share the LIST (:class:`FreshRead`: every caller
        gets a list read after it asked). The objects are shared between callers: read them, never change
        them. Every box pass lists its namespace's Subscriptions: without this, a thousand boxes woken
        together by one reset parsed a thousand copies of the same list (bench/scale.py)."""
        key = (plural, namespace)
        shared = self._shared_lists.get(key)
        if shared is None:
            shared = self._shared_lists[key] = FreshRead(lambda: self.list_custom(plural, namespace))
        return list(await shared.get())

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the status subresource (lists in `status` replace the stored lists); an object
        deleted meanwhile (404) is ignored."""
        await self.rest.request("PATCH", self._ours(namespace, plural, name, "status"), body={"status": status},
                                content_type=MERGE_PATCH, missing_ok=True)

    async def patch_status_at(self, plural: str, namespace: str, name: str, status: dict[str, Any],
                              resource_version: str | None) -> dict[str, Any] | bool:
        """Merge-patch the status subresource only while the object is at `resource_version` (optimistic
        concurrency: the API server answers 409 when another writer came first).

        Returns:
            The object as stored after the patch (a dict), False on 409 (read again and retry), True when the
            object was deleted meanwhile (nothing to record).
        """
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            out = await self.rest.request("PATCH", self._ours(namespace, plural, name, "status"), body=body,
                                          content_type=MERGE_PATCH, missing_ok=True)
        except KubeApiError as exc:
            if exc.status == 409:
                return False
            raise
        return out if isinstance(out, dict) else True

    async def patch_annotations(self, plural: str, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        """Merge-patch metadata.annotations (a None value removes the key).

        Raises:
            KubeApiError: 404 when the object is gone, and any other failure.
        """
        await self.rest.request("PATCH", self._ours(namespace, plural, name),
                                body={"metadata": {"annotations": annotations}}, content_type=MERGE_PATCH)

    # ------------------------------------------------------------------ Events (controller.events.Recorder)
    async def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create a core/v1 Event; False when an Event of that name exists (409)."""
        try:
            await self.rest.request("POST", self._core(namespace, "events"), body=body)
        except KubeApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def read_event_count(self, namespace: str, name: str) -> int | None:
        """`count` of a stored Event (None when absent)."""
        event = await self._object("GET", self._core(namespace, "events", name), missing_ok=True)
        if event is None:
            return None
        return int(event.get("count") or 0)

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch an Event (count, lastTimestamp); a deleted Event (TTL) is ignored."""
        await self.rest.request("PATCH", self._core(namespace, "events", name), body=patch,
                                content_type=MERGE_PATCH, missing_ok=True)
