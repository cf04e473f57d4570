"""Fixtures' building blocks: real services started on 127.0.0.1 for the tests and the benchmarks,
by what they stand up.

- `clusters/`: Kubernetes for tests: the real API server and its identities, the node tier, kmock's emulator, and
  the operator run against them.
- `registries/`: Registries and registry pods: the real registry, berth-supervise, agents run as pods, replicas,
  garbage collection, the Secret volumes they read.
- `clouds/`: Object stores for tests: moto S3 with IAM, Azurite, fake-gcs-server.
- `services/`: The services a registry talks to: redis, Prometheus, an egress proxy, a notification receiver, a
  token issuer, and the certificates they serve.
- `traffic/`: Clients that bring users' traffic and count what a user would see: pulls, uploads, new connections, a
  balancer in front of pods.
- `common/`: What every fixture uses: free ports, stopping processes, signal dispositions, a test clock, waiting for
  a condition, the import-graph reader of the layer tests, the docs' command blocks.

Each subpackage's `__init__` is the map of its modules. Shared fixtures are registered once, in tests/conftest.py.
"""
