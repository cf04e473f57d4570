"""berth_agent_upstream_auth_failures_total (the BerthPullThroughUpstreamAuthFailing alert): one per
refusal of the credentials the upstream watch takes in; none for a success or an unreachable upstream."""

from __future__ import annotations

from berth_agent.apply.preflight_proxy import UpstreamCheck
from berth_agent.apply.upstream_watch import UpstreamWatch
from berth_agent.core import metrics

URL = "https://registry-1.docker.io"


def test_each_refusal_counts_once():
    watch = UpstreamWatch(applier=None)
    before = metrics.upstream_auth_failures_total._value.get()
    watch.absorb([UpstreamCheck(URL, True, "bearer", authenticated=True)])
    watch.absorb([UpstreamCheck(URL, False)])
    assert metrics.upstream_auth_failures_total._value.get() == before
    watch.absorb([UpstreamCheck(URL, True, "bearer", authenticated=False, failure_status=401,
                                failure_reason="UNAUTHORIZED: incorrect username or password")] * 2)
    assert metrics.upstream_auth_failures_total._value.get() == before + 2
