"""rltrainer with Ray Tune: Tune's import paths the documents use (``rltrainer.tune.logger.pretty_print``),
the registration of our algorithms by name (``registration``) and sweeps from the CLI (``sweep``).

Importing this package does not import ``ray.tune``.
"""
