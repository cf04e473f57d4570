"""Authentication: at most one provider (htpasswd, token or silly), in one of two places.

Distribution's config.yml has auth at its top level (architecture document section 2.3.1), and so does
spec.config.auth; the architecture document's CRD (section 2.3.3) puts it under spec.config.storage.auth.
Both are accepted, at most one of them names a provider, and `auth_in_use` says which one a spec uses, so
every message names the field the user wrote.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import Field, model_validator

from .types import ApiModel, ConfigMapKeyRef, SecretKeyRef, v3_only_message

# The two places auth may be written, as field paths from the Registry (for messages).
AUTH_PATH = "spec.config.auth"
STORAGE_AUTH_PATH = "spec.config.storage.auth"
BOTH_PLACES_MESSAGE = ("set auth in one place: spec.config.auth or spec.config.storage.auth "
                       "(the same field, and the registry takes one provider)")


class Htpasswd(ApiModel):
    secret: SecretKeyRef = Field(description="Secret key holding an htpasswd file (bcrypt entries).")


# The JWS algorithms Distribution 3 accepts in auth.token.signingalgorithms (its default is all of them;
# registry/auth/token/accesscontroller.go, go-jose names).
SIGNING_ALGORITHMS = ("EdDSA", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                      "PS256", "PS384", "PS512")
SigningAlgorithm = Literal["EdDSA", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                           "PS256", "PS384", "PS512"]
# The token fields Distribution 2.8 does not know (API name), refused on 2.8 by the model and the CRD.
TOKEN_V3_FIELDS = ("jwks", "signingAlgorithms", "autoRedirectPath")


def token_v3_message(field: str, path: str = AUTH_PATH) -> str:
    """path: where the spec writes auth (AUTH_PATH or STORAGE_AUTH_PATH), named without the spec. prefix."""
    return v3_only_message(f"{path.removeprefix('spec.')}.token.{field}")


class TrustKeyRef(ApiModel):
    """A key of a Secret or of a ConfigMap (trust bundles are often ConfigMaps, e.g. trust-manager's)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.secret) != has(self.configMap)",
                 "message": "set exactly one of secret and configMap"}
            ]
        }
    }

    secret: SecretKeyRef | None = Field(None, description="A key of a Secret.")
    config_map: ConfigMapKeyRef | None = Field(None, alias="configMap", description="A key of a ConfigMap.")

    @model_validator(mode="after")
    def _exactly_one(self) -> TrustKeyRef:
        if (self.secret is None) == (self.config_map is None):
            raise ValueError("set exactly one of secret and configMap")
        return self

    @property
    def kind(self) -> Literal["Secret", "ConfigMap"]:
        return "Secret" if self.secret is not None else "ConfigMap"

    @property
    def ref(self) -> SecretKeyRef | ConfigMapKeyRef:
        ref = self.secret if self.secret is not None else self.config_map
        assert ref is not None
        return ref


