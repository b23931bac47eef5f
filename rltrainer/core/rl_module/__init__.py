"""RLlib's ``ray.rllib.core.rl_module`` path, for ``DefaultModelConfig`` (its new API stack's
model settings, which ``rl_module(model_config=...)`` maps onto rltrainer's ``model``)."""
