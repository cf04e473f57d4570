"""Fixtures for the rendering tests: the real registry and moto S3 from tests/support."""

from support.registry import registry_factory  # noqa: F401  (pytest fixture)
from support.s3 import moto_server  # noqa: F401  (pytest fixture)
from support.redisserver import redis_server  # noqa: F401  (pytest fixture)
