"""Settings for the whole suite."""

import os

# Operator timers tick every second in tests (the default is 10 s); read when handlers import.
os.environ.setdefault("RLTRAINER_OPERATOR_POLL_INTERVAL_S", "1")
