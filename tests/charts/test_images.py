"""The container images, read without a container engine: the Dockerfiles parsed (dockerfile-parse),
and everything they reference checked against the project (entrypoints, packages, versions,
the files their build context sends)."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from kopf import cli as kopf_cli
from packaging.requirements import Requirement
from packaging.version import Version

from rltrainer_operator.models import DEFAULT_RAY_VERSION
from tests.charts.helpers import CHART_DIR, ROOT, render_objects

OPERATOR = ROOT / "images" / "operator" / "Dockerfile"
TRAINER = ROOT / "images" / "trainer" / "Dockerfile"
#: The operator image's runtime requirements (in the build context: operator/ is sent whole).
OPERATOR_REQUIREMENTS = "operator/requirements.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def parse(path: Path, **build_args: str) -> DockerfileParser:
    return DockerfileParser(path=str(path), build_args=build_args)


def instructions(parser: DockerfileParser, name: str, *, final_stage: bool = False) -> list[str]:
    found = []
    for item in parser.structure:
        if final_stage and item["instruction"] == "FROM":
            found = [] if name != "FROM" else found
        if item["instruction"] == name:
            found.append(item["value"])
    return found


def requirement(name: str, requirements: list[str]) -> Requirement:
    (found,) = [Requirement(r) for r in requirements if Requirement(r).name == name]
    return found


def makefile_torch_pin() -> str:
    (pin,) = re.findall(r"\$\(UV_INSTALL\)[^\n]* torch==([\d.]+)", (ROOT / "Makefile").read_text())
    return pin


# --- build context --------------------------------------------------------------------------


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path (or one of its parent folders) wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates)
        if hit:
            ignored = not negate
    return ignored


def ignore_patterns(dockerfile: Path) -> list[str]:
    lines = (dockerfile.parent / "Dockerfile.dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("dockerfile", [OPERATOR, TRAINER], ids=["operator", "trainer"])
def test_build_context_sends_the_package_sources_only(dockerfile: Path) -> None:
    """Every COPY source exists, and the .dockerignore keeps exactly what the package build needs."""
    patterns = ignore_patterns(dockerfile)
    for copy in instructions(parse(dockerfile), "COPY"):
        args = [arg for arg in shlex.split(copy) if not arg.startswith("--")]
        if "--from=" in copy:
            continue
        for source in args[:-1]:
            assert (ROOT / source).exists(), f"{dockerfile.parent.name}: COPY {source} is not in the project"
            assert not dockerignored(source, patterns), f"{source} is excluded by the .dockerignore"
    tracked = subprocess.run(
        ["git", "ls-files", "rltrainer", "operator/rltrainer_operator"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked and all(not dockerignored(path, patterns) for path in tracked if path.endswith(".py"))
    for path in ("tests/test_api.py", ".venv/bin/python", "bench", "charts/rltrainer-operator/Chart.yaml"):
        assert dockerignored(path, patterns), path
    assert dockerignored("rltrainer/__pycache__/cli.cpython-311.pyc", patterns)


def build_context(patterns: list[str], destination: Path) -> Path:
    """Copy what ``docker build .`` would send with these ignore patterns into ``destination``."""
    reincluded = {p.lstrip("!").strip("/").split("/")[0] for p in patterns if p.startswith("!")}
    for top in sorted(ROOT.iterdir()):
        if dockerignored(top.name, patterns) and top.name not in reincluded:
            continue
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            relative = path.relative_to(ROOT).as_posix()
            if not dockerignored(relative, patterns):
                (destination / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination / relative)
    return destination


def test_build_context_builds_both_packages(tmp_path: Path) -> None:
    """``pip install /src[operator]`` in the image: the context alone builds a wheel holding
    rltrainer, the operator (its handlers module) and the ``rltrainer`` console script."""
    patterns = ignore_patterns(OPERATOR)
    assert patterns == ignore_patterns(TRAINER)
    context = build_context(patterns, tmp_path / "src")
    assert sorted(p.name for p in context.iterdir()) == [
        "README.md",
        "operator",
        "pyproject.toml",
        "rltrainer",
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path,
            context,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("rltrainer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"rltrainer/cli.py", "rltrainer_operator/handlers.py", "rltrainer_operator/settings.py"} <= names
    assert not any("__pycache__" in name or name.startswith("tests/") for name in names)
    (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
    assert "rltrainer = rltrainer.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# --- the operator image -------------------------------------------------------------------------


#: The public base both Dockerfiles default to (`make images` passes a local one where mmdebstrap is).
PUBLIC_BASE = "python:3.11-slim-bookworm"


def test_operator_image_is_slim_python_and_non_root() -> None:
    parser = parse(OPERATOR)
    assert parser.baseimage == PUBLIC_BASE
    assert all(image == PUBLIC_BASE for image in parser.parent_images)
    python = Version(parser.baseimage.split(":")[1].split("-")[0])
    assert python in Requirement(f"python{PROJECT['requires-python']}").specifier
    (user,) = instructions(parser, "USER", final_stage=True)
    assert user.split(":")[0] not in {"root", "0"}
    # The chart runs the pod as the same uid.
    assert user.split(":")[0] == str(
        yaml.safe_load((CHART_DIR / "values.yaml").read_text())["podSecurityContext"]["runAsUser"]
    )


def operator_requirements() -> list[Requirement]:
    lines = (ROOT / OPERATOR_REQUIREMENTS).read_text().splitlines()
    return [Requirement(line) for line in (line.split("#")[0].strip() for line in lines) if line]


def test_operator_image_installs_only_the_operator_runtime() -> None:
    """Its requirements file, then rltrainer without dependencies: no torch, no Ray."""
    runs = instructions(parse(OPERATOR), "RUN")
    installs = [shlex.split(line) for run in runs for line in re.findall(r"pip install ([^&]+)", run)]
    assert installs == [["-r", f"/src/{OPERATOR_REQUIREMENTS}"], ["--no-deps", "/src"]]
    assert f"COPY {OPERATOR_REQUIREMENTS} /src/{OPERATOR_REQUIREMENTS}" in OPERATOR.read_text()
    # No torch installed (the build checks the handlers import without it).
    assert "pip install torch" not in " ".join(runs) and "TORCH_VERSION" not in OPERATOR.read_text()
    assert "'torch' not in sys.modules" in " ".join(runs)
    assert parse(OPERATOR).args["VERSION"] == PROJECT["version"]
    names = {requirement.name for requirement in operator_requirements()}
    assert not names & {"torch", "ray", "safetensors"}
    # The operator extra is the operator's own runtime: all of it is in the image.
    assert {Requirement(r).name for r in PROJECT["optional-dependencies"]["operator"]} <= names


def test_operator_requirements_have_pyprojects_ranges() -> None:
    """Each package the operator image installs has the range pyproject.toml gives it."""
    declared = PROJECT["dependencies"] + PROJECT["optional-dependencies"]["operator"]
    for wanted in operator_requirements():
        assert requirement(wanted.name, declared).specifier == wanted.specifier, wanted.name


def test_operator_entrypoint_is_a_kopf_run_of_the_handlers_under_the_leader_elector() -> None:
    parser = parse(OPERATOR)
    (entrypoint,) = instructions(parser, "ENTRYPOINT")
    (cmd,) = instructions(parser, "CMD")
    command, default_args = json.loads(entrypoint), json.loads(cmd)
    elector = command[: command.index("--")]
    assert elector == ["python", "-m", "rltrainer_operator.leader_election"]
    assert importlib.util.find_spec(elector[2]) is not None
    argv = command[command.index("--") + 1 :]  # what the elector runs while it holds the Lease
    assert argv[:3] == ["kopf", "run", "--standalone"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in argv
    module = argv[argv.index("-m") + 1]
    assert module == "rltrainer_operator.handlers"
    assert importlib.util.find_spec(module) is not None, f"{module} is not in the project"
    assert (ROOT / "operator" / "rltrainer_operator" / "handlers.py").exists()
    assert default_args == ["--all-namespaces"]
    # kopf's own CLI accepts the entrypoint with the image's default args and with the chart's.
    chart_args = [
        next(o for o in render_objects(values) if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        for values in ({}, {"watch": {"clusterWide": False, "namespaces": ["a", "b"]}})
    ]
    for args in [default_args, *chart_args]:
        context = kopf_cli.run.make_context("run", argv[2:] + args)
        assert context.params["standalone"] is True
        assert context.params["modules"] == (module,)
        assert context.params["liveness_endpoint"] == "http://0.0.0.0:8080/healthz"
        assert context.params["clusterwide"] or context.params["namespaces"]
    assert "8080" in instructions(parser, "EXPOSE")[0].split()


# --- the trainer image --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_trainer_image_is_the_pinned_ray_version(variant: str) -> None:
    parser = parse(TRAINER, VARIANT=variant)
    assert parser.baseimage == PUBLIC_BASE
    assert Version(DEFAULT_RAY_VERSION) in requirement("ray", PROJECT["dependencies"]).specifier
    assert parser.args["RAY_VERSION"] == DEFAULT_RAY_VERSION
    assert parser.labels["io.rltrainer.variant"] == variant
    (user,) = instructions(parser, "USER")
    assert user == "1000:1000"  # Ray images' non-root uid, which KubeRay's examples run as
    runs = " ".join(instructions(parser, "RUN"))
    assert f"{variant})" in runs  # the torch install has a branch for this variant
    # With the compiled inference kernels and Ray's dashboard (the job API the operator uses).
    assert 'pip install "/src[fast]" "ray[default]==${RAY_VERSION}"' in runs
    assert "fast" in PROJECT["optional-dependencies"]
    # The build runs the CLI the operator submits as the Ray job (`rltrainer train ...`).
    assert "rltrainer --version" in runs and PROJECT["scripts"]["rltrainer"] == "rltrainer.cli:main"
    pin = re.search(r"ARG TORCH_VERSION=([\d.]+)", TRAINER.read_text()).group(1)
    assert pin == makefile_torch_pin()


@pytest.mark.parametrize("dockerfile", [OPERATOR, TRAINER], ids=["operator", "trainer"])
def test_images_carry_oci_labels(dockerfile: Path) -> None:
    labels = parse(dockerfile).labels
    assert labels["org.opencontainers.image.version"] == PROJECT["version"]
    assert labels["org.opencontainers.image.licenses"] == PROJECT["license"]["text"]
    assert labels["org.opencontainers.image.title"].startswith("rltrainer-")
    assert labels["org.opencontainers.image.description"]


def test_make_images_builds_the_images_the_chart_and_examples_use() -> None:
    """`make -n images` with docker and the public base: the commands a user without podman runs."""
    done = subprocess.run(
        ["make", "-s", "-n", "images", "CONTAINER_ENGINE=docker", "BASE_IMAGE=", "TRAINER_VARIANTS=cpu gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.replace("\\\n", " ").replace("&& true", "").split("&&")
    commands = [shlex.split(line) for chunk in lines for line in chunk.splitlines() if "build" in line]
    assert len(commands) == 3
    tags = {}
    for command in commands:
        assert command[:2] == ["docker", "build"] and command[-1] == "."
        assert "-v" not in command  # build-time mounts are podman's
        dockerfile = ROOT / command[command.index("-f") + 1]
        assert dockerfile in {OPERATOR, TRAINER}
        build_args = dict(
            command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--build-arg"
        )
        assert build_args["VERSION"] == PROJECT["version"]
        assert "BASE_IMAGE" not in build_args  # the Dockerfiles' public base
        tags[command[command.index("-t") + 1]] = build_args.get("VARIANT")
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    version = PROJECT["version"]
    assert tags == {
        f"{values['image']['repository']}:{version}": None,
        f"{values['trainerImage']['repository']}:{version}-cpu": "cpu",
        f"{values['trainerImage']['repository']}:{version}-gpu": "gpu",
    }
    gpu_example = yaml.safe_load((ROOT / "examples" / "ppo-gpu-learner.yaml").read_text())
    assert gpu_example["spec"]["image"] in tags
