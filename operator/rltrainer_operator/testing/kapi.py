"""A Kubernetes API server stand-in: kmock's emulator with the semantics the operator relies on.

kmock 0.8 (PyPI) serves the Kubernetes REST API from memory, but leaves out what a real API
server adds. ``KubeAPI`` fills those gaps, so the real kopf runtime and the real ``kubernetes``
client behave against it as against a cluster:

- objects get ``uid``, ``generation``, ``creationTimestamp`` and a ``resourceVersion`` that
  changes on every write; ``generation`` moves only when the spec changes;
- create answers 201 Created (with 200 the ``kubernetes`` client returns None);
- resources declared with a ``status`` subresource ignore ``status`` in creates and main-resource
  patches, and ``.../status`` patches change only the status;
- ``labelSelector`` on lists (equality and existence terms);
- garbage collection: deleting an owner deletes what names it in ``ownerReferences``;
- optional schema validation of writes against a CRD's ``openAPIV3Schema`` (422 Invalid).

Watches still replay existing objects on every (re)connect (kopf copes; so do our informers).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import dicts, enums, rendering

RLX = "rltrainer.io/v1alpha1/rlexperiments"
RAYCLUSTERS = "ray.io/v1/rayclusters"
EVENTS = "v1/events"
NAMESPACES = "v1/namespaces"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"


#: Requests kmock itself keeps (its matching walks them all on every request).
_KMOCK_LOG = 4


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches_selector(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@attrs.define(kw_only=True)
class KubeAPI(kmock.KubernetesEmulator):
    """kmock's emulator plus the API-server semantics listed in the module docstring."""

    #: resource -> validator(obj) returning an error message or None.
    validators: dict[Any, Callable[[dict[str, Any]], str | None]] = attrs.field(factory=dict)
    _versions: itertools.count = attrs.field(factory=lambda: itertools.count(1), init=False)
    _log: list[rendering.Request] = attrs.field(factory=list, init=False)

    def declare(
        self,
        resource: str,
        kind: str,
        *,
        namespaced: bool = True,
        status: bool = True,
        validator: Callable[[dict[str, Any]], str | None] | None = None,
        shortnames: tuple[str, ...] = (),
    ) -> None:
        """Register a resource (``group/version/plural``) for discovery, as a CRD install would."""
        key = kmock.resource(resource)
        self.resources[key] = kmock.ResourceInfo(
            kind=kind,
            singular=kind.lower(),
            namespaced=namespaced,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources={"status"} if status else set(),
            shortnames=set(shortnames),
        )
        if validator is not None:
            self.validators[key] = validator

    @property
    def requests(self) -> list[rendering.Request]:
        """Every request served so far, oldest first."""
        return list(self._log)

    def _has_status_subresource(self, resource: Any) -> bool:
        info = self.resources[resource] if resource in list(self.resources) else None
        return info is not None and "status" in info.subresources

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # kmock matches each request against views over its whole request log (quadratic in
        # the number of requests): keep its log short and the full one here.
        self._log.append(request)
        if len(self._requests) > 2 * _KMOCK_LOG:
            del self._requests[:-_KMOCK_LOG]
        if request.resource is None:
            return await super()._handle(request)
        try:
            request = await self._prepare(request)
        except kmock.KubernetesError as err:
            return await self._render_error(err)
        response = await super()._handle(request)
        if request.action == enums.action.CREATE and response.status == 200:
            response.set_status(201)
        if request.action == enums.action.DELETE and request.name is not None:
            await self._collect_garbage()
        return response

    async def _prepare(self, request: rendering.Request) -> rendering.Request:
        """Rewrite a write the way the API server would before storing it."""
        action, resource = request.action, request.resource
        if action == enums.action.CREATE and isinstance(request.data, dict):
            obj = copy.deepcopy(request.data)
            meta = obj.setdefault("metadata", {})
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta.update(
                uid=str(uuid.uuid4()),
                generation=1,
                creationTimestamp=now_rfc3339(),
                resourceVersion=str(next(self._versions)),
            )
            if self._has_status_subresource(resource):
                obj.pop("status", None)
            self._validate(resource, obj)
            return _with_data(request, obj)
        if action == enums.action.UPDATE and isinstance(request.data, dict):
            async with self._lock:
                key = (resource, request.namespace, request.name)
                current = self.objects[key] if key in self.objects else None  # noqa: SIM401 - no .get()
                current = None if current is None or current.deleted else copy.deepcopy(current.raw)
            if current is None:
                return request  # kmock answers 404
            patch = copy.deepcopy(request.data)
            if request.subresource == "status":
                patch = {"status": patch.get("status")} if "status" in patch else {}
            elif self._has_status_subresource(resource):
                patch.pop("status", None)
            meta = patch.setdefault("metadata", {})
            for readonly in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
                meta.pop(readonly, None)
            meta["resourceVersion"] = str(next(self._versions))
            if "spec" in patch and request.subresource is None:
                merged = _merge(current.get("spec"), patch["spec"])
                if merged != current.get("spec"):
                    meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
            if resource in self.validators:
                self._validate(resource, _merge(current, patch))
            return _with_data(request, patch)
        return request

    def _validate(self, resource: Any, obj: dict[str, Any]) -> None:
        validator = self.validators.get(resource)
        message = validator(obj) if validator is not None else None
        if message:
            kind = self.resources[resource].kind if resource in list(self.resources) else "object"
            name = obj.get("metadata", {}).get("name")
            raise kmock.KubernetesError(
                status=422, reason="Invalid", message=f'{kind} "{name}" is invalid: {message}'
            )

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        payload = await super()._serve_list(request)
        selector = request.params.get("labelSelector")
        if selector:
            payload["items"] = [
                item
                for item in payload["items"]
                if _matches_selector(item.get("metadata", {}).get("labels") or {}, selector)
            ]
        return payload

    async def _collect_garbage(self) -> None:
        """Delete (background cascade) every object whose owners are all gone."""
        while True:
            async with self._lock:
                live_uids = {
                    obj.raw.get("metadata", {}).get("uid")
                    for _key, obj in self.objects.items()
                    if not obj.deleted
                }
                orphans = [
                    (key, obj)
                    for key, obj in self.objects.items()
                    if not obj.deleted
                    and (owners := obj.raw.get("metadata", {}).get("ownerReferences"))
                    and not any(ref.get("uid") in live_uids for ref in owners)
                ]
                for (resource, _ns, _name), obj in orphans:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})
            if not orphans:
                return


