"""What every section of ``AlgorithmConfig`` shares: the pydantic settings of a section class
(each builder method's fields, docs and checks live in a module of this package, one class per
section, and ``AlgorithmConfig`` inherits them all) and the schedule type of learning rates and
coefficients."""

from __future__ import annotations

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
    use_attribute_docstrings=True,
    protected_namespaces=(),
)

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


def check_schedule(name: str, schedule: PiecewiseSchedule) -> None:
    steps = [t for t, _ in schedule]
    if not schedule or steps != sorted(steps) or steps[0] < 0:
        raise ConfigError(
            f"{name} schedule must be a non-empty list of [timestep, value] pairs with "
            f"non-negative, increasing timesteps; got {schedule}"
        )
