"""Render the Helm chart with the real Helm v4 engine (helm-python-sdk) and read its RBAC."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import helm_python
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "rltrainer-operator"
RELEASE = "rltrainer-operator"
NAMESPACE = "rltrainer-system"
#: A cluster-wide grant (ClusterRole bound by a ClusterRoleBinding).
CLUSTER = "*"


class Permission(NamedTuple):
    """One RBAC grant: ``verb`` on ``api_group``/``resource`` in ``scope`` (a namespace or ``*``)."""

    api_group: str
    resource: str
    verb: str
    scope: str


@functools.cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART_DIR)


def render(
    values: dict[str, Any] | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, str]:
    """Template path -> rendered text (what ``helm template`` prints), NOTES.txt included."""
    return chart().render(values or {}, name=name, namespace=namespace, is_install=True)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """The rendered Kubernetes objects, in template order (NOTES.txt and empty documents left out)."""
    objects = []
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return objects


def render_objects(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return manifests(render(values, **kwargs))


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def granted_permissions(objects: list[dict[str, Any]], service_account: tuple[str, str]) -> set[Permission]:
    """Everything the rendered RBAC lets ``(namespace, name)``'s service account do.

    A ClusterRoleBinding grants its ClusterRole's rules cluster-wide (scope ``*``); a RoleBinding
    grants its Role's (or ClusterRole's) rules in the binding's namespace. Roles that no binding
    names grant nothing. ``*`` verbs/resources/groups stay ``*`` (a test can then reject them).
    """
    roles = {("ClusterRole", None, obj["metadata"]["name"]): obj for obj in of_kind(objects, "ClusterRole")}
    roles.update(
        {
            ("Role", obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
            for obj in of_kind(objects, "Role")
        }
    )
    granted: set[Permission] = set()
    for binding in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding"):
        subjects = {
            (subject.get("namespace"), subject["name"])
            for subject in binding.get("subjects", [])
            if subject["kind"] == "ServiceAccount"
        }
        if service_account not in subjects:
            continue
        ref = binding["roleRef"]
        scope = CLUSTER if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        role_namespace = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        if role is None:
            raise AssertionError(f"{binding['kind']} {binding['metadata']['name']} names a missing {ref}")
        for rule in role.get("rules", []):
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        granted.add(Permission(group, resource, verb, scope))
    return granted


def allows(granted: set[Permission], wanted: Permission) -> bool:
    """Whether ``granted`` covers ``wanted`` (a cluster-wide grant covers every namespace)."""
    scopes = {wanted.scope, CLUSTER}
    return any(
        permission.scope in scopes
        and permission.api_group in {wanted.api_group, "*"}
        and permission.resource in {wanted.resource, "*"}
        and permission.verb in {wanted.verb, "*"}
        for permission in granted
    )


def request_permission(method: str, url: str) -> Permission | None:
    """The RBAC permission one Kubernetes API request needs (RBAC's request attributes).

    ``GET .../rlexperiments?watch=true`` -> watch, ``GET .../rlexperiments`` -> list,
    ``GET .../rlexperiments/x`` -> get, ``PATCH .../x/status`` -> patch on ``rlexperiments/status``;
    a request without ``namespaces/<ns>`` in its path is cluster-wide (scope ``*``). Discovery
    (``/api``, ``/apis``, ``/apis/<group>/<version>``, ``/version``) is not a resource request:
    None (every authenticated user may read it, through the ``system:discovery`` ClusterRole).
    """
    split = urlsplit(url)
    parts = split.path.strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:  # /api/v1/...: the core group
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    else:
        return None
    scope = CLUSTER
    if len(rest) >= 3 and rest[0] == "namespaces":
        scope, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource += "/" + rest[2]
    watch = parse_qs(split.query).get("watch", ["false"])[0] in {"true", "1"}
    method = method.upper()
    if method == "GET":
        verb = "get" if name and not watch else ("watch" if watch else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return Permission(group, resource, verb, scope)


def dump(rendered: dict[str, str]) -> str:
    """The render as one YAML stream with ``# Source:`` headers (``helm template``'s layout)."""
    out = []
    for path in sorted(rendered):
        text = rendered[path].strip("\n")
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        for doc in text.split("\n---\n"):
            doc = doc.strip("\n").removeprefix("---\n")
            if doc.strip():
                out.append(f"---\n# Source: {path}\n{doc}\n")
    return "".join(out)
