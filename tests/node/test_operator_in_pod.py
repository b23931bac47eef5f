"""The Helm chart installed on the real cluster with Helm's own install (the Helm v4 SDK): the
operator runs as a Pod from the operator image.

What only a running Pod shows: the chart's Deployment starts (ServiceAccount token mounted,
in-cluster configuration, probes, security contexts, resources), the real authorizer judges every
request by the Pod's own token, the metrics and liveness endpoints answer, logs are JSON lines
when the chart asks, an RLExperiment is reconciled by that Pod, a restart of the Pod loses nothing
and a SIGTERM ends it within the grace period; with a rule taken from its Role, or its token revoked
(``make e2e``), it says so and stays up, no crash loop hiding the cause. Bad values: an image the
node lacks and a memory limit too small show on the Pod, where `kubectl describe` finds them.

The chart runs exactly as rendered: the operator Pod is on the pod network and reaches the API
server through the ``kubernetes`` Service (kube-proxy routes its cluster IP to the API server,
which listens on the pod network's gateway), with in-cluster configuration as the kubelet gives
it; its metrics are scraped through its metrics Service's cluster IP. The token, the CA bundle and
the RBAC that judges the requests are the ones a cluster gives the Pod.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import Any

import pytest

from tests.charts.helpers import CHART_DIR, manifests, render_objects
from tests.e2e.helpers import wait_for
from tests.node.helpers import apply, delete, describe, get, helm

NAMESPACE = "rltrainer-system"
WATCHED = "experiments"
RELEASE = "rltrainer-operator"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
GRACE_S = 20


def release_values(**values: Any) -> dict[str, Any]:
    """The chart's values for this cluster, with these."""
    return {
        "image": {"pullPolicy": "Never"},
        "watch": {"clusterWide": False, "namespaces": [WATCHED]},
        "logFormat": "json",
        "metrics": {"enabled": True},
        "terminationGracePeriodSeconds": GRACE_S,
        "operator": {"pollIntervalSeconds": 1},
        # One replica (with its leader elector): these tests follow "the" operator Pod; two
        # replicas electing one are tests/operator/test_leader_election.py's.
        "replicas": 1,
        **values,
    }


def release_objects(*, release: str = RELEASE, **values: Any) -> list[dict]:
    """The chart rendered for this cluster with these values, to apply as rendered."""
    return render_objects(release_values(**values), name=release, namespace=NAMESPACE)


def operator_pods(control_plane, release: str = RELEASE) -> list[dict]:
    found = get(control_plane, "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={release}")
    return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]


def answers(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode()
    except OSError:
        return ""


@pytest.fixture(scope="module")
def operator_release(control_plane, cluster_network, images):
    if not cluster_network.service_proxy:
        pytest.skip("another test cluster on this machine runs its kube-proxy: no `kubernetes` Service here")
    for namespace in (NAMESPACE, WATCHED):
        control_plane.kubectl_run("create", "namespace", namespace, check=False)
    repository, tag = images.operator.rsplit(":", 1)
    values = release_values(image={"repository": repository, "tag": tag, "pullPolicy": "Never"})
    started = time.monotonic()
    release = helm(control_plane, NAMESPACE).install(
        str(CHART_DIR), RELEASE, values, namespace=NAMESPACE, wait="watcher", timeout=300
    )
    control_plane.kubectl_run("rollout", "status", f"deployment/{RELEASE}", "-n", NAMESPACE, "--timeout=300s")
    ready_s = time.monotonic() - started
    print(f"helm install to the operator Pod Ready: {ready_s:.1f} s")
    yield {"objects": manifests({"release": release["manifest"]}), "ready_seconds": ready_s}
    control_plane.kubectl_run(
        "delete", "rlexperiments", "--all", "-n", WATCHED, "--wait=true", "--timeout=60s", check=False
    )
    helm(control_plane, NAMESPACE).uninstall(RELEASE, wait="watcher", timeout=120)


def test_operator_pod_runs_with_the_charts_identity_and_probes(control_plane, operator_release) -> None:
    (pod,) = operator_pods(control_plane)
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert spec["serviceAccountName"] == RELEASE
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] and status["restartCount"] == 0, describe(
        control_plane, "pod", pod["metadata"]["name"], NAMESPACE
    )
    # As rendered: on the pod network, in-cluster configuration from the `kubernetes` Service.
    assert not spec.get("hostNetwork") and not any(
        e["name"].startswith("KUBERNETES_SERVICE") for e in container.get("env", [])
    )
    assert pod["status"]["podIP"].startswith("10.244.")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    healthz = f"http://{pod['status']['podIP']}:{ports['healthz']}/healthz"
    assert wait_for("kopf's liveness endpoint", lambda: answers(healthz), 30)
    # Prometheus scrapes the metrics Service: through its cluster IP (kube-proxy) to the Pod.
    (service,) = [o for o in operator_release["objects"] if o["kind"] == "Service"]
    live = get(control_plane, "service", service["metadata"]["name"], "-n", NAMESPACE)
    cluster_ip, (port,) = live["spec"]["clusterIP"], live["spec"]["ports"]
    metrics = f"http://{cluster_ip}:{port['port']}/metrics"
    assert "rltrainer_experiments" in wait_for("the metrics Service", lambda: answers(metrics), 30)


