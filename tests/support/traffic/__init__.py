"""Clients that bring users' traffic and count what a user would see: pulls, uploads, new connections, a balancer in
front of pods.

- `balancer`: A small TCP balancer in front of registry pods, sending new connections only to ready ones, the way a
  Service's endpoints and kube-proxy do.
- `kept_alive`: A client that keeps one connection alive and never retries: Python's http.client, `GET /v2/` and a
  monolithic blob upload (`POST /v2/REPO/blobs/uploads/`, then `PUT LOCATION?digest=` with the body) in turn, each
  on the one connection it opened first.
- `new_connections`: Clients that open a new connection for every request, as skopeo and many CI clients do, and
  count how each ended.
- `pull_loop`: A client pulling one blob over and over through a registry restart, counting what a user would see.
- `request_loop`: A client asking the registry `GET /v2/` over and over, counting every request that did not get 200
  or 401.
- `upload`: A slow blob upload and a connect probe: what a reload must not break, and what a user would see of it.
"""