class TokenAuth(ApiModel):
    """Bearer tokens (JWTs) from an external issuer, trusted through its certificates or keys. The registry
    reads the bundle and the JWKS once at start: the agent restarts it (hitlessly) when they change."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.rootCertBundle) || has(self.jwks)",
                 "message": "set rootCertBundle, jwks or both: the registry needs keys to trust"}
            ]
        }
    }

    realm: str = Field(min_length=1, max_length=2048, pattern=r"^https?://[^\s]+$",
                       description="URL of the token endpoint that clients are sent to (WWW-Authenticate realm).")
    service: str = Field(min_length=1, max_length=1024, description="Service name tokens must be issued for (aud).")
    issuer: str = Field(min_length=1, max_length=1024, description="Issuer name tokens must carry (iss).")
    auto_redirect: bool = Field(False, alias="autoRedirect",
                                description="Redirect clients to the realm on this registry's own host.")
    root_cert_bundle: TrustKeyRef | None = Field(
        None, alias="rootCertBundle",
        description="PEM certificates the token signing certificates (x5c) must chain to, from a Secret or "
        "ConfigMap key.")
    jwks: TrustKeyRef | None = Field(
        None, description="A JSON Web Key Set of trusted signing keys, from a Secret or ConfigMap key "
        "(Distribution 3 only).")
    signing_algorithms: list[SigningAlgorithm] | None = Field(
        None, alias="signingAlgorithms", min_length=1, max_length=len(SIGNING_ALGORITHMS),
        description="JWS algorithms accepted (Distribution 3 only; default: all).")
    auto_redirect_path: str | None = Field(
        None, alias="autoRedirectPath", min_length=1, max_length=1024, pattern=r"^/[^\s]*$",
        description="Path of the realm when autoRedirect is set (Distribution 3 only; default /auth/token).")

    @model_validator(mode="after")
    def _some_trust(self) -> TokenAuth:
        if self.root_cert_bundle is None and self.jwks is None:
            raise ValueError("set rootCertBundle, jwks or both: the registry needs keys to trust")
        return self

    def v3_fields_set(self) -> list[str]:
        """The Distribution-3-only fields this spec sets, by API name."""
        values = {"jwks": self.jwks, "signingAlgorithms": self.signing_algorithms,
                  "autoRedirectPath": self.auto_redirect_path}
        return [name for name in TOKEN_V3_FIELDS if values[name] is not None]


class SillyAuth(ApiModel):
    """FOR TESTS ONLY: lets in any request that carries an Authorization header, whatever it holds. The agent
    posts a Warning Event while a Registry uses it."""

    realm: str = Field(min_length=1, max_length=2048, description="Realm sent in the WWW-Authenticate challenge.")
    service: str = Field(min_length=1, max_length=1024, description="Service sent in the challenge.")


AUTH_MESSAGE = "set at most one auth provider: htpasswd, token or silly"


class Auth(ApiModel):
    """At most one provider: the registry refuses more than one."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "[has(self.htpasswd), has(self.token), has(self.silly)].filter(x, x).size() <= 1",
                 "message": AUTH_MESSAGE}
            ]
        }
    }

    htpasswd: Htpasswd | None = Field(None, description="Basic authentication from an htpasswd file.")
    token: TokenAuth | None = Field(None, description="Bearer tokens from an external issuer.")
    silly: SillyAuth | None = Field(
        None, description="FOR TESTS ONLY: any Authorization header is let in. Never use it in production.")

    @property
    def provider(self) -> Literal["htpasswd", "token", "silly"] | None:
        """The provider this names, if any."""
        for name in ("htpasswd", "token", "silly"):
            if getattr(self, name) is not None:
                return name  # type: ignore[return-value]
        return None

    @model_validator(mode="after")
    def _at_most_one(self) -> Auth:
        if sum(p is not None for p in (self.htpasswd, self.token, self.silly)) > 1:
            raise ValueError(AUTH_MESSAGE)
        return self


EXACTLY_ONE_MESSAGE = ("set exactly one auth provider: htpasswd, token or silly "
                       "(leave auth out for a registry without authentication)")


class ConfigAuth(Auth):
    """spec.config.auth: exactly one provider. (spec.config.storage.auth defaults to an empty object, so there
    an empty one means none; here an auth written without a provider is a mistake.)"""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                *Auth.model_config["json_schema_extra"]["x-kubernetes-validations"],
                {"rule": "has(self.htpasswd) || has(self.token) || has(self.silly)",
                 "message": EXACTLY_ONE_MESSAGE},
            ]
        }
    }

    @model_validator(mode="after")
    def _at_least_one(self) -> ConfigAuth:
        if self.provider is None:
            raise ValueError(EXACTLY_ONE_MESSAGE)
        return self


class AuthInUse(NamedTuple):
    """The auth a spec uses and the path it was written at (AUTH_PATH or STORAGE_AUTH_PATH)."""

    path: str
    auth: Auth


def auth_in_use(top: Auth | None, under_storage: Auth) -> AuthInUse:
    """The one of the two places that names a provider (spec.config.auth when neither does)."""
    if top is not None and top.provider is not None:
        return AuthInUse(AUTH_PATH, top)
    if under_storage.provider is not None:
        return AuthInUse(STORAGE_AUTH_PATH, under_storage)
    return AuthInUse(AUTH_PATH, top if top is not None else under_storage)
