"""How fast the standby operator takes over: two `berth-operator` processes against the test API server, as
deploy/ runs two replicas; print the seconds from the leader's end to the standby holding the Lease, and to an
edit made meanwhile reaching status.

    python bench/operator_failover.py [--rounds 3] [--lease-duration 15 --renew-deadline 10 --retry-period 2]

Each round: start two operators (one Registry exists), wait until one leads and the Registry is reconciled,
then end the leader and edit the Registry at once. `kill -9` leaves the Lease to expire (bound: lease duration
+ retry period); SIGTERM releases it (bound: retry period). The defaults are deploy/'s.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.clusters.kube import KubeApi  # noqa: E402
from support.clusters.operator_harness import REGISTRIES_PATH, OperatorProcess  # noqa: E402
from support.common.polling import wait_for  # noqa: E402

NS = "bench"


def wait(predicate, what: str, timeout: float = 120) -> float:
    """The monotonic time at which predicate() first held, polled every 20 ms."""
    wait_for(predicate, what, timeout, 0.02)
    return time.monotonic()


def reconciled(api: KubeApi, name: str) -> bool:
    reg = api.get(REGISTRIES_PATH, NS, name) or {}
    status = reg.get("status") or {}
    return bool(status.get("conditions")) and status.get("observedGeneration") == reg["metadata"]["generation"]


def one_round(how: str, lease: dict, log_dir: pathlib.Path, index: int) -> tuple[float, float]:
    with KubeApi() as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.create({"apiVersion": "berth.dev/v1alpha1", "kind": "Registry", "metadata": {"name": "r", "namespace": NS},
                    "spec": {"config": {"storage": {"inmemory": {}}}}})
        procs = [OperatorProcess(api, f"{how}-{index}-{x}", log_dir, [NS], lease=lease).start() for x in "ab"]
        try:
            wait(lambda: procs[0].lease_holder() in {p.name for p in procs}, "a leader")
            leader = next(p for p in procs if p.name == procs[0].lease_holder())
            standby = next(p for p in procs if p is not leader)
            wait(lambda: reconciled(api, "r"), "the first reconcile")
            wait(standby.health, "the standby's health endpoint")
            if how == "kill":
                leader.kill()
            else:
                leader.stop()
            ended = time.monotonic()
            api.patch(REGISTRIES_PATH, NS, "r", {"spec": {"config": {"log": {"level": "debug"}}}})
            took = wait(lambda: standby.lease_holder() == standby.name, "the takeover")
            done = wait(lambda: reconciled(api, "r"), "the edit to be reconciled")
            return took - ended, done - ended
        finally:
            for p in procs:
                p.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    args = parser.parse_args()
    lease = {"duration": args.lease_duration, "renew_deadline": args.renew_deadline,
             "retry_period": args.retry_period}
    print(f"lease duration {args.lease_duration:g} s, renew deadline {args.renew_deadline:g} s, "
          f"retry period {args.retry_period:g} s; {args.rounds} rounds each")
    with tempfile.TemporaryDirectory(prefix="berth-failover-") as logs:
        for how, bound in (("kill", args.lease_duration + args.retry_period), ("sigterm", args.retry_period)):
            results = [one_round(how, lease, pathlib.Path(logs), i) for i in range(args.rounds)]
            takeovers, edits = [r[0] for r in results], [r[1] for r in results]
            print(f"{'kill -9' if how == 'kill' else 'SIGTERM'} of the leader (bound {bound:g} s): "
                  f"Lease taken after {min(takeovers):.2f} to {max(takeovers):.2f} s "
                  f"(median {statistics.median(takeovers):.2f}); edit reconciled after {min(edits):.2f} to "
                  f"{max(edits):.2f} s (median {statistics.median(edits):.2f})")


if __name__ == "__main__":
    main()
