"""The Helm chart, rendered and linted by the real Helm v4 engine (helm-python-sdk).

Value combinations: cluster-wide (default), namespaced, RBAC off, metrics with a ServiceMonitor,
metrics off, a custom image, S3 credentials, a long release name. Every render is checked
against the Kubernetes schemas (kubernetes-validate); the default render is a golden file
(``UPDATE_GOLDEN=1 pytest tests/charts`` rewrites it after an intended change).
"""

from __future__ import annotations

import base64
import json
import os
import re
import tomllib
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from rltrainer_operator.settings import PREFIX, Settings
from tests.charts.expected_rbac import LEADER_ELECTION_CALLS, OPERATOR_API_CALLS, OWN_NAMESPACE_API_CALLS
from tests.charts.helpers import (
    CHART_DIR,
    CLUSTER,
    NAMESPACE,
    RELEASE,
    ROOT,
    Permission,
    allows,
    dump,
    granted_permissions,
    of_kind,
    render,
    render_objects,
    request_permission,
)

GOLDEN = ROOT / "tests" / "charts" / "data" / "default.yaml"
#: The operator's Ray token key in the chart's Secret: random on every fresh render.
RANDOM_KEY = re.compile(r'^(  ray-token-key: )"[A-Za-z0-9+/=]+"$', re.MULTILINE)
SERVICE_ACCOUNT = (NAMESPACE, RELEASE)  # the release name already names the chart
#: The Kubernetes versions the manifests must be valid for: the chart's minimum and the newest.
KUBE_VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {"watch": {"clusterWide": False, "namespaces": ["team-a", "team-b"]}},
    "namespaced-release-namespace": {"watch": {"clusterWide": False}},
    "rbac-off": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "platform-sa"}},
    "metrics-on": {"metrics": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "prom"}}}},
    "metrics-off": {"metrics": {"enabled": False}},
    "custom-image": {
        "image": {
            "repository": "registry.example.com/ml/rltrainer-operator",
            "tag": "0.1.0-rc1",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "trainerImage": {"repository": "registry.example.com/ml/trainer", "tag": "0.1.0-gpu"},
    },
    "s3-and-scheduling": {
        "s3": {
            "endpointURL": "http://minio.minio.svc:9000",
            "region": "us-east-1",
            "credentialsSecret": {"name": "operator-s3"},
        },
        "serviceAccount": {
            "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/rl"}
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                            ]
                        }
                    ]
                }
            }
        },
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "podAnnotations": {"example.com/team": "platform"},
        "priorityClassName": "system-cluster-critical",
    },
    "ray-token-existing-secret": {"rayToken": {"existingSecret": "operator-ray-key", "secretKey": "key"}},
    "ray-token-off": {"rayToken": {"create": False}},
}


def deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = of_kind(objects, "Deployment")
    return found


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return found


