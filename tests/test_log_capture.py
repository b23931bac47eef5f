"""The suite's own settings: pytest's log capture and threads that create loggers (tests/conftest.py)."""

import logging
import threading
import time

from _pytest.logging import LogCaptureHandler, catching_logs

PREFIX = "rltrainer-tests-log-capture-race"


def test_attaching_the_log_capture_races_no_thread_creating_loggers() -> None:
    """Without the lock in tests/conftest.py this fails within a second or so with ``RuntimeError:
    dictionary changed size during iteration``, as the journey on Pods once did."""
    loggers = logging.root.manager.loggerDict
    # Many loggers, so that walking them outlasts a thread switch (5 ms) as in a long session.
    crowd = [logging.getLogger(f"{PREFIX}.crowd-{i}") for i in range(100_000)]
    stop = threading.Event()

    def create_and_drop_loggers() -> None:
        names = [f"{PREFIX}.new-{i}" for i in range(100)]
        while not stop.is_set():
            for name in names:
                logging.getLogger(name)
            with logging._lock:  # dropped as logging itself changes the dict
                for name in names:
                    loggers.pop(name, None)

    creator = threading.Thread(target=create_and_drop_loggers, daemon=True)
    creator.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            with catching_logs(LogCaptureHandler(), level=logging.INFO):
                pass
    finally:
        stop.set()
        creator.join()
        with logging._lock:  # leave the dict as it was: every later phase walks it
            for name in [name for name in loggers if name.startswith(PREFIX)]:
                del loggers[name]
        del crowd