@pytest.mark.usefixtures("operator_release")
def test_every_request_is_authorized_by_rbac_on_the_pods_own_token(control_plane) -> None:
    def operator_requests() -> list[dict]:
        return [
            e for e in control_plane.audit_events() if e.get("user", {}).get("username") == SERVICE_ACCOUNT
        ]

    def by_the_charts_rbac(event: dict) -> bool:  # "(Cluster)RoleBinding "<release>..." of ...
        reason = event.get("annotations", {}).get("authorization.k8s.io/reason", "")
        return f'RoleBinding "{RELEASE}' in reason

    # The audit log grows as the operator starts: its first requests are discovery (allowed to
    # every authenticated user), its lists and watches of the experiments come after.
    wait_for(
        "a request allowed by the chart's RBAC",
        lambda: [e for e in operator_requests() if by_the_charts_rbac(e)],
        30,
    )
    requests = operator_requests()
    assert all(e["responseStatus"]["code"] != 403 for e in requests), [
        (e["verb"], e["requestURI"]) for e in requests if e["responseStatus"]["code"] == 403
    ]
    # What the chart does not grant stays refused for that identity.
    denied = control_plane.kubectl_run(
        "auth", "can-i", "create", "deployments", "-n", WATCHED, f"--as={SERVICE_ACCOUNT}", check=False
    )
    assert denied.stdout.strip() == "no"


@pytest.mark.usefixtures("operator_release")
def test_logs_are_json_lines(control_plane) -> None:
    (pod,) = operator_pods(control_plane)
    lines = wait_for(
        "log lines",
        lambda: control_plane.kubectl_run(
            "logs", pod["metadata"]["name"], "-n", NAMESPACE, check=False
        ).stdout.splitlines(),
        30,
    )
    records = [json.loads(line) for line in lines if line.strip()]
    assert records and all("message" in record for record in records), lines[:5]


EXPERIMENT = {
    "apiVersion": "rltrainer.io/v1alpha1",
    "kind": "RLExperiment",
    "metadata": {"name": "ppo-in-pod", "namespace": WATCHED},
    "spec": {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "stop": {"training_iteration": 2},
        "checkpoint": {"uri": "s3://rl-checkpoints/experiments", "frequency": 1},
        "rollouts": {"replicas": 1},
    },
}


