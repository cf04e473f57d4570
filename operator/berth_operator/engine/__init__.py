"""The engines: one reconcile of one Registry (reconcile) and what it is made of: look-ups (facts), the apply
layer (apply), growing in place what the kinds' grow hooks plan (expansion), conditions and status (status), the
garbage-collection schedule (gc_schedule). Synchronous, driven by the reactor; they reach the cluster only through
the cluster view."""
