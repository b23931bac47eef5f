"""``python -m rltrainer`` is the ``rltrainer`` command."""

from rltrainer.cli import main

raise SystemExit(main())
