"""Following watch streams, as the caches, discovery and the watches by name all do (one way, written once).

- `Streams.follow` reads one watch after a resourceVersion until the server ends it (timeoutSeconds: re-opened at least
  every 5 minutes, idle connections get dropped: docs/upstream.md#k8s-watch-timeouts), passing each ADDED, MODIFIED or
  DELETED event on and skipping bookmarks; it returns the resourceVersion to resume from, or None after 410 Gone (list
  again). Any other error event raises.
- `Streams.start` runs one thread per kind and namespace (the informers, the watches by name: a thread per kind,
  never per Registry); `Streams.stop` unblocks every read in flight (the open responses are kept by slot), so
  those threads end at once, and joins them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ..kube.client import Kube

WATCH_SECONDS = 270
OnEvent = Callable[[str, Mapping[str, Any]], None]  # (ADDED | MODIFIED | DELETED, the object)


class Streams:
    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: dict[Hashable, Any] = {}
        self._threads: list[threading.Thread] = []

    def start(self, name: str, run: Callable[[str, str, str | None], None], kinds: Iterable[tuple[str, str]],
              namespaces: Iterable[str | None]) -> None:
        """run(apiVersion, kind, namespace) in a thread of its own for each kind and namespace."""
        namespaces = tuple(namespaces)
        for api_version, kind in kinds:
            for namespace in namespaces:
                thread = threading.Thread(target=run, args=(api_version, kind, namespace), daemon=True,
                                          name=f"berth-{name}-{kind}-{namespace or 'all'}")
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        with self._lock:
            responses = list(self._open.values())
        for response in responses:
            try:
                response.shutdown()  # unblocks the reader
            except Exception:  # already closed  # noqa: BLE001
                pass
        for thread in self._threads:
            thread.join(10)

    def follow(self, kube: Kube, slot: Hashable, api_version: str, kind: str, namespace: str | None,
               selector: str, version: str, on_event: OnEvent, **options: Any) -> str | None:
        """options: the watch's own (accept=METADATA_WATCH for metadata alone)."""

        def opened(response: Any) -> None:
            with self._lock:
                self._open[slot] = response
            if self.stopping.is_set():
                response.shutdown()

        try:
            for event in kube.watch(api_version, kind, namespace, selector, version, timeout_seconds=WATCH_SECONDS,
                                    on_response=opened, **options):
                kind_of_event, obj = event.get("type"), event.get("object") or {}
                if kind_of_event == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error {obj.get('code')} {obj.get('reason')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind_of_event != "BOOKMARK":
                    on_event(str(kind_of_event), obj)
        finally:
            with self._lock:
                self._open.pop(slot, None)
        return version
