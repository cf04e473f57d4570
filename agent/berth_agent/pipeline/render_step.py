"""The pipeline's render step (docs/design.md §4.2): the latest Registry object and the mounted inputs in, a
Rendered out, in a worker thread under a time bound (guard.py). A render whose inputs moved while it was made is
stale: made again, never applied."""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from berth_api import RegistrySpec, describe_validation_error
from berth_api.pod import INPUT_VOLUMES

from ..core import metrics
from ..core.errors import InputError
from ..core.health import Health
from ..core.write import local_http_secret
from ..gc.mode import with_read_only
from ..mounted.mounts import read_inputs
from ..render.config import Rendered, RenderPaths, render
from ..sources.pvc import PvcProbe
from .guard import BoundedThread, Overrun, inputs_fingerprint
from .settings import PipelineSettings

if TYPE_CHECKING:  # API mode only: local mode never loads the API sources
    from ..gc.read_only import GcReadOnly
    from ..sources.api_secrets import ApiSecrets

log = logging.getLogger(__name__)

STALE_RENDERS = 3  # renders overtaken by a newer input before the round gives up and retries later


@dataclass(frozen=True)
class Render:
    """One render step's result. `rendered` None: nothing to apply (`error` says why, if anything)."""

    rendered: Rendered | None
    error: str | None  # the input error to report (beside a render made from the last good Registry object)
    moved: bool = False  # the inputs moved while it was made: stale
    retry: bool = False  # the inputs keep moving: look again in a moment


class RenderStep:
    def __init__(self, settings: PipelineSettings, health: Health, *, pvc: PvcProbe | None = None,
                 api_secrets: ApiSecrets | None = None, gc: GcReadOnly | None = None) -> None:
        self.settings = settings
        self.pvc = pvc  # the data path probe: only filesystem storage has a data path to check
        self.api_secrets = api_secrets  # API mode: copies of the mounted Secrets read over the API
        self.gc = gc  # a standing GC request renders read-only
        self.bounded = BoundedThread(health, settings.render_timeout)  # the render's time bound
        self.replicas = 1  # pods that take turns: spec.replicas, or more while a roll's new pod runs beside the old

    async def current(self, registry: dict | None, registry_error: str | None) -> Render:
        """Render within the time bound, and hand on only a render whose inputs did not move while it was made."""
        for _ in range(STALE_RENDERS):
            outcome = await self.bounded.run(lambda: self._render_and_recheck(registry, registry_error))
            if isinstance(outcome, Overrun):
                return Render(None, outcome)
            if outcome.rendered is None or not outcome.moved:
                return outcome
            log.info("stale render discarded", extra={"fields": {"config_hash": outcome.rendered.identity}})
        return Render(None, None, retry=True)

    def _render_and_recheck(self, registry: dict | None, registry_error: str | None) -> Render:
        before = inputs_fingerprint(self.settings.mount_root)
        result = self._render(registry, registry_error)
        moved = result.rendered is not None and inputs_fingerprint(self.settings.mount_root) != before
        return dataclasses.replace(result, moved=moved)

    def _render(self, registry: dict | None, registry_error: str | None) -> Render:
        """The render and the input error to report, or no render and the error. Runs in a thread: it reads files."""
        if registry is None:
            return Render(None, registry_error)
        metrics.renders_total.inc()
        try:
            spec = RegistrySpec.model_validate(registry.get("spec"))
        except ValidationError as exc:
            metrics.render_errors_total.labels(source="registry").inc()
            # A newer file that could not be read at all is the problem to show, not the older object's.
            return Render(None, registry_error or describe_validation_error(exc, "spec"))
        self.replicas = max(spec.replicas, pods_of(registry))
        # Read-only while a GC request stands (A1): the same hot reload as an edit of the spec's readonly.
        if self.gc is not None and self.gc.hold_for(registry) is not None:
            spec = with_read_only(spec)
        problem = self._data_path_problem(spec)
        if problem:
            return Render(None, problem)
        try:
            rendered = self._render_spec(spec, (registry.get("metadata") or {}).get("name"))
        except InputError as exc:
            metrics.render_errors_total.labels(source=_source_label(exc.source)).inc()
            return Render(None, str(exc))
        # A Registry that could not be re-read: render from the last good one, but keep the error visible.
        return Render(rendered, registry_error)

    def _data_path_problem(self, spec: RegistrySpec) -> str | None:
        """Filesystem storage's data path, probed (object and in-memory storage have none to report missing)."""
        filesystem = spec.config.storage.filesystem is not None
        if self.pvc is None:
            return None
        self.pvc.set_enabled(filesystem)
        if not filesystem:
            return None
        state = self.pvc.check()
        if state.error:
            metrics.render_errors_total.labels(source="pvc").inc()
        return state.error

    def _render_spec(self, spec: RegistrySpec, name: str | None) -> Rendered:
        settings = self.settings
        roots = self.api_secrets.overrides() if self.api_secrets is not None else None
        inputs = read_inputs(spec, settings.mount_root, roots, registry=name)  # messages name the objects made for it
        if inputs.http_secret is None and spec.http.secret is None:
            # Nothing mounted (outside Kubernetes): sign upload state with the agent's own kept secret, so an
            # upload survives a reload (docs/upstream.md#measured-upload-secret).
            inputs = dataclasses.replace(inputs, http_secret=local_http_secret(settings.config_dir))
        rendered = render(spec, inputs, distribution=settings.distribution,
                          paths=RenderPaths(settings.config_dir, settings.data_dir,
                                            outbox_url=settings.outbox_url), registry=name)
        return listen_on(rendered, settings.listen_host) if settings.listen_host else rendered


def pods_of(registry: dict | None) -> int:
    """The Registry's pods as its status counts them: the Deployment's (a roll's new pod beside the old one on a
    ReadWriteOnce claim, docs/decisions/0030-rolls-on-read-write-once.md) or the agents that report, whichever is more.
    They take turns to reload."""
    status = (registry or {}).get("status") or {}
    replicas = status.get("replicas")
    agents = status.get("agents")
    return max(replicas if isinstance(replicas, int) else 0, len(agents) if isinstance(agents, dict) else 0)


def listen_on(rendered: Rendered, host: str) -> Rendered:
    """The same render with http.addr on `host` (its port kept): two local pods on two loopback addresses."""
    document = copy.deepcopy(rendered.document)
    port = rendered.listen_addr.rpartition(":")[2]
    document["http"]["addr"] = f"{host}:{port}"
    config = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=False,
                            width=1000).encode()
    return dataclasses.replace(rendered, config=config, parsed=document)


def _source_label(source: str) -> str:
    """A bounded metrics label for an InputError source: the mount dir name, else 'spec'."""
    head = source.split("/", 1)[0].split(":", 1)[0]
    return head if head in INPUT_VOLUMES else "spec"
