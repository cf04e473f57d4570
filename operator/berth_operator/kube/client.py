"""A small generic REST layer over the official kubernetes client (its ApiClient: auth, TLS, retries of
connections), addressing objects by apiVersion and kind. Synchronous: callers run it in asyncio.to_thread.

Responses are plain dicts (no model deserialization: the objects go straight into comparisons). Errors are
the client's ApiException; KubeError turns one into a message that never includes the response body (a
422 body can echo the object sent, and that object may be a Secret).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from ..core import kinds

# Lists and watches of objects' metadata alone (PartialObjectMetadata): a CRD's schema can be megabytes.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
# The one server-side-apply field manager of every object Berth applies
# (docs/decisions/0023-server-side-apply-only-on-difference.md).
FIELD_MANAGER = "berth-operator"


class KubeError(Exception):
    """A failed API call, described by verb, kind, name and HTTP status only."""

    def __init__(self, verb: str, kind: str, name: str, exc: ApiException):
        self.status = exc.status
        self.verb, self.kind, self.name = verb, kind, name
        super().__init__(f"{verb} {kind} {name}: HTTP {exc.status} {exc.reason or ''}".strip())


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None, *,
         all_namespaces: bool = False) -> str:
    """all_namespaces: the collection across every namespace (a namespaced kind with no namespace)."""
    info = kinds.lookup(api_version, kind)
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if info.namespaced and not (all_namespaces and namespace is None and name is None):
        if not namespace:
            raise ValueError(f"{kind} {name} needs a namespace")
        root += f"/namespaces/{namespace}"
    root += f"/{info.plural}"
    return f"{root}/{name}" if name else root


def matches(labels: Mapping[str, str] | None, selector: Mapping[str, str]) -> bool:
    labels = labels or {}
    return all(labels.get(key) == value for key, value in selector.items())


class NotLeader(Exception):
    """A write was refused here, before it was sent: this process no longer holds the leader Lease."""


class Kube:
    """The raw client: every call is one request to the API server. may_write, when given, is asked before every
    write (leader.py's fence: a leader that could not renew its Lease sends nothing more, even from a reconcile
    already running in a worker thread). Cached reads and recorded writes are the cluster view's
    (cluster/view.py), which wraps this client."""

    def __init__(self, configuration: Configuration, *, timeout: float = 30.0,
                 may_write: Callable[[], bool] | None = None):
        self.api = ApiClient(configuration)
        self.timeout = timeout
        self.may_write = may_write

    def close(self) -> None:
        self.api.close()

    def _call(self, method: str, url: str, *, body: Any = None, content_type: str = "application/json",
              query: list[tuple[str, str]] | None = None, accept: str = "application/json") -> dict[str, Any]:
        if method != "GET" and self.may_write is not None and not self.may_write():
            raise NotLeader(f"{method} {url} refused: this operator is not the leader")
        response = self.api.call_api(
            url,
            method,
            query_params=query or [],
            header_params={"Accept": accept, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=self.timeout,
        )
        data = response.data
        return json.loads(data) if data else {}

    def served_kinds(self, api_version: str) -> frozenset[str]:
        """The kinds the API server's discovery lists for a group version (none: not served, 404). Discovery is open
        to every authenticated user (the system:discovery role): it needs no grant of Berth's."""
        root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            answer = self._call("GET", root)
        except ApiException as exc:
            if exc.status != 404:
                raise KubeError("discover", api_version, "", exc) from None
            return frozenset()
        return frozenset(r.get("kind") for r in answer.get("resources") or () if "/" not in (r.get("name") or "/"))

    def get(self, api_version: str, kind: str, namespace: str | None, name: str, *,
            cached: bool = True) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404). (cached: for the view's signature; this client
        always asks the server.)"""
        try:
            return self._call("GET", path(api_version, kind, namespace, name))
        except ApiException as exc:
            if exc.status != 404:
                raise KubeError("get", kind, name, exc) from None
            return None

    def list(self, api_version: str, kind: str, namespace: str | None,
             labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Objects with these labels, from the server, where the selector is sent AND re-checked here (a server
        may ignore it)."""
        selector = dict(labels or {})
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))] if selector else []
        try:
            items = self._call("GET", path(api_version, kind, namespace), query=query).get("items") or []
        except ApiException as exc:
            raise KubeError("list", kind, "", exc) from None
        return [item for item in items if matches((item.get("metadata") or {}).get("labels"), selector)]

    def list_page(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                  continue_token: str | None = None, limit: int = 500,
                  accept: str = "application/json") -> dict[str, Any]:
        """One page of a list (items, metadata.resourceVersion and metadata.continue), for the caches; namespace
        None: every namespace. accept: METADATA_LIST for the objects' metadata alone."""
        query = [("labelSelector", selector), ("limit", str(limit))]
        if continue_token:
            query.append(("continue", continue_token))
        try:
            return self._call("GET", path(api_version, kind, namespace, all_namespaces=True), query=query,
                              accept=accept)
        except ApiException as exc:
            raise KubeError("list", kind, "", exc) from None

    def watch(self, api_version: str, kind: str, namespace: str | None, selector: str, resource_version: str, *,
              timeout_seconds: int, on_response: Callable[[Any], None],
              accept: str = "application/json") -> Iterator[dict[str, Any]]:
        """Watch events after resource_version until the server ends the stream. on_response receives the open
        response (so another thread can shut it down to stop the watch)."""
        query = [("watch", "true"), ("labelSelector", selector), ("resourceVersion", resource_version),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        try:
            response = self.api.call_api(
                path(api_version, kind, namespace, all_namespaces=True), "GET", query_params=query,
                header_params={"Accept": accept}, auth_settings=["BearerToken"],
                _preload_content=False, _return_http_data_only=True, _request_timeout=(10, timeout_seconds + 30))
        except ApiException as exc:
            raise KubeError("watch", kind, "", exc) from None
        on_response(response)
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield json.loads(line)
        finally:
            response.release_conn()

    def apply(self, manifest: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply as FIELD_MANAGER, forcing by default (Berth is the source of every field it sets;
        fields it does not set stay whoever's they are). Creates the object when it does not exist. Without
        force, a field another manager set to another value is a 409 Conflict."""
        meta = manifest["metadata"]
        url = path(manifest["apiVersion"], manifest["kind"], meta.get("namespace"), meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true" if force else "false")]
        try:
            return self._call("PATCH", url, body=dict(manifest), content_type="application/apply-patch+yaml",
                              query=query)
        except ApiException as exc:
            raise KubeError("apply", manifest["kind"], meta["name"], exc) from None

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        url = path(manifest["apiVersion"], manifest["kind"], meta.get("namespace"))
        try:
            return self._call("POST", url, body=dict(manifest), query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as exc:
            raise KubeError("create", manifest["kind"], meta["name"], exc) from None

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str, body: Any, *,
              json_patch: bool = False, subresource: str | None = None) -> dict[str, Any]:
        url = path(api_version, kind, namespace, name) + (f"/{subresource}" if subresource else "")
        content_type = "application/json-patch+json" if json_patch else "application/merge-patch+json"
        try:
            return self._call("PATCH", url, body=body, content_type=content_type,
                              query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as exc:
            raise KubeError("patch", kind, name, exc) from None

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *, uid: str | None = None) -> bool:
        """Delete; with uid, only that incarnation (a precondition). False when it was already gone."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", path(api_version, kind, namespace, name), body=body)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise KubeError("delete", kind, name, exc) from None
