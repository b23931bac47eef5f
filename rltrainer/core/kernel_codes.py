"""The activation codes the numba kernels take, shared by the kernels (``_numba_kernels``) and
the code that picks them (``compiled``, ``models``) without importing numba."""

#: Activations the kernels implement (others run in numpy), by the kernels' codes.
ACTIVATION_CODES = {"linear": 0, "relu": 1, "tanh": 2}
