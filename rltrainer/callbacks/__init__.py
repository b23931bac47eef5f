"""RLlib's current module path of callbacks (``ray.rllib.callbacks``): ``rltrainer.callbacks.callbacks``."""
