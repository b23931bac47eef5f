"""The one module that talks to the Kubernetes API (besides kopf itself).

It uses the ``kubernetes`` client's custom-objects API (KubeRay publishes no Python client on
PyPI) and translates the API's answers into what the reconciler needs: 404 on get/delete is
"absent", 409 on create is "already there" (idempotency after an operator restart), and any
other failure is a ``kopf.TemporaryError`` so kopf retries later. Patches to custom resources
are JSON merge patches (custom resources support no strategic merge). The core API serves one
call: creating each experiment's Ray token Secret (the operator may create Secrets, never read
them).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import kopf
import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from rltrainer import __version__
from rltrainer_operator.models import GROUP, PLURAL, VERSION
from rltrainer_operator.queueing import JOB_UID_LABEL, WORKLOAD_GROUP, WORKLOAD_PLURAL, WORKLOAD_VERSION

logger = logging.getLogger(__name__)

RAY_GROUP, RAY_VERSION, RAY_PLURAL = "ray.io", "v1", "rayclusters"
MERGE_PATCH = "application/merge-patch+json"
#: The API did not answer at all (refused, reset, timed out after the client's own retries).
TRANSPORT_ERRORS = (OSError, urllib3.exceptions.HTTPError)
#: Seconds before kopf retries after an API failure.
RETRY_DELAY_S = 10
#: The longest wait for an answer to a call that sets no shorter one (the client's default is no
#: bound): on a connection that stays open and answers nothing (a stalled proxy, a half-open
#: connection after a network fault) a call would otherwise hang its reconcile, and the
#: experiment's lock, forever. The API server's own limit on a request (``--request-timeout``).
REQUEST_TIMEOUT_S = 60


USER_AGENT = f"rltrainer-operator/{__version__}"


def make_api_client(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    """An API client from the ``kubeconfig`` file, else in-cluster, else ``$KUBECONFIG`` /
    ``~/.kube/config``."""
    configuration = kubernetes.client.Configuration()
    if kubeconfig is not None:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException:
            # KUBECONFIG read now: the client reads it once at import, before a caller may set it.
            kubernetes.config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration
            )
    client = kubernetes.client.ApiClient(configuration)
    client.user_agent = USER_AGENT  # tells the operator's requests apart in audit logs
    return client


def _temporary(action: str, err: Exception) -> kopf.TemporaryError:
    reason = (
        f"HTTP {err.status} {err.reason}{_api_message(err)}" if isinstance(err, ApiException) else str(err)
    )
    return kopf.TemporaryError(f"{action} failed: {reason}", delay=RETRY_DELAY_S)


def _create_once(create: Any, body: dict[str, Any], kind: str) -> bool:
    """``create(namespace, body)``; False when the object already exists (409)."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        create(namespace, body, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as err:
        if err.status == 409:
            return False
        raise _temporary(f"create {kind} {namespace}/{name}", err) from None
    except TRANSPORT_ERRORS as err:
        raise _temporary(f"create {kind} {namespace}/{name}", err) from None
    return True


def _api_message(err: ApiException) -> str:
    """The API server's own explanation (its Status ``message``), e.g. which field is invalid."""
    try:
        message = json.loads(err.body or "{}").get("message")
    except (ValueError, AttributeError, TypeError):
        return ""
    return f": {message[:500]}" if isinstance(message, str) and message else ""


#: What the operator needs the API to serve: (group, version, plural, how to install it).
REQUIRED_RESOURCES = (
    (GROUP, VERSION, PLURAL, "kubectl apply --server-side -f crds/, or install the Helm chart"),
    (RAY_GROUP, RAY_VERSION, RAY_PLURAL, "install KubeRay 1.6 or newer"),
)
#: The oldest KubeRay the operator runs with, and the RayCluster field that tells it: before
#: v1.6 the CRD has no ``authOptions.secretName`` (the API server prunes it, KubeRay makes a
#: token of its own, and every job request gets 401) and KubeRay ignores
#: ``ray.io/disable-provisioned-head-restart``.
KUBERAY_FLOOR = "v1.6.0"
KUBERAY_FLOOR_FIELD = ("spec", "authOptions", "secretName")


