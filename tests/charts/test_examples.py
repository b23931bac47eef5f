"""The example RLExperiments: valid against the CRD's schema, accepted by the operator's own
validation (models + rltrainer's config checks), and listed in examples/kustomization.yaml."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from rltrainer.cli import build_parser
from rltrainer_operator.models import GROUP, KIND, VERSION
from rltrainer_operator.testing import parts
from rltrainer_operator.validation import validate_experiment
from tests.charts.helpers import CHART_DIR, ROOT, manifests, render

EXAMPLES = ROOT / "examples"
FILES = sorted(path for path in EXAMPLES.glob("*.yaml") if path.name != "kustomization.yaml")
CRD = ROOT / "crds" / f"{GROUP}_rlexperiments.yaml"
#: Not in kustomization.yaml on purpose: the same experiment as ppo-cartpole-cpu.yaml, re-applied.
RESUME = "ppo-cartpole-resume.yaml"


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def strict(schema: Any) -> Any:
    """The schema as the API server applies it under ``fieldValidation=Strict`` (kubectl's default):
    an unknown field is an error wherever the schema lists properties and keeps no unknown fields."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def crd_schema() -> dict[str, Any]:
    if not CRD.exists():
        pytest.skip(f"{CRD.relative_to(ROOT)} is not generated yet (python -m rltrainer_operator.crd)")
    crd = load(CRD)
    kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == VERSION]
    return strict(version["schema"]["openAPIV3Schema"])


def test_the_kinds_of_example_exist() -> None:
    specs = {path.name: load(path)["spec"] for path in FILES}
    assert specs["ppo-cartpole-cpu.yaml"]["learners"]["replicas"] == 0
    gpu = specs["ppo-gpu-learner.yaml"]
    assert gpu["learners"]["gpusPerLearner"] >= 1 and gpu["rollouts"]["replicas"] == 8
    assert specs["ppo-suspended.yaml"]["suspend"] is True
    assert (
        load(EXAMPLES / RESUME)["metadata"]["name"]
        == load(EXAMPLES / "ppo-cartpole-cpu.yaml")["metadata"]["name"]
    )
    appo = specs["appo-gpu-learner.yaml"]  # asynchronous: a GPU learner, many rollout pods
    assert appo["algorithm"] == "APPO" and appo["learners"]["gpusPerLearner"] >= 1
    assert appo["rollouts"]["replicas"] >= 16


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_example_is_valid_against_the_crd(path: Path) -> None:
    obj = load(path)
    assert obj["apiVersion"] == f"{GROUP}/{VERSION}" and obj["kind"] == KIND
    # The API server's schema check (CEL rules aside): OpenAPI v3 ~ JSON Schema draft 4.
    jsonschema.Draft4Validator(crd_schema()).validate(obj)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_example_passes_the_operators_validation(path: Path) -> None:
    validate_experiment(load(path))


def test_crd_schema_rejects_a_typo() -> None:
    """The schema check above is not vacuous: an unknown field fails."""
    obj = load(EXAMPLES / "ppo-cartpole-cpu.yaml")
    obj["spec"]["rollouts"]["replicaz"] = 3
    with pytest.raises(jsonschema.ValidationError, match="replicaz"):
        jsonschema.Draft4Validator(crd_schema()).validate(obj)


def test_kustomization_lists_the_examples() -> None:
    kustomization = load(EXAMPLES / "kustomization.yaml")
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    resources = kustomization["resources"]
    assert sorted(resources) == sorted(path.name for path in FILES if path.name != RESUME)
    names = [load(EXAMPLES / name)["metadata"]["name"] for name in resources]
    assert len(names) == len(set(names))
    assert all("namespace" not in load(EXAMPLES / name)["metadata"] for name in resources)


def test_examples_name_no_unknown_secret_or_image() -> None:
    """They reference what the install guide tells users to create, and images `make images` builds."""
    readme = (ROOT / "docs" / "platform" / "install.md").read_text()
    values = load(CHART_DIR / "values.yaml")
    for path in FILES:
        spec = load(path)["spec"]
        secret = spec.get("storage", {}).get("credentialsSecretRef", {}).get("name")
        if secret:
            assert f"create secret generic {secret}" in readme, secret
        if "image" in spec:
            assert spec["image"].startswith(values["trainerImage"]["repository"] + ":")


def install_section() -> str:
    """The platform guide's install page (docs/platform/install.md)."""
    return (ROOT / "docs" / "platform" / "install.md").read_text()


def shell_commands(section: str) -> list[list[str]]:
    """The ```sh blocks' commands, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.append(shlex.split(line))
    return commands


def test_readme_install_commands_are_real() -> None:
    """The section's helm values render, its rltrainer commands parse, its paths exist."""
    section = install_section()
    commands = shell_commands(section)
    (helm_install,) = [
        c for c in commands if c[:2] == ["helm", "install"] and "charts/rltrainer-operator" in c
    ]
    assert helm_install[3] == "charts/rltrainer-operator" and (ROOT / helm_install[3]).is_dir()
    values: dict[str, Any] = {}
    for flag, value in zip(helm_install, helm_install[1:], strict=False):
        if flag == "--set":
            values = helm_python.Chart.load(CHART_DIR).merge_values(
                {**values, **helm_python.parse_set_string(value)}
            )
    assert values["s3"]["credentialsSecret"]["name"] == "operator-s3"
    namespace = helm_install[helm_install.index("--namespace") + 1]
    objects = manifests(render(values, name=helm_install[2], namespace=namespace))  # passes the schema
    (deployment,) = [obj for obj in objects if obj["kind"] == "Deployment"]
    secrets = {c[c.index("generic") + 1] for c in commands if c[:2] == ["kubectl", "-n"] and "generic" in c}
    assert {"operator-s3", "s3-credentials"} <= secrets
    # The rollout command names the Deployment the chart renders for that release.
    (rollout,) = [c for c in commands if "rollout" in c]
    assert rollout[-1] == f"deployment/{deployment['metadata']['name']}"
    parser = build_parser()
    rltrainer_commands = [c for c in commands if c[0] == "rltrainer"]
    assert {c[1] for c in rltrainer_commands} == {"checkpoints", "evaluate"}
    for command in rltrainer_commands:
        parser.parse_args(command[1:])
    for path in re.findall(r"(?:examples|charts|gitops|images)/[\w./-]+", section):
        assert (ROOT / path.rstrip(".")).exists(), path
    for example in FILES:
        assert example.name in section
    (kuberay,) = [c for c in commands if c[:3] == ["helm", "install", "kuberay-operator"]]
    tested = parts.part("kuberay").version.removeprefix("v")  # the KubeRay the Pod tests run
    assert kuberay[kuberay.index("--version") + 1] == tested