def env_values(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {env["name"]: env["value"] for env in container(objects)["env"] if "value" in env}


def expected_permissions(scopes: list[str], leader_election: bool = True) -> set[Permission]:
    """The table's calls in each scope, the Lease's in the release namespace, and the events on
    the operator's Pod there unless a scope covers it."""
    calls = {
        Permission(group, resource, verb, scope)
        for (group, resource), verbs in OPERATOR_API_CALLS.items()
        for verb in verbs
        for scope in scopes
    }
    if CLUSTER not in scopes and NAMESPACE not in scopes:
        calls |= {
            Permission(group, resource, verb, NAMESPACE)
            for (group, resource), verbs in OWN_NAMESPACE_API_CALLS.items()
            for verb in verbs
        }
    if leader_election:
        calls |= {
            Permission(group, resource, verb, NAMESPACE)
            for (group, resource), verbs in LEADER_ELECTION_CALLS.items()
            for verb in verbs
        }
    return calls


def operator_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Roles of the watched namespaces (not the leader election's, nor the own events')."""
    return [
        role
        for role in of_kind(objects, "Role")
        if not role["metadata"]["name"].endswith(("-leader-election", "-events"))
    ]


# --- the chart as Helm sees it -----------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_is_clean(case: str) -> None:
    report = helm_python.lint(CHART_DIR, CASES[case], strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert not problems and not report["errors"], report
    # The one remaining finding is informational: no icon URL (the project has none to point at).
    assert {m["error"] for m in report["messages"]} <= {"icon is recommended"}


def test_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert chart["name"] == "rltrainer-operator"


def test_chart_crd_is_the_top_level_crd() -> None:
    top_level = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    if not top_level:
        pytest.skip("crds/ has no generated CRD yet (python -m rltrainer_operator.crd writes it)")
    assert sorted(p.name for p in (CHART_DIR / "crds").glob("*.yaml")) == top_level
    for name in top_level:
        assert (CHART_DIR / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"charts/rltrainer-operator/crds/{name} differs from crds/{name}: cp crds/*.yaml "
            "charts/rltrainer-operator/crds/"
        )
    (crd,) = helm_python.Chart.load(CHART_DIR).crds
    assert yaml.safe_load(crd["data"])["metadata"]["name"] == "rlexperiments.rltrainer.io"


def test_default_render_matches_golden_file() -> None:
    rendered = RANDOM_KEY.sub(r'\1"<random>"', dump(render()))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text(), "the default render changed: UPDATE_GOLDEN=1 to accept it"


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_are_valid_kubernetes_objects(case: str) -> None:
    objects = render_objects(CASES[case])
    assert objects
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":  # a Prometheus Operator CRD: checked in test_metrics_on
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_kind_of_object_per_template(case: str) -> None:
    rendered = render(CASES[case])
    for path, text in rendered.items():
        kinds = {doc["kind"] for doc in yaml.safe_load_all(text) if doc} if path.endswith(".yaml") else set()
        assert len(kinds) <= 1, f"{path} renders {kinds}"
        if kinds and not path.endswith(("/role.yaml", "/rolebinding.yaml")):  # one per watched namespace
            assert len([doc for doc in yaml.safe_load_all(text) if doc]) == 1, path


def test_names_are_capped_at_63_characters() -> None:
    long_release = "a-release-name-that-is-as-long-as-helm-allows-fifty3"
    assert len(long_release) <= 53
    helm_python.validate_release_name(long_release)
    objects = render_objects({"watch": {"clusterWide": False, "namespaces": ["ns"]}}, name=long_release)
    objects += render_objects(
        {"fullnameOverride": "x" * 63, "metrics": {"serviceMonitor": {"enabled": True}}}
    )
    dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    for obj in objects:
        name = obj["metadata"]["name"]
        assert len(name) <= 63 and dns_label.match(name), name
        for value in obj["metadata"].get("labels", {}).values():
            assert len(value) <= 63, value


# --- RBAC: least privilege --------------------------------------------------------------------


def test_cluster_wide_rbac_is_exactly_the_operators_calls() -> None:
    objects = render_objects()
    assert of_kind(objects, "ClusterRole") and not operator_roles(objects)
    assert [role["metadata"]["namespace"] for role in of_kind(objects, "Role")] == [NAMESPACE]
    assert granted_permissions(objects, SERVICE_ACCOUNT) == expected_permissions([CLUSTER])
    without = render_objects({"leaderElection": {"enabled": False}, "replicas": 1})
    assert not of_kind(without, "Role") and not of_kind(without, "RoleBinding")
    assert granted_permissions(without, SERVICE_ACCOUNT) == expected_permissions(
        [CLUSTER], leader_election=False
    )


@pytest.mark.parametrize(
    ("values", "namespaces"),
    [
        ({"watch": {"clusterWide": False, "namespaces": ["team-a", "team-b"]}}, ["team-a", "team-b"]),
        ({"watch": {"clusterWide": False}}, [NAMESPACE]),
        ({"watch": {"clusterWide": False, "namespaces": ["team-a", "team-a"]}}, ["team-a"]),
    ],
)
def test_namespaced_rbac_is_a_role_per_watched_namespace(
    values: dict[str, Any], namespaces: list[str]
) -> None:
    objects = render_objects(values)
    assert not of_kind(objects, "ClusterRole") and not of_kind(objects, "ClusterRoleBinding")
    assert sorted(role["metadata"]["namespace"] for role in operator_roles(objects)) == namespaces
    assert granted_permissions(objects, SERVICE_ACCOUNT) == expected_permissions(namespaces)
    watched = [
        arg for arg in container(objects)["args"] if arg.startswith(("--namespace", "--all-namespaces"))
    ]
    assert watched == [f"--namespace={ns}" for ns in namespaces]
    # The same namespaces, where the operator checks its permissions.
    assert Settings.from_env(env_values(objects)).namespaces(clusterwide=False) == namespaces


def test_rbac_and_service_account_can_be_left_to_the_platform() -> None:
    objects = render_objects(CASES["rbac-off"])
    assert {obj["kind"] for obj in objects} == {"Deployment", "Service", "Secret", "PodDisruptionBudget"}
    assert deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "platform-sa"


def test_no_wildcards_secret_reads_or_peering() -> None:
    for case in ("default", "namespaced"):
        granted = granted_permissions(render_objects(CASES[case]), SERVICE_ACCOUNT)
        assert granted
        for permission in granted:
            assert "*" not in permission[:3], permission
            assert permission.resource != "configmaps", permission
            # Leases: the one of the leader election, in the release namespace only.
            assert permission.resource != "leases" or permission.scope == NAMESPACE, permission
            # Pods: listed (why a cluster is not ready), never read one by one, watched or changed.
            assert permission.resource != "pods" or permission.verb == "list", permission
            # Secrets: only created (each experiment's Ray token), never read, listed or watched.
            assert permission.resource != "secrets" or permission.verb == "create", permission
            assert permission.api_group != "kopf.dev", permission  # --standalone: no peering


@pytest.mark.parametrize("case", ["default", "namespaced"])
def test_every_operator_call_is_allowed(case: str) -> None:
    """Each call in the table, as the HTTP request the operator sends, passes the rendered RBAC."""
    granted = granted_permissions(render_objects(CASES[case]), SERVICE_ACCOUNT)
    namespace = "team-a"
    experiments = f"/apis/rltrainer.io/v1alpha1/namespaces/{namespace}/rlexperiments"
    urls = {
        ("rltrainer.io", "rlexperiments"): experiments,
        ("rltrainer.io", "rlexperiments/status"): experiments,
        ("ray.io", "rayclusters"): f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters",
        ("", "events"): f"/api/v1/namespaces/{namespace}/events",
        ("", "secrets"): f"/api/v1/namespaces/{namespace}/secrets",
        ("", "pods"): f"/api/v1/namespaces/{namespace}/pods",
        ("kueue.x-k8s.io", "workloads"): f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads",
        ("policy", "poddisruptionbudgets"): f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
    }
    requests = {
        "get": ("GET", "/x"),
        "list": ("GET", ""),
        "watch": ("GET", "?watch=true"),
        "create": ("POST", ""),
        "patch": ("PATCH", "/x"),
        "delete": ("DELETE", "/x"),
    }
    for (group, resource), verbs in OPERATOR_API_CALLS.items():
        for verb in verbs:
            method, suffix = requests[verb]
            url = urls[(group, resource)] + suffix
            if resource.endswith("/status"):
                url += "/status"
            wanted = request_permission(method, url)
            assert wanted == Permission(group, resource, verb, namespace)
            assert allows(granted, wanted), wanted
    # kopf --all-namespaces lists and watches across namespaces: a cluster-wide grant only.
    cluster_list = request_permission("GET", "/apis/rltrainer.io/v1alpha1/rlexperiments?watch=true")
    assert allows(granted, cluster_list) == (case == "default")


def test_request_permission_follows_rbac_request_attributes() -> None:
    base = "/apis/rltrainer.io/v1alpha1/namespaces/ns/rlexperiments"
    assert request_permission("GET", f"{base}?watch=true&resourceVersion=5") == Permission(
        "rltrainer.io", "rlexperiments", "watch", "ns"
    )
    assert request_permission("GET", base).verb == "list"
    assert request_permission("GET", f"{base}/x").verb == "get"
    assert request_permission("PATCH", f"{base}/x/status") == Permission(
        "rltrainer.io", "rlexperiments/status", "patch", "ns"
    )
    assert request_permission("DELETE", base).verb == "deletecollection"
    assert request_permission("POST", "/api/v1/namespaces/ns/events") == Permission(
        "", "events", "create", "ns"
    )
    assert request_permission("GET", "/api/v1/namespaces/ns") == Permission("", "namespaces", "get", CLUSTER)
    assert request_permission("GET", "/apis/ray.io/v1/rayclusters").scope == CLUSTER
    for discovery in ("/api", "/api/v1", "/apis", "/apis/rltrainer.io/v1alpha1", "/version"):
        assert request_permission("GET", f"http://127.0.0.1:8080{discovery}") is None


# --- the operator Deployment --------------------------------------------------------------------


def test_operator_settings_come_from_the_chart() -> None:
    """Every RLTRAINER_OPERATOR_* variable names a Settings field and parses; all fields are set."""
    objects = render_objects()
    env = env_values(objects)
    ours = {item["name"] for item in container(objects)["env"] if item["name"].startswith(PREFIX)}
    assert ours == {PREFIX + field.upper() for field in Settings.__dataclass_fields__}
    settings = Settings.from_env(env)
    assert settings.metrics_host == "0.0.0.0" and settings.metrics_port == 8081
    assert settings.default_image == "ghcr.io/rltrainer/trainer:0.1.0-cpu"
    defaults = Settings()
    for field in (
        "poll_interval_s",
        "provision_timeout_s",
        "crash_loop_restarts",
        "backoff_base_s",
        "backoff_max_s",
        "watch_stall_timeout_s",
        "dashboard_port",
    ):
        assert getattr(settings, field) == getattr(defaults, field), field
    assert settings.cluster_domain == defaults.cluster_domain


def test_two_replicas_elect_one_spread_and_kept_through_drains() -> None:
    objects = render_objects()
    spec = deployment(objects)["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}
    assert env["RLTRAINER_LEADER_ELECTION"] == "true" and env["RLTRAINER_LEADER_ELECTION_LEASE"] == RELEASE
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    spread = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (budget,) = of_kind(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == spec["selector"]


def test_one_replica_without_election_is_recreated_never_overlapping() -> None:
    objects = render_objects({"leaderElection": {"enabled": False}, "replicas": 1})
    spec = deployment(objects)["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert "affinity" not in spec["template"]["spec"] and not of_kind(objects, "PodDisruptionBudget")
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["RLTRAINER_LEADER_ELECTION"] == "false"
    assert deployment(render_objects({"replicas": 0}))["spec"]["replicas"] == 0
    with pytest.raises(Exception, match="replicas above 1 need leaderElection.enabled"):
        render_objects({"leaderElection": {"enabled": False}})


def test_pod_runs_non_root_read_only_without_capabilities() -> None:
    objects = render_objects()
    pod = deployment(objects)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(objects)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container(objects)["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_liveness_probe_is_kopfs_endpoint() -> None:
    probe = container(render_objects())["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "healthz"}
    ports = {port["name"]: port["containerPort"] for port in container(render_objects())["ports"]}
    assert ports["healthz"] == 8080  # the image's --liveness=http://0.0.0.0:8080/healthz


def test_readiness_probe_is_the_operators_endpoint() -> None:
    """Not ready while the operator lacks a permission; it checks them where it watches."""
    objects = render_objects()
    probe = container(objects)["readinessProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": "readyz"}
    ports = {port["name"]: port["containerPort"] for port in container(objects)["ports"]}
    settings = Settings.from_env(env_values(objects))
    assert ports["readyz"] == settings.readiness_port == 8082
    assert settings.namespaces(clusterwide=True) is None and settings.watch_namespaces == ""
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}


def test_custom_image() -> None:
    objects = render_objects(CASES["custom-image"])
    assert container(objects)["image"] == "registry.example.com/ml/rltrainer-operator:0.1.0-rc1"
    assert container(objects)["imagePullPolicy"] == "Always"
    assert deployment(objects)["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert (
        env_values(objects)["RLTRAINER_OPERATOR_DEFAULT_IMAGE"] == "registry.example.com/ml/trainer:0.1.0-gpu"
    )
    assert container(render_objects())["image"] == "ghcr.io/rltrainer/operator:0.1.0"


def test_s3_credentials_and_scheduling() -> None:
    objects = render_objects(CASES["s3-and-scheduling"])
    env = {item["name"]: item for item in container(objects)["env"]}
    assert env["RLTRAINER_OPERATOR_S3_ENDPOINT_URL"]["value"] == "http://minio.minio.svc:9000"
    assert env["RLTRAINER_OPERATOR_S3_REGION"]["value"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {
        "secretKeyRef": {"name": "operator-s3", "key": "AWS_ACCESS_KEY_ID"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "operator-s3"
    assert env["HTTPS_PROXY"]["value"] == "http://proxy:3128"
    (account,) = of_kind(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/rl"
    }
    pod = deployment(objects)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    # Without a Secret: no AWS variables, the service account's workload identity is used.
    default_env = container(render_objects())["env"]
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & {item["name"] for item in default_env}
    assert [item["name"] for item in default_env if "secretKeyRef" in item.get("valueFrom", {})] == [
        "RLTRAINER_OPERATOR_RAY_TOKEN_KEY"
    ]


def _token_key_ref(objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    env = {item["name"]: item for item in container(objects)["env"]}
    item = env.get("RLTRAINER_OPERATOR_RAY_TOKEN_KEY")
    return item["valueFrom"]["secretKeyRef"] if item else None


def test_ray_token_key_is_generated_into_a_kept_secret() -> None:
    objects = render_objects()
    (secret,) = of_kind(objects, "Secret")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert _token_key_ref(objects) == {"name": secret["metadata"]["name"], "key": "ray-token-key"}
    key = base64.b64decode(secret["data"]["ray-token-key"])
    assert len(key) == 64 and key.isalnum()
    # A fresh install draws a new key (an upgrade keeps the installed one: Helm's lookup).
    (again,) = of_kind(render_objects(), "Secret")
    assert again["data"] != secret["data"]


def test_ray_token_key_from_an_existing_secret_or_off() -> None:
    objects = render_objects(CASES["ray-token-existing-secret"])
    assert not of_kind(objects, "Secret")
    assert _token_key_ref(objects) == {"name": "operator-ray-key", "key": "key"}
    objects = render_objects(CASES["ray-token-off"])
    assert not of_kind(objects, "Secret") and _token_key_ref(objects) is None
    # Without a key, experiments need rayAuth.mode: disabled: the notes say so.
    notes = "rltrainer-operator/templates/NOTES.txt"
    assert "rayAuth.mode: disabled" in render(CASES["ray-token-off"])[notes]
    assert "rayAuth" not in render()[notes]


def test_metrics_on_with_service_monitor() -> None:
    objects = render_objects(CASES["metrics-on"])
    (service,) = of_kind(objects, "Service")
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container(objects)["ports"]


def test_metrics_off() -> None:
    objects = render_objects(CASES["metrics-off"])
    assert not of_kind(objects, "Service") and not of_kind(objects, "ServiceMonitor")
    assert env_values(objects)["RLTRAINER_OPERATOR_METRICS_PORT"] == "0"
    assert [port["name"] for port in container(objects)["ports"]] == ["healthz", "readyz"]
    with pytest.raises(helm_python.HelmRenderError, match="serviceMonitor.enabled needs metrics.enabled"):
        render({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})


def test_notes_give_next_steps() -> None:
    notes = render()["rltrainer-operator/templates/NOTES.txt"]
    assert "kubectl get crd rayclusters.ray.io" in notes
    assert "get rlx -w" in notes and "rltrainer evaluate" in notes
    for path in re.findall(r"examples/[\w.-]+\.yaml", notes):
        assert (ROOT / path).exists(), path
    namespaced = render(CASES["namespaced"])["rltrainer-operator/templates/NOTES.txt"]
    assert "in: team-a, team-b" in namespaced


# --- values and their schema ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": "two"}, "at '/replicas': got string, want integer"),
        ({"replicas": 11}, "at '/replicas': maximum: got 11, want 10"),
        ({"imagee": {"tag": "x"}}, "additional properties 'imagee' not allowed"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
        ({"watch": {"clusterWide": "yes"}}, "at '/watch/clusterWide': got string, want boolean"),
        ({"watch": {"namespaces": ["Team_A"]}}, "at '/watch/namespaces/0': 'Team_A' does not match pattern"),
        ({"metrics": {"port": 70000}}, "at '/metrics/port'"),
        ({"metrics": {"serviceMonitor": {"enable": True}}}, "additional properties 'enable' not allowed"),
        ({"s3": {"endpointURL": "minio:9000"}}, "at '/s3/endpointURL'"),
        ({"operator": {"pollIntervalSeconds": 0}}, "at '/operator/pollIntervalSeconds'"),
        ({"rayToken": {"create": "yes"}}, "at '/rayToken/create': got string, want boolean"),
        (
            {"serviceAccount": {"annotations": {"a": 1}}},
            "at '/serviceAccount/annotations/a': got number, want string",
        ),
    ],
)
def test_bad_values_fail_with_the_schemas_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as raised:
        render(values)
    assert message in str(raised.value)
    report = helm_python.lint(CHART_DIR, values)
    assert any(message in error for error in report["errors"]), report


#: Values whose default is a Kubernetes object (documented as a whole, not per key).
FREE_FORM = {"resources", "podSecurityContext", "containerSecurityContext"}


def _values_keys(node: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in node.items():
        keys.add(prefix + key)
        if isinstance(value, dict) and value and key not in FREE_FORM:
            keys |= _values_keys(value, f"{prefix}{key}.")
    return keys


def _schema_keys(schema: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, sub in schema.get("properties", {}).items():
        keys.add(prefix + key)
        if key not in FREE_FORM and "properties" in sub and sub.get("additionalProperties") is False:
            keys |= _schema_keys(sub, f"{prefix}{key}.")
    return keys


def _values_key_lines(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(line index, key path) of every mapping key in values.yaml, from its indentation."""
    found, stack = [], []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        found.append((number, [k for _, k in stack] + [key]))
        stack.append((indent, key))
    return found


def test_every_value_is_documented_and_in_the_schema() -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    lines = text.splitlines()
    for number, path in _values_key_lines(lines):
        if set(path[:-1]) & FREE_FORM:
            continue  # inside a documented default (resources.requests.cpu, ...)
        comments = []
        for previous in reversed(lines[:number]):
            if not previous.strip().startswith("#"):
                break
            comments.append(previous.strip())
        assert any(c.startswith("# --") for c in comments), (
            f"values.yaml:{number + 1} {'.'.join(path)} has no '# --'"
        )
    values = yaml.safe_load(text)
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert _values_keys(values) == _schema_keys(schema) - {"global"}
    helm_python.Chart.load(CHART_DIR).validate_schema(values)
