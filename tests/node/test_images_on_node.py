"""The trainer image run by a real kubelet: `rltrainer train` and `rltrainer evaluate` as the image's
non-root user, with a read-only root filesystem, resource limits and volumes for what they write."""

from __future__ import annotations

import json

from rltrainer_operator.testing.image_layers import StoredImage
from rltrainer_operator.testing.node import image_id_of, podman_storage_root
from tests.e2e.helpers import wait_for
from tests.node.helpers import apply, container_states, describe, get

LOCKED_DOWN = {
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def trainer_container(name: str, image: str, command: list[str], memory: str) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",  # built here; nothing is pulled
        "command": command,
        "securityContext": LOCKED_DOWN,
        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": memory}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "results", "mountPath": "/results"}],
    }


def test_trainer_image_trains_and_evaluates_as_non_root_on_a_read_only_root(control_plane, images) -> None:
    train = [
        "rltrainer",
        "train",
        "--algo",
        "PPO",
        "--env",
        "CartPole-v1",
        "--stop",
        '{"training_iteration": 2}',
        "--checkpoint-at-end",
        "--storage-path",
        "/results",
        "--name",
        "in-pod",
    ]
    evaluate = [
        "sh",
        "-c",
        'id -u && rltrainer evaluate "$(ls -d /results/in-pod/*/checkpoint_* | tail -n 1)" --episodes 2',
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-image", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            # No runAsUser: the image's own USER must be non-root for the kubelet to start it.
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "results", "emptyDir": {}}],
            "initContainers": [trainer_container("train", images.trainer, train, "3Gi")],
            "containers": [trainer_container("evaluate", images.trainer, evaluate, "2Gi")],
        },
    }
    apply(control_plane, pod)
    try:
        done = wait_for(
            "the trainer pod finished",
            lambda: (
                (p := get(control_plane, "pod", "trainer-image"))
                and p["status"].get("phase") in ("Succeeded", "Failed")
                and p
            ),
            300,
            explain=lambda: describe(control_plane, "pod", "trainer-image", "default"),
        )
        logs = {
            c: control_plane.kubectl_run("logs", "trainer-image", "-c", c, check=False).stdout
            for c in ("train", "evaluate")
        }
        assert done["status"]["phase"] == "Succeeded", json.dumps(container_states(done), indent=1) + str(
            logs
        )
        assert "iter=2" in logs["train"] and "checkpoint: /results/in-pod/" in logs["train"], logs["train"]
        assert logs["evaluate"].splitlines()[0] == "1000"  # Ray's images' uid
        assert "mean return over 2 episodes" in logs["evaluate"], logs["evaluate"]
        assert "(PPO, iteration 2, 8000 env steps)" in logs["evaluate"]
    finally:
        control_plane.kubectl_run("delete", "pod", "trainer-image", "--wait=false", check=False)


def test_images_are_on_the_node(node, images, tmp_path) -> None:
    on_node = node.images()
    assert images.operator in on_node and images.trainer in on_node
    # What a node that has an image would be sent again: its manifest and config, no layer.
    present = set(node.ctr("content", "ls", "-q").split())
    for ref in (images.operator, images.trainer):
        stored = StoredImage.read(podman_storage_root(), image_id_of(ref))
        assert stored.write_archive(tmp_path / "again.tar", ref, present) == 0, ref
