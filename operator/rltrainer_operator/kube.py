"""The one module that talks to the Kubernetes API (besides kopf itself).

It uses the ``kubernetes`` client's custom-objects API (KubeRay publishes no Python client on
PyPI) and translates the API's answers into what the reconciler needs: 404 on get/delete is
"absent", 409 on create is "already there" (idempotency after an operator restart), and any
other failure is a ``kopf.TemporaryError`` so kopf retries later: a refusal (403: an RBAC rule
missing; 401: the operator's credentials no longer accepted) is a ``Refused`` one whose message
says whose request, what was refused and what to do. Patches to custom resources
are JSON merge patches (custom resources support no strategic merge). The core API serves
creating each experiment's Ray token Secret (the operator may create Secrets, never read them)
and the Events on the operator's own Pod; SelfSubjectAccessReviews tell what the operator may do.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
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
#: Connections the client keeps open to the API server: one per reconcile at once
#: (``handlers.RECONCILE_WORKERS``) and a few for the permission check; the client's default is
#: 5 per CPU, and a call that finds the pool full opens (and drops) a TLS connection of its own.
CONNECTIONS = 20


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
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, CONNECTIONS)
    client = kubernetes.client.ApiClient(configuration)
    client.user_agent = USER_AGENT  # tells the operator's requests apart in audit logs
    return client


def _temporary(action: str, err: Exception) -> kopf.TemporaryError:
    if isinstance(err, ApiException) and err.status in (401, 403):
        return refused(action, err)
    reason = (
        f"HTTP {err.status} {err.reason}{_api_message(err)}" if isinstance(err, ApiException) else str(err)
    )
    return kopf.TemporaryError(f"{action} failed: {reason}", delay=RETRY_DELAY_S)


# --- refusals: what waiting does not fix ------------------------------------------------------
#: The longest wait between two tries of a call the API server refused (403, 401): once the
#: rule or the credentials are back, the operator carries on within this time.
REFUSED_RETRY_MAX_S = 120
#: The RBAC authorizer's words in a 403 (k8s.io/apiserver's ``forbiddenMessage``).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"/]+)(?:/(?P<sub>[^"]+))?"'
    r' in API group "(?P<group>[^"]*)"(?: in the namespace "(?P<namespace>[^"]*)")?'
)


class Refused(kopf.TemporaryError):
    """The API server refused a call of the operator's: retrying does not help until someone
    changes the operator's RBAC or credentials. ``reason``: the condition and event reason."""

    reason = "Refused"


class PermissionDenied(Refused):
    """403: the operator's identity lacks an RBAC rule for the call."""

    reason = "PermissionDenied"


class CredentialsRefused(Refused):
    """401: the API server does not accept the operator's credentials at all."""

    reason = "CredentialsRefused"


def refused(action: str, err: ApiException, identity: str = "") -> Refused:
    """The 401 or 403 ``err`` of ``action`` as a message saying whose request, what was refused
    and what to do."""
    message = _api_message(err)[2:]
    if err.status == 401:
        whose = f" ({identity})" if identity else ""
        return CredentialsRefused(
            f"{action} refused: the API server does not accept the operator's credentials{whose} "
            f"(HTTP 401 {err.reason}: {message or 'Unauthorized'}): its ServiceAccount token is no "
            f"longer valid (the ServiceAccount deleted or recreated, or the token revoked or expired); "
            f"nothing can be read or written until it is: check the ServiceAccount exists and "
            f"restart the operator's Pod for a new token",
            delay=RETRY_DELAY_S,
        )
    found = _FORBIDDEN.search(message)
    if found is None:
        return PermissionDenied(
            f"{action} refused (HTTP 403 {err.reason}: {message or 'Forbidden'}): the operator's "
            f"RBAC lacks a rule; the Helm chart's ClusterRole (or Role) grants what it needs: check "
            f"with kubectl auth can-i ... --as=system:serviceaccount:<namespace>:<account>",
            delay=RETRY_DELAY_S,
        )
    user, verb, namespace, sub = found["user"], found["verb"], found["namespace"], found["sub"]
    resource = found["resource"] + (f".{found['group']}" if found["group"] else "")
    where = f" in namespace {namespace}" if namespace else " cluster-wide"
    flags = (f" --subresource={sub}" if sub else "") + (f" -n {namespace}" if namespace else "")
    return PermissionDenied(
        f"{action} refused (HTTP 403 Forbidden): {user} may not {verb} "
        f"{resource}{'/' + sub if sub else ''}{where}; the operator's RBAC lacks "
        f"this rule, which the Helm chart's ClusterRole (or Role, when it watches given namespaces) "
        f"grants: restore it (helm upgrade the release) and check with "
        f"kubectl auth can-i {verb} {resource}{flags} --as={user}",
        delay=RETRY_DELAY_S,
    )