def _with_data(request: rendering.Request, data: dict[str, Any]) -> rendering.Request:
    """The request with its body replaced (in place: kmock's matching keeps the request's identity)."""
    request.data.clear()
    request.data.update(data)
    return request


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), with kmock's own merge for dicts (it copies, never mutates)."""
    if not isinstance(patch, dict):
        return patch
    return dict(dicts.merge_patch_dict(base if isinstance(base, dict) else {}, patch))


class KubeAPIServer:
    """Runs a ``KubeAPI`` on 127.0.0.1 in a background thread (for sync code and CLIs).

    ``url`` is where clients connect; ``objects`` gives the stored objects. ``stop()`` (or the
    context manager) shuts the server and its thread down.
    """

    def __init__(self, setup: Callable[[KubeAPI], None] | None = None) -> None:
        self._setup = setup
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.api: KubeAPI | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kube-api", daemon=True)

    def start(self) -> KubeAPIServer:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as err:  # surfaced by start()
            self._error = err
            self._ready.set()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        async with KubeAPI() as api, kmock.Server(api, host="127.0.0.1") as server:
            self.api = api
            # What every API server serves (kopf waits for these in discovery).
            api.declare(NAMESPACES, "Namespace", namespaced=False, status=False)
            api.declare(EVENTS, "Event", status=False)
            api.declare(CRDS, "CustomResourceDefinition", namespaced=False, status=False)
            if self._setup is not None:
                self._setup(api)
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stopping.wait()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's event loop (to touch ``api.objects`` safely)."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        if self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(30)

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
