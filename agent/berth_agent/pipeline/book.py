"""What the pipeline last told the Registry's status, so each state is written once and said once in the log
(docs/design.md §4.4): the error on status, the applied record, the config the last ConfigApplied Event named, a
problem from the registry watch, and "waiting for the registry container"."""

from __future__ import annotations

import logging

from ..core import metrics
from ..render.config import Rendered
from .report import Reporter
from .retry import Retries

log = logging.getLogger(__name__)


def show_current(current: Rendered | None) -> None:
    """config_info: the config a registry was seen answering on (none while nothing is verified)."""
    if current is None:
        metrics.config_info.clear()
    else:
        metrics.set_config_identity(current.identity)


class StatusBook:
    def __init__(self, reporter: Reporter, retries: Retries) -> None:
        self.reporter = reporter
        self.retries = retries  # a status write the API refused is tried again on a retry
        self.error: str | None = None  # the error status says
        self.hash: str | None = None  # the config the last ConfigApplied Event named
        # (config hash, generation, trust) of the last applied record the API accepted: status.agents.<pod> says it
        self.record: tuple | None = None
        self.record_written = True  # the latest status write (applied or failed) reached the API
        self.pending = False  # "waiting for the registry container" is on status
        self.problem: str | None = None  # from the registry watch: no supervisor, a crash loop
        self.problem_reason: str | None = None  # the Event reason last sent for it

    async def fail(self, error: str, generation: int | None, current: Rendered | None, *, event: bool = True) -> None:
        if error == self.error and self.record_written:
            return  # the same problem seen again (resync): already in status and the log
        first = error != self.error
        if first:
            log.error("failed", extra={"fields": {
                "action": "failed", "error": error, "config_hash": current.identity if current else None}})
        self.error = error
        self.record_written = await self.reporter.failed(error, generation)
        if not self.record_written:
            self.retries.schedule()
        if event and first:
            await self.reporter.event("ConfigRejected", error, warning=True)

    async def settle(self, error: str | None, generation: int | None, current: Rendered | None,
                     served_generation: int | None) -> None:
        """Report the state after a round: the input error if any is left, else the applied config.

        The record names the config served and the newest generation whose render it is
        (docs/decisions/0017-status-records-and-ready.md): written when either moved, so an edit that renders what
        already runs is reported at once; a write the API refused is tried again on a retry and on every later round."""
        error = error or self.problem
        if error:
            await self.fail(error, generation, current)
            return
        if current is None:
            return
        show_current(current)
        trust = current.trust
        served = (current.identity, served_generation, tuple(sorted(trust.items())))
        if self.error is None and self.record == served and self.record_written:
            return
        # trust only with token auth, so a reporter of before it needs no change
        written = await self.reporter.applied(*served[:2], **({"trust": trust} if trust else {}))
        if self.error is not None:
            # The refused input (or the problem) is gone: say so where the `failed` line was, once.
            log.info("recovered", extra={"fields": {"action": "recovered", "config_hash": current.identity,
                                                    "generation": served_generation, "cleared": self.error}})
        if self.hash is not None and self.hash != current.identity:
            await self.reporter.event("ConfigApplied", f"registry runs config {current.identity[:12]}")
        self.error, self.hash = None, current.identity
        self.record = served if written else None
        self.record_written = written
        if not written:
            self.retries.schedule()  # the status write was lost (the API refused it): report again shortly

    async def waiting_for_registry(self, detail: str | None, fields: dict) -> None:
        """status.agents.<pod>.waiting until a registry answers (applied clears it); said once."""
        if not self.pending:
            self.pending = True
            log.info("waiting for the registry container", extra={"fields": fields})
            await self.reporter.waiting(detail)

    async def watch_problem(self, reason: str, problem: str | None, generation: int | None,
                            current: Rendered | None) -> bool:
        """A problem from the registry watch (None: it ended): status and one Event per problem. True when it
        ended, and the state after it is to be settled."""
        self.problem = problem
        if problem is None:
            self.problem_reason = None
            return True
        log.error("registry problem", extra={"fields": {"reason": reason, "error": problem}})
        if reason != self.problem_reason:  # one Event per problem; its text (an exit count) moves on status
            await self.reporter.event(reason, problem, warning=True)
        self.problem_reason = reason
        await self.fail(problem, generation, current, event=False)
        return False
