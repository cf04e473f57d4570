"""The token issuer fixture (support.services.token_issuer) on its own, then against the real registry, 2.8 and 3.1.1,
configured by the agent's renderer: skopeo pushes and pulls with tokens, a plain client follows the challenge,
and a token signed by a key the bundle does not trust, or for another service, gets 401."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from berth_agent.mounted.mounts import MountedInputs
from berth_agent.render.config import RenderPaths, render
from berth_api import Registry
from support.common.ports import free_port
from support.registries.registry import push_and_pull_back
from support.services.token_issuer import (
    TestCA,
    TokenIssuer,
    bearer_status,
    bundle,
    challenged_get,
    fetch_token,
    jwks,
    parse_challenge,
)

SERVICE = "berth-test-registry"
ALICE = ("alice", "alice-password")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_minted_tokens_verify_with_the_signing_key(alg):
    key = TestCA().issue(alg)
    issuer = TokenIssuer(key)
    token = issuer.mint(SERVICE, "repository:demo/app:pull,push")
    header, claims, signature = token.split(".")
    head, body = json.loads(_unb64(header)), json.loads(_unb64(claims))
    assert head["alg"] == alg and len(head["x5c"]) == 2
    assert body["aud"] == SERVICE and body["access"] == [{"type": "repository", "name": "demo/app",
                                                          "actions": ["pull", "push"]}]
    data, raw = f"{header}.{claims}".encode(), _unb64(signature)
    public = key.private_key.public_key()
    if alg == "RS256":
        public.verify(raw, data, padding.PKCS1v15(), hashes.SHA256())
    else:
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        public.verify(der, data, ec.ECDSA(hashes.SHA256()))
    assert json.loads(jwks(key))["keys"][0]["kid"] == key.kid
    kid_only = TokenIssuer(key, header="kid").mint(SERVICE)
    assert json.loads(_unb64(kid_only.split(".")[0])) == {"typ": "JWT", "alg": alg, "kid": key.kid}


def test_the_endpoint_wants_basic_auth_and_the_key_switches():
    ca = TestCA(kind="ec")
    first, second = ca.issue("ES256"), ca.issue("RS256")
    with TokenIssuer(first) as issuer:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{issuer.realm}?service={SERVICE}", timeout=5)
        assert refused.value.code == 401 and issuer.refused == 1
        challenge = parse_challenge(f'Bearer realm="{issuer.realm}",service="{SERVICE}",scope="repository:a:pull"')
        token = fetch_token(challenge, ALICE)
        assert json.loads(_unb64(token.split(".")[0]))["alg"] == "ES256" and issuer.issued == 1
        issuer.use(second)
        assert json.loads(_unb64(fetch_token(challenge, ALICE).split(".")[0]))["alg"] == "RS256"


def token_spec(port: int, realm: str, major: str, **token) -> Registry:
    token = {"realm": realm, "service": SERVICE, "issuer": "berth-test-issuer",
             "rootCertBundle": {"configMap": {"name": "trust", "field": "ca.pem"}}, **token}
    return Registry.model_validate({"spec": {"image": f"registry:{major}", "config": {"storage": {
        "inmemory": {}, "auth": {"token": token}}}, "http": {"addr": f"127.0.0.1:{port}"}}}).spec


def rendered_config(tmp_path, spec, major, **inputs) -> bytes:
    rendered = render(spec, MountedInputs(**inputs), distribution=major, paths=RenderPaths(config_dir=tmp_path))
    for name, data in rendered.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return rendered.config


def test_push_pull_and_the_refusals_on_the_real_registry(dist, registry_factory, tmp_path):
    major, binary = dist
    ca, stranger = TestCA("issuer-ca"), TestCA("stranger-ca", kind="ec")
    with TokenIssuer(ca.issue("RS256"), users=dict([ALICE])) as issuer:
        port = free_port()
        config = rendered_config(tmp_path / "config", token_spec(port, issuer.realm, major), major,
                                 token_bundle=bundle(ca))
        registry = registry_factory(config, binary=binary)
        pushed, pulled = push_and_pull_back(registry, tmp_path / "images", reference="demo/app:1", creds=ALICE)
        assert pulled.blobs == pushed.blobs
        url = f"{registry.url}/v2/demo/app/blobs/{pushed.layer_digests[0]}"
        status, _, token = challenged_get(url, ALICE)
        assert status == 200 and token
        issuer.use(ca.issue("ES256"))  # another key of the same CA: trusted through the chain
        assert challenged_get(url, ALICE)[0] == 200
        scope = "repository:demo/app:pull"
        assert bearer_status(url, issuer.mint(SERVICE, scope, key=stranger.issue("ES256"))) == 401
        assert bearer_status(url, issuer.mint("another-service", scope)) == 401
        assert bearer_status(url, issuer.mint(SERVICE, scope)) == 200


def test_a_jwks_on_3(dist, registry_factory, tmp_path):
    major, binary = dist
    if major != "3":
        pytest.skip("jwks is a Distribution 3 option (the model refuses it on 2.8)")
    ca = TestCA("jwks-ca")
    key, stranger = ca.issue("RS256"), ca.issue("ES256")
    with TokenIssuer(key, header="kid") as issuer:
        spec = token_spec(free_port(), issuer.realm, major, rootCertBundle=None,
                          jwks={"secret": {"name": "keys", "field": "jwks.json"}}, signingAlgorithms=["RS256", "ES256"])
        registry = registry_factory(rendered_config(tmp_path / "config", spec, major, token_jwks=jwks(key)),
                                    binary=binary)
        pushed, pulled = push_and_pull_back(registry, tmp_path / "images", reference="demo/app:1", creds=ALICE)
        assert pulled.blobs == pushed.blobs
        url = f"{registry.url}/v2/demo/app/blobs/{pushed.layer_digests[0]}"
        assert bearer_status(url, issuer.mint(SERVICE, "repository:demo/app:pull")) == 200
        assert bearer_status(url, issuer.mint(SERVICE, "repository:demo/app:pull", key=stranger)) == 401
        assert bearer_status(url, issuer.mint("another-service", "repository:demo/app:pull")) == 401
