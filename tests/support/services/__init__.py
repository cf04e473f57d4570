"""The services a registry talks to: redis, Prometheus, an egress proxy, a notification receiver, a token issuer,
and the certificates they serve.

- `redisserver`: A real redis (Debian's redis-server) on 127.0.0.1 with a password, for the registry's blob
  descriptor cache.
- `prometheus`: A real Prometheus (Debian's `prometheus` 2.42 package) on 127.0.0.1, started by a test, never as a
  service.
- `tinyproxy`: A real HTTP egress proxy (Debian's tinyproxy) for the pre-flights and the registry's pull-through
  cache.
- `notifications`: A webhook receiver on 127.0.0.1 for Distribution's notifications: records every event envelope it
  is POSTed, with the request headers, and answers 200 (after `delay` seconds, to stand for a slow consumer).
- `token_issuer`: A token issuer for the distribution token protocol, on 127.0.0.1, and a client that follows the
  challenge.
- `certs`: Self-signed certificates for 127.0.0.1 and localhost, for TLS servers the tests start (registry, redis),
  and pairs for the agent's TLS pre-flight (expired, ending soon, encrypted key).
"""