def refused_delay(retry: int) -> float:
    """Seconds before the next try of a refused call after ``retry`` earlier tries:
    ``RETRY_DELAY_S``, doubling, at most ``REFUSED_RETRY_MAX_S``."""
    return min(RETRY_DELAY_S * 2 ** min(retry, 16), REFUSED_RETRY_MAX_S)


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


def _token_subject(configuration: kubernetes.client.Configuration) -> str:
    """Whose bearer token the client holds (the JWT's ``sub``, e.g.
    ``system:serviceaccount:ns:name``), read without verifying it; "" when it is no JWT."""
    token = (configuration.get_api_key_with_prefix("BearerToken") or "").rpartition(" ")[2]
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, TypeError):
        return ""
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) else ""


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
    """RayClusters and RLExperiments, with idempotent create/delete; Secrets and Events, create
    only; the operator's own permissions."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.policy = kubernetes.client.PolicyV1Api(api_client)

    # --- the operator's own credentials -------------------------------------------------------
    def check_credentials(self) -> None:
        """Raise ``CredentialsRefused`` when the API server does not accept this client's
        credentials: 401 on ``/version``, which any identity it accepts may read."""
        try:
            kubernetes.client.VersionApi(self.api_client).get_code(_request_timeout=10)
        except ApiException as err:
            if err.status == 401:
                raise refused("authenticate", err, _token_subject(self.api_client.configuration)) from None
            raise _temporary("read /version", err) from None
        except TRANSPORT_ERRORS as err:
            raise _temporary("read /version", err) from None

    def connection_info(self, **fields: Any) -> kopf.ConnectionInfo:
        """This client's credentials for kopf's own client (one source for both): the token is
        read again each time (in a Pod the kubelet rotates the ServiceAccount token's file, and
        the client's in-cluster configuration re-reads it). ``fields``: more of kopf's fields."""
        config = self.api_client.configuration
        header = config.get_api_key_with_prefix("BearerToken") or ""  # "Bearer <token>"
        scheme, _, token = header.partition(" ")
        return kopf.ConnectionInfo(
            server=config.host,
            ca_path=config.ssl_ca_cert,
            insecure=not config.verify_ssl,
            username=config.username or None,
            password=config.password or None,
            scheme=scheme or None,
            token=token or None,
            certificate_path=config.cert_file,
            private_key_path=config.key_file,
            **fields,
        )

    # --- the operator's own permissions and Pod ------------------------------------------------
    def identity(self) -> str:
        """Whose requests these are (``system:serviceaccount:ns:name``); "" when the client's
        credentials name no one (a client certificate)."""
        return _token_subject(self.api_client.configuration)

    def allowed(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """Whether the API server lets this client ``verb`` the ``resource`` (``plural`` or
        ``plural/subresource``) of API ``group`` in ``namespace`` (None: in every namespace): a
        SelfSubjectAccessReview (``authorization.k8s.io/v1``), which every identity may create
        (the default ClusterRole ``system:basic-user``)."""
        plural, _, subresource = resource.partition("/")
        review = kubernetes.client.V1SelfSubjectAccessReview(
            spec=kubernetes.client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=kubernetes.client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=plural,
                    subresource=subresource or None,
                    namespace=namespace,
                )
            )
        )
        try:
            answer = kubernetes.client.AuthorizationV1Api(self.api_client).create_self_subject_access_review(
                review, _request_timeout=10
            )
        except (ApiException, *TRANSPORT_ERRORS) as err:
            raise _temporary("review the operator's permissions", err) from None
        return bool(answer.status.allowed)

    def create_event(self, body: dict[str, Any]) -> None:
        """Post an Event (``builders.event``) in its namespace."""
        namespace = body["metadata"]["namespace"]
        try:
            self.core.create_namespaced_event(namespace, body, _request_timeout=10)
        except (ApiException, *TRANSPORT_ERRORS) as err:
            raise _temporary(f"create an Event in namespace {namespace}", err) from None

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
        """The RayCluster's Pods (KubeRay labels them ``ray.io/cluster``), as dicts (the API's
        JSON as it came). From the API server's watch cache (``resourceVersion=0``): a second
        old at most, and no read of every Pod of the namespace from etcd, which a plain list is
        where the API server does not serve consistent lists from its cache."""
        try:
            answer = self.core.list_namespaced_pod(
                namespace,
                label_selector=f"ray.io/cluster={cluster_name}",
                resource_version="0",
                _request_timeout=10,
                _preload_content=False,
            )
            return json.loads(answer.data).get("items") or []
        except (ApiException, *TRANSPORT_ERRORS, ValueError) as err:
            raise _temporary(f"list the Pods of RayCluster {namespace}/{cluster_name}", err) from None

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
