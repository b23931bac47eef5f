"""GitOps health checks for RLExperiments, run on status fixtures for every phase.

- Argo CD: ``gitops/argocd/rltrainer.io/RLExperiment/health.lua`` runs in Lua 5.1 (lupa), the
  dialect Argo CD embeds (gopher-lua), with ``obj`` set as Argo CD sets it; the cases are Argo
  CD's own ``health_test.yaml`` format.
- Flux: the ``healthCheckExprs`` in ``gitops/flux/kustomization.yaml`` run in a CEL interpreter
  (cel-python) the way kustomize-controller's StatusEvaluator runs them: a status whose
  ``observedGeneration`` differs from ``metadata.generation`` is InProgress, then inProgress,
  failed, current in that order, none true: InProgress.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import lupa.lua51
import pytest
import yaml

from rltrainer_operator.models import CONDITION_TYPES, Phase, RLExperiment
from tests.charts.helpers import ROOT

ARGO = ROOT / "gitops" / "argocd"
CHECK = ARGO / "rltrainer.io" / "RLExperiment"
CASES = yaml.safe_load((CHECK / "health_test.yaml").read_text())["tests"]
FLUX = yaml.safe_load((ROOT / "gitops" / "flux" / "kustomization.yaml").read_text())

#: What Flux should conclude where Argo CD says ...: a Suspended experiment is where its spec
#: wants it (Current); Argo's Progressing is Flux's InProgress, Degraded is Failed.
FLUX_FOR_ARGO = {
    "Healthy": "Current",
    "Suspended": "Current",
    "Progressing": "InProgress",
    "Degraded": "Failed",
}


def fixture(case: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load((CHECK / case["inputPath"]).read_text())


def argo_health(obj: dict[str, Any]) -> dict[str, str]:
    """Run health.lua as Argo CD does: a chunk with the object as the global ``obj``."""
    lua = lupa.lua51.LuaRuntime()
    assert lua.eval("_VERSION") == "Lua 5.1"
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((CHECK / "health.lua").read_text())
    return dict(result.items())


def flux_health(obj: dict[str, Any]) -> str:
    """kustomize-controller's StatusEvaluator.Evaluate on one object; an evaluation error is
    "Unknown" (Flux keeps waiting, as for InProgress, until its timeout)."""
    (check,) = [c for c in FLUX["spec"]["healthCheckExprs"] if c["kind"] == "RLExperiment"]
    observed = obj.get("status", {}).get("observedGeneration")
    if observed is not None and observed != obj["metadata"].get("generation"):
        return "InProgress"
    env = celpy.Environment()
    activation = {key: celpy.json_to_cel(value) for key, value in obj.items()}
    for key, status in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        try:
            result = env.program(env.compile(check[key])).evaluate(activation)
        except celpy.CELEvalError:
            return "Unknown"
        if not isinstance(result, celpy.celtypes.BoolType):
            return "Unknown"
        if result:
            return status
    return "InProgress"


def test_fixtures_cover_every_phase_and_are_real_statuses() -> None:
    phases = set()
    for case in CASES:
        obj = fixture(case)
        RLExperiment.model_validate(obj)  # the operator's own models accept every fixture
        if "status" in obj:
            phases.add(obj["status"]["phase"])
            assert {c["type"] for c in obj["status"]["conditions"]} <= set(CONDITION_TYPES)
    assert phases == {phase.value for phase in Phase}
    assert (
        len({case["inputPath"] for case in CASES})
        == len(CASES)
        == len(list((CHECK / "testdata").glob("*.yaml")))
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: Path(case["inputPath"]).stem)
def test_argocd_health(case: dict[str, Any]) -> None:
    assert argo_health(fixture(case)) == case["healthStatus"]


def test_argocd_health_for_every_phase() -> None:
    """The phase-to-health mapping, phase by phase, on a current status."""
    wanted = {
        "Pending": "Progressing",
        "Provisioning": "Progressing",
        "Restarting": "Progressing",
        "Running": "Healthy",  # with Ready=True
        "Succeeded": "Healthy",
        "Failed": "Degraded",
        "Suspended": "Suspended",
        "Queued": "Suspended",  # Kueue holds it: an external event resumes it
    }
    assert set(wanted) == {phase.value for phase in Phase}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Training",
        "lastTransitionTime": "t",
        "observedGeneration": 3,
    }
    for phase, health in wanted.items():
        obj = {
            "metadata": {"generation": 3},
            "status": {"phase": phase, "observedGeneration": 3, "conditions": [ready]},
        }
        assert argo_health(obj)["status"] == health, phase
        stale = {**obj, "metadata": {"generation": 4}}
        assert argo_health(stale)["status"] == "Progressing", phase
    assert argo_health(
        {"metadata": {"generation": 1}, "status": {"phase": "Exploded", "observedGeneration": 1}}
    ) == {
        "status": "Unknown",
        "message": "Unknown phase Exploded",
    }


def test_argocd_cm_snippet_embeds_the_same_lua() -> None:
    snippet = yaml.safe_load((ARGO / "argocd-cm.yaml").read_text())
    assert snippet["kind"] == "ConfigMap" and snippet["metadata"]["name"] == "argocd-cm"
    # Argo CD's key for a health check: resource.customizations.health.<group>_<kind>.
    lua = snippet["data"]["resource.customizations.health.rltrainer.io_RLExperiment"]
    assert lua == (CHECK / "health.lua").read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda case: Path(case["inputPath"]).stem)
def test_flux_health_agrees_with_argocd(case: dict[str, Any]) -> None:
    obj = fixture(case)
    if "status" not in obj:
        # Flux's CEL sees no `status` variable at all: an evaluation error, i.e. not ready yet.
        assert flux_health(obj) == "Unknown"
        return
    assert flux_health(obj) == FLUX_FOR_ARGO[case["healthStatus"]["status"]]


def test_flux_kustomization_targets_the_examples() -> None:
    assert FLUX["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1" and FLUX["kind"] == "Kustomization"
    spec = FLUX["spec"]
    assert spec["wait"] is True
    assert (ROOT / spec["path"] / "kustomization.yaml").exists()
    (check,) = spec["healthCheckExprs"]
    assert check["apiVersion"] == "rltrainer.io/v1alpha1"
    assert set(check) == {"apiVersion", "kind", "inProgress", "failed", "current"}
