"""What every section of ``AlgorithmConfig`` shares: the pydantic settings of a section class
(each builder method's fields, docs and checks live in a module of this package, one class per
section, and ``AlgorithmConfig`` inherits them all) and the schedule type of learning rates and
coefficients."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict

from rltrainer.errors import ConfigError

#: The model settings of ``AlgorithmConfig`` and of each section it is built from. Strict: "100"
#: is not an int and 1 is not a bool (ints are still fine as floats).
SECTION_MODEL_CONFIG = ConfigDict(
    validate_assignment=True,
    extra="forbid",
    strict=True,
    arbitrary_types_allowed=True,
    protected_namespaces=(),
    # Validators are built when a class is first instantiated: the sections and
    # AlgorithmConfig are bases that are not, and a run instantiates one algorithm's config.
    defer_build=True,
)
# (Not pydantic's use_attribute_docstrings: it parses every section's source at import, a
# noticeable part of each run's start-up, for the field docs that only messages read: field_doc.)

# JSON and YAML give [timestep, value] pairs as lists; strict validation wants tuples.
PiecewiseSchedule = list[
    Annotated[
        tuple[int, float], BeforeValidator(lambda pair: tuple(pair) if isinstance(pair, list) else pair)
    ]
]


class ConfigSection(BaseModel):
    """A builder section's fields, their checks and its builder method; ``AlgorithmConfig``
    provides ``_update`` (which sets a section's keys, validated) and the other sections."""

    model_config = SECTION_MODEL_CONFIG


def field_doc(cls: type, name: str) -> str:
    """The docstring under field ``name`` in the class that declares it ("" without one), as
    pydantic's ``use_attribute_docstrings`` would give it; read from the source when asked."""
    for base in cls.__mro__:
        if name not in base.__dict__.get("__annotations__", {}):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(base))).body[0].body
        except (OSError, TypeError, SyntaxError):  # no source (e.g. a frozen or interactive class)
            return ""
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return inspect.cleandoc(after.value.value)
        return ""
    return ""


def check_schedule(name: str, schedule: PiecewiseSchedule) -> None:
    steps = [t for t, _ in schedule]
    if not schedule or steps != sorted(steps) or steps[0] < 0:
        raise ConfigError(
            f"{name} schedule must be a non-empty list of [timestep, value] pairs with "
            f"non-negative, increasing timesteps; got {schedule}"
        )
