"""Fixtures every test folder shares, from tests/support: registered once here, not imported into each module
(an imported fixture is an unused name to a linter, and a test's parameter of that name shadows it)."""

# Imported in this order: a later one imports an earlier one, which must be registered (assert-rewritten) first.
# support.signals: every test process starts children with default signal dispositions (a shell cannot trap an
# inherited SIG_IGN).
pytest_plugins = ["support.signals", "support.kube", "support.redisserver", "support.registry", "support.s3",
                  "support.apiserver", "support.control_plane", "support.node"]
