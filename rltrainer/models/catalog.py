"""``ModelCatalog``: custom models by name (RLlib's ``ModelCatalog.register_custom_model``).

A registration is per process, like ``register_env``: the algorithm ships this process's
registrations to its remote env runners and learners. A ``"package.module:Class"`` path
in ``custom_model`` needs no registration (and works in Tune trials, which run in their own
processes).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rltrainer.errors import ConfigError
from rltrainer.utils.import_paths import import_object


class ModelCatalog:
    """The process's custom-model registry (class methods only)."""

    _custom_models: ClassVar[dict[str, type]] = {}

    @classmethod
    def register_custom_model(cls, model_name: str, model_class: type) -> None:
        """Make ``model_class`` (a ``TorchModelV2`` subclass) available as ``custom_model=model_name``."""
        if not isinstance(model_name, str) or not model_name:
            raise ConfigError(
                f"register_custom_model: the name must be a non-empty string, got {model_name!r}"
            )
        if not isinstance(model_class, type):
            raise ConfigError(
                f"register_custom_model({model_name!r}, ...): expected a TorchModelV2 subclass, "
                f"got {type(model_class).__name__} {model_class!r:.60}"
            )
        cls._custom_models[model_name] = model_class

    @classmethod
    def registered(cls) -> dict[str, type]:
        """Every registration of this process (what remote actors receive)."""
        return dict(cls._custom_models)

    @classmethod
    def register_all(cls, models: dict[str, type] | None) -> None:
        """Register ``models`` (a remote actor receiving the driver's registrations)."""
        cls._custom_models.update(models or {})

    @staticmethod
    def get_preprocessor_for_space(observation_space: Any, options: dict | None = None) -> Any:
        """RLlib's: an instance of ``get_preprocessor(space)`` (``.transform(obs)``: a model row)."""
        from rltrainer.models.preprocessors import get_preprocessor

        return get_preprocessor(observation_space)(observation_space, options)

    @classmethod
    def get_custom_model(cls, spec: Any) -> type:
        """The class ``custom_model`` names (a registered name, a path, or the class itself);
        ``ConfigError`` saying what is wrong and what is allowed."""
        if isinstance(spec, type):
            model_class = spec
        elif isinstance(spec, str) and spec in cls._custom_models:
            model_class = cls._custom_models[spec]
        elif isinstance(spec, str) and (":" in spec or "." in spec):
            try:
                model_class = import_object(spec)
            except (ImportError, AttributeError, ValueError) as err:
                raise ConfigError(f"model.custom_model {spec!r} cannot be imported ({err})") from None
        else:
            known = ", ".join(sorted(cls._custom_models)) or "none in this process"
            raise ConfigError(
                f"model.custom_model {spec!r} is not registered (registered: {known}); call "
                "ModelCatalog.register_custom_model(name, cls) first, or give a 'package.module:Class' path"
            )
        from rltrainer.models.torch.torch_modelv2 import TorchModelV2

        if not (isinstance(model_class, type) and issubclass(model_class, TorchModelV2)):
            raise ConfigError(
                f"model.custom_model {spec!r} is {model_class!r:.80}, not a TorchModelV2 subclass "
                "(from rltrainer.models import TorchModelV2)"
            )
        return model_class