@pytest.mark.usefixtures("operator_release")
def test_an_experiment_is_reconciled_by_the_pod_and_survives_its_restart(control_plane) -> None:
    apply(control_plane, EXPERIMENT)

    def provisioned() -> tuple[str, list[dict]] | None:
        experiment = get(control_plane, "rlexperiment", "ppo-in-pod", "-n", WATCHED) or {}
        clusters = get(control_plane, "rayclusters", "-n", WATCHED)["items"]
        phase = experiment.get("status", {}).get("phase")
        return (phase, clusters) if phase and clusters else None

    phase, clusters = wait_for("the experiment reconciled by the operator Pod", provisioned, 60)
    assert phase == "Provisioning" and len(clusters) == 1
    uid = clusters[0]["metadata"]["uid"]

    (old,) = operator_pods(control_plane)
    # kopf ends on SIGTERM by itself, never by the SIGKILL at the grace period's end: read from
    # the container's exit code (137 after a SIGKILL) in the Pod's last states, which a watch
    # sees to its deletion, not from how long the deletion took on a busy machine.
    exits = subprocess.Popen(
        control_plane.kubectl_argv(
            "get", "pod", old["metadata"]["name"], "-n", NAMESPACE, "--watch", "-o",
            'jsonpath={.status.containerStatuses[?(@.name=="operator")].state.terminated.exitCode}{"\\n"}',
        ),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        exits.stdout.readline()  # the watch has the Pod as it is: no later state can be missed
        started = time.monotonic()
        control_plane.kubectl_run(
            "delete", "pod", old["metadata"]["name"], "-n", NAMESPACE, "--wait=true", "--timeout=120s"
        )
        stopped_s = time.monotonic() - started
        # The kubelet writes the container's end before the Pod goes: read up to it, however
        # late the watch prints it (pytest's timeout is the last guard).
        codes = set()
        for line in exits.stdout:
            if line.strip():
                codes.add(line.strip())
                break
    finally:
        exits.kill()
        exits.communicate(timeout=30)
    print(json.dumps({"operator_stopped_after_sigterm_s": round(stopped_s, 1)}))
    assert codes == {"0"}, (
        f"the operator's exit code(s) {codes} after SIGTERM, {stopped_s:.1f} s into {GRACE_S}"
    )
    control_plane.kubectl_run("rollout", "status", f"deployment/{RELEASE}", "-n", NAMESPACE, "--timeout=180s")
    (new,) = operator_pods(control_plane)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    # The new Pod takes the experiment over: same phase, the same cluster, nothing provisioned twice.
    wait_for(
        "the new Pod reconciling",
        lambda: (
            "ppo-in-pod"
            in control_plane.kubectl_run("logs", new["metadata"]["name"], "-n", NAMESPACE, check=False).stdout
        ),
        60,
    )
    time.sleep(3)  # a few of its 1 s timers
    experiment = get(control_plane, "rlexperiment", "ppo-in-pod", "-n", WATCHED)
    (cluster,) = get(control_plane, "rayclusters", "-n", WATCHED)["items"]
    assert experiment["status"]["phase"] == phase and cluster["metadata"]["uid"] == uid


@pytest.mark.usefixtures("operator_release")
def test_an_image_missing_from_the_node_shows_on_the_pod(control_plane) -> None:
    objects = release_objects(release="missing-image", image={"pullPolicy": "Never", "tag": "no-such-tag"})
    apply(control_plane, *objects)
    try:

        def waiting_reason() -> str:
            pods = operator_pods(control_plane, "missing-image")
            states = [
                s.get("state", {}).get("waiting", {})
                for p in pods
                for s in p["status"].get("containerStatuses", [])
            ]
            return next((s["reason"] for s in states if s.get("reason") == "ErrImageNeverPull"), "")

        assert wait_for("ErrImageNeverPull on the operator Pod", waiting_reason, 60)
    finally:
        delete(control_plane, *objects)


@pytest.mark.usefixtures("operator_release")
def test_a_memory_limit_too_small_shows_as_oomkilled(control_plane) -> None:
    limits = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "32Mi"}}
    objects = release_objects(release="small-memory", resources=limits)
    apply(control_plane, *objects)
    try:

        def oom_killed() -> str:
            for pod in operator_pods(control_plane, "small-memory"):
                for status in pod["status"].get("containerStatuses", []):
                    for state in (status.get("lastState", {}), status.get("state", {})):
                        if state.get("terminated", {}).get("reason") == "OOMKilled":
                            return pod["metadata"]["name"]
            return ""

        name = wait_for("an OOMKilled operator container", oom_killed, 90)
        assert "OOMKilled" in describe(control_plane, "pod", name, NAMESPACE)
    finally:
        delete(control_plane, *objects)