class Kube:
    """RayClusters and RLExperiments, with idempotent create/delete; Secrets, create only."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.policy = kubernetes.client.PolicyV1Api(api_client)

    def missing_resources(self) -> list[str]:
        """The required resources the API server does not serve (a CRD not installed), each as
        ``plural.group/version (how to install it)``. Discovery, which every identity may read."""
        missing = []
        for group, version, plural, remedy in REQUIRED_RESOURCES:
            try:
                served = self.custom.get_api_resources(group, version, _request_timeout=10).resources
            except ApiException as err:
                if err.status != 404:
                    raise _temporary(f"discover {group}/{version}", err) from None
                served = []
            except TRANSPORT_ERRORS as err:
                raise _temporary(f"discover {group}/{version}", err) from None
            if plural not in {resource.name for resource in served or []}:
                missing.append(f"{plural}.{group}/{version} ({remedy})")
        return missing

    def kuberay_below_floor(self) -> str | None:
        """One line saying the installed KubeRay is older than ``KUBERAY_FLOOR`` (its RayCluster
        schema, from the API server's OpenAPI v3 document, which every identity may read, lacks
        ``KUBERAY_FLOOR_FIELD``), else None. Where the document cannot be read (OpenAPI v3 off,
        discovery restricted) or has no RayCluster schema, nothing can be told: logged, None."""
        path = f"/openapi/v3/apis/{RAY_GROUP}/{RAY_VERSION}"
        try:
            method, url, headers, _, _ = self.api_client.param_serialize(
                "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
            )
            answer = self.api_client.call_api(method, url, header_params=headers, _request_timeout=30)
            answer.read()
            if answer.status in (401, 403, 404):
                logger.warning("cannot check KubeRay's version: %s answered %s", path, answer.status)
                return None
            if answer.status != 200:
                raise ApiException(http_resp=answer)
            document = json.loads(answer.data)
        except ApiException as err:
            raise _temporary(f"read {path}", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"read {path}", err) from None
        schemas = document.get("components", {}).get("schemas", {})
        node = next((schema for name, schema in schemas.items() if name.endswith(".v1.RayCluster")), None)
        if node is None:
            logger.warning("cannot check KubeRay's version: %s has no RayCluster schema", path)
            return None
        for key in KUBERAY_FLOOR_FIELD:
            node = (node.get("properties") or {}).get(key)
            if node is None:
                break
        else:
            return None
        return (
            f"the installed KubeRay is older than {KUBERAY_FLOOR}: its RayCluster CRD has no "
            f"{'.'.join(KUBERAY_FLOOR_FIELD)}, so Ray's job API would refuse the operator's token "
            f"(401); upgrade KubeRay's CRDs and operator to {KUBERAY_FLOOR} or newer"
        )

    # --- RayClusters -----------------------------------------------------------------------
    def get_raycluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAY_PLURAL, name, _request_timeout=REQUEST_TIMEOUT_S
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise _temporary(f"get RayCluster {namespace}/{name}", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"get RayCluster {namespace}/{name}", err) from None

    def create_raycluster(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create; when it already exists (an earlier attempt got this far), return the existing one."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            created = self.custom.create_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAY_PLURAL, body, _request_timeout=REQUEST_TIMEOUT_S
            )
        except ApiException as err:
            if err.status == 409:
                existing = self.get_raycluster(namespace, name)
                if existing is not None:
                    return existing
            raise _temporary(f"create RayCluster {namespace}/{name}", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"create RayCluster {namespace}/{name}", err) from None
        return created

    def patch_raycluster(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.custom.patch_namespaced_custom_object(
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                RAY_PLURAL,
                name,
                patch,
                _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except (ApiException, *TRANSPORT_ERRORS) as err:
            raise _temporary(f"patch RayCluster {namespace}/{name}", err) from None

    def delete_raycluster(self, namespace: str, name: str) -> bool:
        """Delete (foreground: its pods go first). False when it was already gone."""
        return self._delete(RAY_GROUP, RAY_VERSION, RAY_PLURAL, namespace, name, "RayCluster")

    # --- Pods (read only) ------------------------------------------------------------------
    def list_cluster_pods(self, namespace: str, cluster_name: str) -> list[dict[str, Any]]:
        """The RayCluster's Pods (KubeRay labels them ``ray.io/cluster``), as dicts."""
        try:
            found = self.core.list_namespaced_pod(
                namespace, label_selector=f"ray.io/cluster={cluster_name}", _request_timeout=10
            )
        except (ApiException, *TRANSPORT_ERRORS) as err:
            raise _temporary(f"list the Pods of RayCluster {namespace}/{cluster_name}", err) from None
        return [self.api_client.sanitize_for_serialization(pod) for pod in found.items]

    # --- Kueue's Workloads (read only) -------------------------------------------------------
    def cluster_workload(self, namespace: str, cluster_uid: str) -> dict[str, Any] | None:
        """The Workload Kueue made for the RayCluster of ``cluster_uid`` (labelled with it); None
        when there is none yet, or Kueue's API is not served (Kueue not installed)."""
        try:
            found = self.custom.list_namespaced_custom_object(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                namespace,
                WORKLOAD_PLURAL,
                label_selector=f"{JOB_UID_LABEL}={cluster_uid}",
                _request_timeout=10,
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise _temporary(f"list the Workloads of {namespace}", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"list the Workloads of {namespace}", err) from None
        items = found.get("items") or []
        return items[0] if items else None

    # --- PodDisruptionBudgets (create only; the garbage collector deletes them) ---------------
    def create_disruption_budget(self, body: dict[str, Any]) -> bool:
        """Create; False when it already exists."""
        return _create_once(self.policy.create_namespaced_pod_disruption_budget, body, "PodDisruptionBudget")

    # --- Secrets (create only) --------------------------------------------------------------
    def create_secret(self, body: dict[str, Any]) -> bool:
        """Create; False when it already exists (it is never read back: the operator has no
        permission to)."""
        return _create_once(self.core.create_namespaced_secret, body, "Secret")

    # --- RLExperiments ---------------------------------------------------------------------
    def patch_experiment_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Write status through the status subresource (when no kopf handler patch is at hand)."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except ApiException as err:
            if err.status != 404:  # deleted meanwhile: nothing to report on
                raise _temporary(f"patch RLExperiment {namespace}/{name} status", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"patch RLExperiment {namespace}/{name} status", err) from None

    def delete_experiment(self, namespace: str, name: str) -> bool:
        """Delete an RLExperiment (``ttlSecondsAfterFinished``). False when it was already gone."""
        return self._delete(GROUP, VERSION, PLURAL, namespace, name, "RLExperiment")

    def _delete(self, group: str, version: str, plural: str, namespace: str, name: str, kind: str) -> bool:
        try:
            self.custom.delete_namespaced_custom_object(
                group,
                version,
                namespace,
                plural,
                name,
                body=kubernetes.client.V1DeleteOptions(propagation_policy="Foreground"),
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise _temporary(f"delete {kind} {namespace}/{name}", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary(f"delete {kind} {namespace}/{name}", err) from None
        return True
