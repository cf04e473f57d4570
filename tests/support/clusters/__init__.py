"""Kubernetes for tests: the real API server and its identities, the node tier, kmock's emulator, and the operator
run against them.

- `apiserver`: A real Kubernetes API server for tests: kube-apiserver v1.36 on Debian's etcd, as envtest runs it.
- `apiserver_identities`: Who talks to the real API server (support.clusters.apiserver) in tests, with the permissions
the
  product gives them
- `apiserver_users`: People on the real API server (support.clusters.apiserver), with the roles a cluster admin gives
  them: static-token users, the documented install, the clusterrole-aggregation controller, RoleBindings.
- `control_plane`: kube-controller-manager and kube-scheduler v1.36 beside a real API server
(support.clusters.apiserver), as
  a cluster runs them: Deployments make ReplicaSets and Pods, the garbage collector deletes what lost its owner, a
  deleted namespace is emptied and goes, each namespace gets its `default` ServiceAccount, the scheduler binds pods
  to nodes (with no node, pods stay Pending with PodScheduled=False: what a busy cluster sends watches).
- `kube`: A Kubernetes API server for tests: kmock's emulator plus our gap fillers, over real HTTP on 127.0.0.1.
- `kube_emulator`: kmock's KubernetesEmulator with the API-server behaviour our clients rely on
  (docs/upstream.md#parts-kmock).
- `kube_selectors`: Label and field selectors as the API server parses them (kmock 0.8 ignores both:
  docs/upstream.md#parts-kmock).
- `kube_strategic`: Strategic merge patch for built-in kinds, driven by the OpenAPI schemas kubernetes-validate
  ships.
- `node`: A single-node Kubernetes cluster on this machine for the `node` tier: pods really run.
- `node_berth`: Berth on the test node (support.clusters.node): installed with `kubectl apply -k deploy` and the image
set,
  Registries made and watched, their pods' processes seen from the host.
- `images`: The node tier's images, built offline and cached by the hash of their inputs
  (docs/upstream.md#parts-real-node).
- `operator_harness`: The operator for tests and bench, against the test API server (support.clusters.kube): in process
  (OperatorHarness: berth_operator.reactor.runner.run, the same code path as `berth-operator`, in a thread), or as a
  `berth-operator` process (OperatorProcess: leader election, kill -9).
- `workload`: The Deployment controller and the kubelet for one Registry's Deployment, played on this machine.
- `pss`: The `restricted` Pod Security Standard (which includes `baseline`), checked field by field.
"""
