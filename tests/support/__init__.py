"""Fixtures' building blocks: real services started on 127.0.0.1 (registry, moto S3, kmock API server)."""
