"""berth-agent: the sidecar in every registry pod (docs/design.md §4, "Map of the agent").

Layers, lowest first; a module imports only from its own package or a lower layer (tests/agent/test_layers.py):
core; kube, supervisor, inputs; sources, render; apply; gc; pipeline; commands; cli (the entry point).
"""
