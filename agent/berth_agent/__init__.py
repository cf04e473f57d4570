"""berth-agent: the sidecar in every registry pod (docs/design.md §1.1).

Layers, lowest first; a module imports only from its own package or a lower layer (tests/agent/test_layers.py):
core; kube, restart, mounted, outbox; sources, render; apply; gc; pipeline; commands; cli (the entry point).
"""