@pytest.mark.usefixtures("operator_release", "kuberay_operator")
def test_an_experiment_image_missing_from_the_node_becomes_its_condition(control_plane) -> None:
    missing = "ghcr.io/rltrainer/trainer:no-such-tag"
    experiment = {
        **EXPERIMENT,
        "metadata": {"name": "ppo-missing-image", "namespace": WATCHED},
        "spec": {
            **EXPERIMENT["spec"],
            "image": missing,
            "imagePullPolicy": "Never",
            "head": {"cpu": "500m", "memory": "1Gi"},
        },
    }
    apply(control_plane, experiment)
    wait_for(
        "the experiment's RayCluster",
        lambda: next(
            iter(
                get(
                    control_plane,
                    "rayclusters",
                    "-n",
                    WATCHED,
                    "-l",
                    "rltrainer.io/experiment=ppo-missing-image",
                )["items"]
            ),
            None,
        ),
        60,
    )

    def condition() -> dict[str, Any] | None:
        status = (get(control_plane, "rlexperiment", "ppo-missing-image", "-n", WATCHED) or {}).get(
            "status", {}
        )
        return next((c for c in status.get("conditions", []) if c["reason"] == "ImagePullFailed"), None)

    found = wait_for(
        "ImagePullFailed on the experiment",
        condition,
        60,
        explain=lambda: describe(control_plane, "rlexperiment", "ppo-missing-image", WATCHED),
    )
    assert (
        "the head" in found["message"]
        and missing in found["message"]
        and "ErrImageNeverPull" in found["message"]
    )
    experiment = get(control_plane, "rlexperiment", "ppo-missing-image", "-n", WATCHED)
    assert (
        experiment["status"]["phase"] == "Provisioning"
        and experiment["status"]["message"] == found["message"]
    )
    control_plane.kubectl_run("delete", "rlexperiment", "ppo-missing-image", "-n", WATCHED, "--wait=false")


