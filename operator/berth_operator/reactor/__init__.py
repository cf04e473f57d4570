"""The reactor: kopf's handlers and the caches' wakes (handlers), the running operator (runner), leader election
(leader) and per-Registry timers (wakeups). It decides when a reconcile runs; the engines decide what it does."""
