"""Registries and registry pods: the real registry, berth-supervise, agents run as pods, replicas, garbage
collection, the Secret volumes they read.

- `registry`: The real registry (Debian's /usr/bin/docker-registry, Distribution 2.8) on 127.0.0.1, and a real
  client.
- `pod`: A registry pod on this machine for end-to-end tests and benchmarks: `berth-agent run` as a subprocess (what
  users run), the real berth-supervise and the real registry, sharing a config dir as the pod's containers share the
  `config` volume, with a mount root of AtomicWriter Secret dirs (support.registries.secretdir).
- `replicas`: Two (or more) registry pods of one Registry on this machine, taking turns through its reload Lease.
- `supervisor`: berth-supervise, the registry container's command, running the real registry, for the agent's tests
  and benchmarks.
- `gc`: Garbage collection end to end: asking for a run as the operator does, waiting for its result, and
  looking at what it left on the storage.
- `gc_store`: A registry store with many blobs, about half of them unreferenced: what a garbage collection has to
  walk.
- `stuck_store`: A filesystem registry store on which the real `registry garbage-collect` blocks until it is killed.
- `secretdir`: Secret volumes laid out on disk exactly as the kubelet's AtomicWriter writes them
  (docs/upstream.md#k8s-atomic-writer).
- `mountkit`: Mount roots for rendering tests: every Secret an example Registry needs, laid out as the kubelet lays
  them out, each value remembered so a test can assert none leaks.
- `sources`: Running an agent source (anything with `async run(emit)`) for the length of a test block.
- `readyz`: Ask an agent's /readyz every 10 ms in a thread, keeping (wall time the question was sent, status) per
  answer.
- `upstream`: An upstream for a pull-through cache: a second real registry on 127.0.0.1, with htpasswd (basic auth)
  or token auth, whose requests are counted.
"""