def ready_condition(control_plane, name: str) -> dict[str, Any]:
    status = (get(control_plane, "rlexperiment", name, "-n", WATCHED) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


def operator_restarts(control_plane) -> int:
    (pod,) = operator_pods(control_plane)
    return sum(s["restartCount"] for s in pod["status"].get("containerStatuses", []))


def liveness_answers(pod: dict[str, Any]) -> str:
    """What kopf's liveness endpoint, which the kubelet's probe asks, answers now."""
    (container,) = pod["spec"]["containers"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "healthz")
    return answers(f"http://{pod['status']['podIP']}:{port}/healthz")


def without_verb(role: dict[str, Any], group: str, resource: str, verb: str) -> dict[str, Any]:
    """The Role as applied (no server-set fields) without one call."""
    rules = []
    for rule in role["rules"]:
        verbs = rule["verbs"]
        if group in rule.get("apiGroups", []) and resource in rule.get("resources", []):
            verbs = [v for v in verbs if v != verb]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    return {**as_applied(role), "rules": rules}


def as_applied(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return {**obj, "metadata": meta}


@pytest.mark.e2e_only(
    "tests/operator/test_rbac_revoked.py's missing rule, with the kopf runtime on the API server"
)
@pytest.mark.usefixtures("operator_release")
def test_a_rule_taken_from_the_pods_role_is_a_condition_and_nothing_restarts(control_plane) -> None:
    """The chart's Role in the watched namespace loses ``create rayclusters``: the experiment's
    Ready condition and a Warning event name the call, the operator Pod stays up (no crash loop
    hiding the cause), and with the rule back the RayCluster is made, no restart."""
    name = "ppo-without-rights"
    role = get(control_plane, "role", RELEASE, "-n", WATCHED)
    restarts = operator_restarts(control_plane)
    apply(control_plane, without_verb(role, "ray.io", "rayclusters", "create"))
    try:
        apply(control_plane, {**EXPERIMENT, "metadata": {"name": name, "namespace": WATCHED}})
        denied = wait_for(
            "Ready: PermissionDenied",
            lambda: (c := ready_condition(control_plane, name)).get("reason") == "PermissionDenied" and c,
            90,
            explain=lambda: describe(control_plane, "rlexperiment", name, WATCHED),
        )
        assert f"may not create rayclusters.ray.io in namespace {WATCHED}" in denied["message"], denied
        assert f"--as={SERVICE_ACCOUNT}" in denied["message"], denied
        events = get(
            control_plane, "events", "-n", WATCHED, "--field-selector", f"involvedObject.name={name}"
        )
        assert any(e["type"] == "Warning" and e["reason"] == "PermissionDenied" for e in events["items"]), [
            (e["reason"], e["message"]) for e in events["items"]
        ]
        # Up through kopf's backoff: the kubelet's liveness probe is answered, nothing restarted.
        (pod,) = operator_pods(control_plane)
        assert liveness_answers(pod) and operator_restarts(control_plane) == restarts
    finally:
        apply(control_plane, as_applied(role))
    back = time.monotonic()
    wait_for(
        "the RayCluster, once the rule is back",
        lambda: get(control_plane, "rayclusters", "-n", WATCHED, "-l", f"rltrainer.io/experiment={name}")[
            "items"
        ],
        120,
    )
    recovered_s = time.monotonic() - back
    assert ready_condition(control_plane, name).get("reason") != "PermissionDenied"
    assert operator_restarts(control_plane) == restarts
    print(
        json.dumps(
            {
                "benchmark": "cluster_fault",
                "fault": "rbac-rule-removed",
                "seconds_to_recover": round(recovered_s, 1),
                "restarts": 0,
            }
        )
    )
    control_plane.kubectl_run("delete", "rlexperiment", name, "-n", WATCHED, "--wait=false")


@pytest.mark.e2e_only(
    "tests/operator/test_rbac_revoked.py's revoked token, with the kopf runtime on the API server"
)
@pytest.mark.usefixtures("operator_release")
def test_the_pods_token_revoked_is_said_and_the_pod_stays_up(control_plane, operator_release) -> None:
    """The operator's ServiceAccount deleted (the Pod's bound token refused: 401): the operator
    says so in its log and stays up, waiting with backoff, not a crash loop; the ServiceAccount
    back and the Pod replaced (a fresh token), it reconciles again."""
    (account,) = [o for o in operator_release["objects"] if o["kind"] == "ServiceAccount"]
    (pod,) = operator_pods(control_plane)
    restarts = operator_restarts(control_plane)
    delete(control_plane, account, wait=True)
    name = "ppo-without-a-token"
    try:
        # The watch stream, opened before, still delivers it; every call its handler makes is refused.
        apply(control_plane, {**EXPERIMENT, "metadata": {"name": name, "namespace": WATCHED}})
        said = wait_for(
            "the refused token in the operator's log",
            lambda: [
                line
                for line in control_plane.kubectl_run(
                    "logs", pod["metadata"]["name"], "-n", NAMESPACE, check=False
                ).stdout.splitlines()
                if "does not accept the operator's credentials" in line
            ],
            120,
        )
        print("logged:", said[0][:300])
        # Up through kopf's backoff: the kubelet's liveness probe is answered, nothing restarted.
        assert liveness_answers(pod) and operator_restarts(control_plane) == restarts
    finally:
        apply(control_plane, as_applied(account))
        control_plane.kubectl_run("delete", "rlexperiment", name, "-n", WATCHED, "--wait=false", check=False)
    control_plane.kubectl_run(
        "delete", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--wait=true", "--timeout=120s"
    )
    control_plane.kubectl_run("rollout", "status", f"deployment/{RELEASE}", "-n", NAMESPACE, "--timeout=180s")
    name = "ppo-after-new-token"
    apply(control_plane, {**EXPERIMENT, "metadata": {"name": name, "namespace": WATCHED}})
    wait_for(
        "the experiment reconciled with the new Pod's token",
        lambda: (get(control_plane, "rlexperiment", name, "-n", WATCHED) or {}).get("status"),
        60,
    )
    control_plane.kubectl_run("delete", "rlexperiment", name, "-n", WATCHED, "--wait=false")


def lease_holder(control_plane) -> str:
    lease = get(control_plane, "lease", RELEASE, "-n", NAMESPACE) or {}
    return (lease.get("spec") or {}).get("holderIdentity") or ""


@pytest.mark.e2e_only
@pytest.mark.usefixtures("operator_release")
def test_two_replicas_one_acting_and_the_leaders_pod_deleted(control_plane, images) -> None:
    """The chart's default of two replicas on the real cluster: one holds the Lease and acts; its
    Pod deleted, another replica takes over (the old one releases the Lease on SIGTERM)."""
    repository, tag = images.operator.rsplit(":", 1)
    values = release_values(image={"repository": repository, "tag": tag, "pullPolicy": "Never"}, replicas=2)
    helm(control_plane, NAMESPACE).upgrade(
        str(CHART_DIR), RELEASE, values, namespace=NAMESPACE, wait="watcher", timeout=300
    )
    pods = wait_for(
        "two operator Pods running",
        lambda: len(running_pods(control_plane)) == 2 and running_pods(control_plane),
        180,
    )
    control_plane.kubectl_run("rollout", "status", f"deployment/{RELEASE}", "-n", NAMESPACE, "--timeout=180s")
    pods = running_pods(control_plane)
    names = {p["metadata"]["name"] for p in pods}
    # The old Pod (one replica, no anti-affinity) released the Lease as the rollout replaced it.
    leader = wait_for(
        "a Lease holder among the new Pods", lambda: (h := lease_holder(control_plane)) in names and h, 60
    )
    (follower,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != leader]
    # The leader's own log, followed to its end: how long its operator took to stop, the release.
    leader_log = subprocess.Popen(
        control_plane.kubectl_argv("logs", "-f", leader, "-n", NAMESPACE),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(1)  # the stream open before the Pod goes
    deleted = time.monotonic()
    control_plane.kubectl_run("delete", "pod", leader, "-n", NAMESPACE, "--wait=false")
    # The old leader releases the Lease on SIGTERM; then whichever replica asks first holds it:
    # the standby, or the Deployment's replacement Pod, started meanwhile (both are right, as with
    # client-go's elector: exactly one holder, and no wait for the Lease to expire).
    successor = wait_for(
        "another replica holding the Lease",
        lambda: (h := lease_holder(control_plane)) not in ("", leader) and h,
        60,
        explain=lambda: failover_state(control_plane, leader, follower),
    )
    who = "the standby" if successor == follower else "the replacement Pod"
    print(f"the leader's Pod deleted: {who} took over in {time.monotonic() - deleted:.1f} s")
    try:
        last_lines, _ = leader_log.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        leader_log.kill()
        last_lines, _ = leader_log.communicate()
    print("the old leader's last lines:\n" + "\n".join(last_lines.splitlines()[-8:]))
    assert f"{leader} released Lease" in last_lines, "the Lease was waited out, not released"
    # The new leader's operator acts: a new experiment is reconciled.
    experiment = {**EXPERIMENT, "metadata": {"name": "ppo-after-failover", "namespace": WATCHED}}
    apply(control_plane, experiment)
    wait_for(
        "the experiment reconciled by the new leader",
        lambda: (get(control_plane, "rlexperiment", "ppo-after-failover", "-n", WATCHED) or {}).get("status"),
        60,
    )
    control_plane.kubectl_run("delete", "rlexperiment", "ppo-after-failover", "-n", WATCHED, "--wait=false")


def failover_state(control_plane, leader: str, follower: str) -> str:
    """The Lease, the operator's Pods and both replicas' last log lines (the deleted one's while
    its container is still there), for a failover that did not come."""
    lease = (get(control_plane, "lease", RELEASE, "-n", NAMESPACE) or {}).get("spec")
    pods = [
        (p["metadata"]["name"], p["status"].get("phase"), p["metadata"].get("deletionTimestamp"))
        for p in operator_pods(control_plane)
    ]
    logs = {
        name: control_plane.kubectl_run("logs", name, "-n", NAMESPACE, "--tail=25", check=False).stdout
        for name in (leader, follower)
    }
    return f"lease: {lease}\npods: {pods}\n" + "".join(f"--- {name}:\n{text}" for name, text in logs.items())


def running_pods(control_plane) -> list[dict]:
    return [p for p in operator_pods(control_plane) if p["status"].get("phase") == "Running"]
