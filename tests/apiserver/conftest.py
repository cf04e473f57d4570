"""The real-API-server tier: kube-apiserver v1.36 and etcd per xdist worker (support.clusters.apiserver), a namespace
per
test. Skipped, saying why, where the binary or etcd is missing. Its fixtures (kube_apiserver, apiserver_namespace,
uncached_apiserver) are registered for every test in tests/conftest.py."""
