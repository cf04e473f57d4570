"""The command lines: `berth-agent run` (run: wiring the layers for API or file mode) and `berth-agent render`
(render: one render, printed).
"""
