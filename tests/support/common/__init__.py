"""What every fixture uses: free ports, stopping processes, signal dispositions, a test clock, waiting for a
condition, the import-graph reader of the layer tests, the docs' command blocks.

- `ports`: Free TCP ports for the services tests start: on 127.0.0.1, and on the other loopback addresses that tests
  put replicas on (support.registries.replicas: 127.0.0.2, ...), and who listens on one.
- `processes`: Stopping a service a fixture started: SIGTERM, a bounded wait, then SIGKILL, and close its log file;
  the start every service shares; whether a child exited and waits to be reaped (`exited_unreaped`).
- `signals`: Every process a test starts begins with default signal dispositions, as a container's command does.
- `clock`: A debounce clock that moves only when the test steps it (agent `Pipeline(clock=...)`).
- `polling`: Waiting for a condition, in a thread (`wait_for`) or on an event loop (`until`): the one polling loop
  of the tests and benchmarks, failing with what was awaited.
- `layers`: A program's import graph, for the layer tests of the agent (tests/agent/test_layers.py) and the operator
  (tests/operator/test_layers.py): every import counts, also one inside a function or under TYPE_CHECKING (a cycle
  hidden that way is still one a reader has to untangle).
- `schedule`: The order xdist's workers take the suite in (the node tier's exclusive tests first on one worker, its
  shared ones at the ends of the others), and `BERTH_TEST_TIMELINE`, each test's worker and times.
- `doc_commands`: The code blocks of README.md and docs/, and the markers that say who runs them, so that the docs
  cannot rot.
"""
