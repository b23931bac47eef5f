"""Names and labels the operator derives from an experiment: deterministic, so a restarted
operator finds what it created instead of creating it twice."""

from __future__ import annotations

import hashlib
import re

MANAGED_BY = "rltrainer-operator"
EXPERIMENT_LABEL = "rltrainer.io/experiment"
#: KubeRay: once provisioned, do not recreate a lost head (a new head loses every worker and job;
#: the operator restarts the experiment from its newest checkpoint instead).
NO_HEAD_RESTART_ANNOTATION = "ray.io/disable-provisioned-head-restart"

#: KubeRay derives pod and service names from the cluster's (``<cluster>-head-svc``, ...):
#: keep room under Kubernetes' 63-character limit.
MAX_CLUSTER_NAME = 50
#: What KubeRay requires of a RayCluster's name (``ValidateRayClusterMetadata``): a DNS-1035
#: label, since its head Service is named after it. An RLExperiment's name is a DNS-1123
#: subdomain, which may hold dots (``ppo.cartpole``).
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def raycluster_name(experiment: str) -> str:
    """``rlx-<experiment>`` when that is a DNS-1035 label of at most ``MAX_CLUSTER_NAME``
    characters; otherwise the same with dots as dashes, cut to fit, and a hash of the whole
    experiment name appended (``ppo.cartpole`` -> ``rlx-ppo-cartpole-<8 hex>``), so that two
    experiments of one namespace never map to one cluster. The operator records the name in
    ``status.rayClusterName``."""
    name = f"rlx-{experiment}"
    if len(name) <= MAX_CLUSTER_NAME and _DNS1035_LABEL.match(name):
        return name
    digest = hashlib.sha256(experiment.encode()).hexdigest()[:8]
    return f"{name.replace('.', '-')[: MAX_CLUSTER_NAME - 9].rstrip('-')}-{digest}"


def ray_token_secret_name(cluster: str) -> str:
    """``<cluster>-ray-token``: the Secret holding a RayCluster's Ray auth token (key ``auth_token``)."""
    return f"{cluster}-ray-token"


def job_id(namespace: str, experiment: str, uid: str, attempt: int) -> str:
    """The Ray job submission id of one attempt (one per start: the first run and each restart)."""
    return f"rlx-{namespace}-{experiment}-{uid[:8]}-{attempt}"


def labels(experiment: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Labels on everything the operator creates for ``experiment`` (selectable)."""
    return {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/name": "rltrainer",
        EXPERIMENT_LABEL: experiment,
        **(extra or {}),
    }
