"""rltrainer's Kubernetes operator (imported as ``rltrainer_operator``; ``operator`` is a stdlib name).

Layers (STYLE.md): ``handlers`` (thin kopf functions) call ``reconciler`` (the experiment's
state machine, pure), which asks ``builders`` for manifests and acts through ``kube`` (the only
module that talks to the Kubernetes API) and ``ray_jobs`` (Ray's job submission REST API).

The package is the operator: importing it registers the kopf handlers, so
``kopf run --standalone -m rltrainer_operator --all-namespaces`` runs it (as does
``-m rltrainer_operator.handlers``).
"""

from rltrainer_operator import handlers  # noqa: F401 - registers the kopf handlers
