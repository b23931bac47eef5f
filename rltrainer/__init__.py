"""rltrainer: RLlib-style Training APIs on Ray, torch and gymnasium."""

__version__ = "0.1.0"
