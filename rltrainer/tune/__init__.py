"""Ray Tune's import paths the documents use with rltrainer (``rltrainer.tune.logger.pretty_print``).

Only the mirror paths live here; this package never imports ``ray.tune``.
"""
