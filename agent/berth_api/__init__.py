"""The Registry API (berth.dev/v1alpha1): the single source of truth for the CRD, the operator and the agent."""

from .registry import (
    API_VERSION,
    DEFAULT_IMAGE,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    AgentRecord,
    Condition,
    Registry,
    RegistrySpec,
    RegistryStatus,
    describe_validation_error,
    distribution_from_image,
    type_meta_problem,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_IMAGE",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "AgentRecord",
    "Condition",
    "Registry",
    "RegistrySpec",
    "RegistryStatus",
    "describe_validation_error",
    "distribution_from_image",
    "type_meta_problem",
]
