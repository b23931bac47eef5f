"""The real components beside the control plane, built here from their Go modules (``parts.toml``).

Each part is a Go module at a pinned version: ``build`` checks the module archive's hash against
the pin, installs the binary with this machine's ``go`` into a cache folder that outlives
checkouts (``~/.cache/rltrainer-parts/<name>/<version>/``, or ``$RLTRAINER_PARTS_CACHE``), and
checks the binary's embedded build information (``go version -m``) before handing it out. A
second build of the same version only re-checks (a second or two). ``module_dir`` gives a part's
module source (its CRDs and RBAC, for KubeRay), downloaded and checked the same way.

Standard library only, so ``make`` can run it before the virtual environment exists::

    python3 operator/rltrainer_operator/testing/parts.py build kuberay coredns
    python3 operator/rltrainer_operator/testing/parts.py path kuberay
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

PARTS_FILE = Path(__file__).with_name("parts.toml")


class PartError(RuntimeError):
    """A part cannot be had: no ``go``, a refused module, a hash or build-info mismatch."""


@dataclass(frozen=True)
class Part:
    name: str
    module: str
    version: str
    sum: str
    binary: str = ""
    floor: str = ""
    package: str = ""
    """The main package's import path, when it is not the module's root."""
    replace: tuple[str, ...] = ()
    """The module's own ``replace`` directives (``old => new version``), repeated by the build."""

    @property
    def ref(self) -> str:
        return f"{self.module}@{self.version}"


def parts() -> dict[str, Part]:
    """Every part of ``parts.toml`` by name."""
    table = tomllib.loads(PARTS_FILE.read_text())
    return {
        name: Part(name=name, **{**fields, "replace": tuple(fields.get("replace", ()))})
        for name, fields in table.items()
    }


def part(name: str) -> Part:
    known = parts()
    if name not in known:
        raise PartError(f"no part {name!r}; parts.toml has {', '.join(sorted(known))}")
    return known[name]


def cache_root() -> Path:
    configured = os.environ.get("RLTRAINER_PARTS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "rltrainer-parts"


def binary_path(name: str) -> Path:
    """Where ``build`` puts the part's binary (it may not be there yet)."""
    found = part(name)
    return cache_root() / found.name / found.version / found.binary


def find(name: str) -> Path | None:
    """The part's binary when it is built and its build information checks out, else None."""
    path = binary_path(name)
    if not path.exists():
        return None
    try:
        _check_build_info(part(name), path)
    except PartError:
        return None
    return path


def module_dir(name: str) -> Path:
    """The part's module source in Go's module cache (downloaded when missing), hash checked."""
    found = part(name)
    answer = json.loads(_go("mod", "download", "-json", found.ref))
    if answer.get("Error"):
        raise PartError(f"{found.ref}: {answer['Error']}")
    if answer.get("Sum") != found.sum:
        raise PartError(f"{found.ref}: module hash {answer.get('Sum')} differs from parts.toml's {found.sum}")
    return Path(answer["Dir"])


def build(name: str) -> Path:
    """The part's binary, built when missing; returns its path."""
    found = part(name)
    if not found.binary:
        raise PartError(f"part {name!r} has no binary to build")
    ready = find(name)
    if ready is not None:
        return ready
    module_dir(name)  # the archive's hash, before anything of it is compiled
    target = binary_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as staging:
        built = Path(staging) / found.binary
        if found.replace:
            _build_as_dependency(found, built)
        else:
            _go(
                "install",
                f"{found.package or found.module}@{found.version}",
                env={"GOBIN": staging},
                timeout_s=3600,
            )
        _check_build_info(found, built)
        os.replace(built, target)  # atomic: a half-built binary is never at the path
    return target


def _build_as_dependency(found: Part, output: Path) -> None:
    """Build a module whose ``go.mod`` has ``replace`` directives, which ``go install
    module@version`` refuses: as the one requirement of a throwaway main module that repeats
    them. Go's minimal version selection then picks exactly the versions the module's own
    ``go.mod`` lists, each checked against the checksum database as any download."""
    replaces = "".join(f"replace {line}\n" for line in found.replace)
    with tempfile.TemporaryDirectory(prefix=f"build-{found.name}-") as work:
        Path(work, "go.mod").write_text(
            f"module rltrainer.local/parts/{found.name}\n\ngo 1.26\n\n"
            f"require {found.module} {found.version}\n\n{replaces}"
        )
        Path(work, "parts.go").write_text(
            f'//go:build parts\n\npackage parts\n\nimport _ "{found.package or found.module}"\n'
        )
        _go(
            "build",
            "-o",
            str(output),
            found.package or found.module,
            env={"GOFLAGS": "-mod=mod"},
            cwd=work,
            timeout_s=3600,
        )


def _check_build_info(found: Part, path: Path) -> None:
    """``go version -m`` must name the part's module as the main package's module (``mod``), at
    its version and hash, and the main package as the part's."""
    info = _go("version", "-m", str(path))
    fields = [line.split("\t") for line in info.splitlines()]
    built = next((f[1:] for f in fields if len(f) > 1 and f[1] == "mod"), None)
    if built is None or built[1:4] != [found.module, found.version, found.sum]:
        raise PartError(
            f"{path}: built from {built[1:4] if built else 'unknown'}, not {found.ref} ({found.sum})"
        )
    package = next((f[2] for f in fields if len(f) > 2 and f[1] == "path"), None)
    if package != (found.package or found.module):
        raise PartError(f"{path}: its main package is {package}, not {found.package or found.module}")


def _go(*args: str, env: dict[str, str] | None = None, timeout_s: float = 600, cwd: str | None = None) -> str:
    go = shutil.which("go")
    if go is None:
        raise PartError("no `go` on PATH: the platform's real components are built from their Go modules")
    # The machine's own Go (no toolchain download), modules through the configured proxy, and
    # the checksum database consulted as configured: nothing here relaxes Go's own checks.
    variables = {**os.environ, "GOTOOLCHAIN": "local", **(env or {})}
    done = subprocess.run(
        [go, *args], capture_output=True, text=True, env=variables, timeout=timeout_s, check=False, cwd=cwd
    )
    if done.returncode != 0:
        raise PartError(f"go {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parts.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build the named parts (when missing) and check them")
    build_cmd.add_argument("names", nargs="+")
    build_cmd.add_argument(
        "--if-go",
        action="store_true",
        help="without `go` on PATH, say so and succeed (tests needing them skip)",
    )
    path_cmd = commands.add_parser("path", help="print a built part's binary path")
    path_cmd.add_argument("name")
    dir_cmd = commands.add_parser("dir", help="print a part's module source folder")
    dir_cmd.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            if args.if_go and shutil.which("go") is None:
                print(f"no `go` on PATH: not building {' '.join(args.names)}; tests that need them skip")
                return 0
            for name in args.names:
                started = time.monotonic()
                path = build(name)
                print(f"{name} {part(name).version}: {path} ({time.monotonic() - started:.1f} s)")
        elif args.command == "path":
            found = find(args.name)
            if found is None:
                raise PartError(f"{args.name} is not built: `make {args.name}`")
            print(found)
        else:
            print(module_dir(args.name))
    except PartError as err:
        print(f"parts.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
