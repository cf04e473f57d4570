"""The operator's core: what every layer may use and that uses nothing of the operator's: the table of the kinds
it manages (kinds), clocks, its identity, log setup and its Prometheus metrics. No I/O."""
