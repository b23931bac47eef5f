"""``python -m rltrainer.preemption hook ...``: the preStop hook (``rltrainer.preemption.hook``)."""

from rltrainer.preemption.hook import main

raise SystemExit(main())
