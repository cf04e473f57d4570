"""Fixtures every test folder shares, from tests/support: registered once here, not imported into each module
(an imported fixture is an unused name to a linter, and a test's parameter of that name shadows it)."""

# Imported in this order: a later one imports an earlier one, which must be registered (assert-rewritten) first.
# support.common.signals: every test process starts children with default signal dispositions (a shell cannot trap an
# inherited SIG_IGN).
pytest_plugins = [
    "support.common.signals",
    "support.common.schedule",
    "support.clusters.kube",
    "support.services.redisserver",
    "support.registries.registry",
    "support.clouds.s3",
    "support.clusters.apiserver",
    "support.clusters.control_plane",
    "support.clusters.node",
]
