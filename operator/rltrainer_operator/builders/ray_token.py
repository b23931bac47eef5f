"""The Ray auth token of an experiment (``rayAuth.mode: token``) and the Secret that holds it.

The token is derived, never stored by the operator: HMAC-SHA256 of the experiment's uid under
the operator's key (``RLTRAINER_OPERATOR_RAY_TOKEN_KEY``). So the operator can always compute
what a cluster expects without reading any Secret (it may only create them): it writes the
token once into ``<cluster>-ray-token`` (key ``auth_token``, owned by the experiment, so the
garbage collector deletes it with it); KubeRay's ``authOptions.secretName`` hands it to every
Ray container as ``RAY_AUTH_TOKEN``, and the operator sends it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from rltrainer_operator.builders.naming import labels, ray_token_secret_name
from rltrainer_operator.builders.raycluster import owner_reference

#: The Secret key KubeRay reads the token from (its ``RAY_AUTH_TOKEN_SECRET_KEY``).
TOKEN_KEY = "auth_token"
#: Keeps these tokens apart from anything else ever derived from the same key.
_PURPOSE = b"rltrainer-ray-token:"


def ray_token(key: str, uid: str) -> str:
    """The token of the experiment with ``uid``: 64 hex characters, stable for a (key, uid)."""
    return hmac.new(key.encode(), _PURPOSE + uid.encode(), hashlib.sha256).hexdigest()


def build_token_secret(experiment: dict[str, Any], cluster: str, token: str) -> dict[str, Any]:
    """The Secret ``<cluster>-ray-token`` for ``experiment`` (its body, for the owner)."""
    meta = experiment["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ray_token_secret_name(cluster),
            "namespace": meta["namespace"],
            "labels": labels(meta["name"]),
            "ownerReferences": [owner_reference(experiment)],
        },
        "type": "Opaque",
        "immutable": True,  # the token of an experiment never changes
        "stringData": {TOKEN_KEY: token},
    }
