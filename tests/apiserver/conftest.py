"""The real-API-server tier: kube-apiserver v1.36 and etcd per xdist worker (support.apiserver), a namespace per
test. Skipped, saying why, where the binary or etcd is missing."""

from support.apiserver import apiserver_namespace, kube_apiserver, uncached_apiserver  # noqa: F401  (fixtures)
