"""The operator's core, its ground floor: what every layer may use and that uses nothing of the operator's: the
table of the kinds it addresses, as data (kinds), clocks, its identity, log setup and its Prometheus metrics. No
I/O."""
