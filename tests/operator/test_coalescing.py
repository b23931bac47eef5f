"""``CoalescingRunner``: at most one run waiting per key, however many asks come meanwhile."""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading

import pytest

from rltrainer_operator.coalescing import CoalescingRunner


@pytest.fixture
def executor():
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    yield pool
    pool.shutdown(wait=True)


def blocker() -> tuple[threading.Event, threading.Event]:
    """A blocking run's two events: it sets the first once started, then waits for the second."""
    return threading.Event(), threading.Event()


def test_asks_while_one_waits_are_that_one_and_an_ask_after_it_began_runs_again(executor):
    runner = CoalescingRunner(executor, "test run")
    runs: list[str] = []
    started, go = blocker()

    def first(begin):
        begin()
        started.set()
        go.wait(5)
        runs.append("first")

    # The pool's two threads busy: the first run, and a run of another key that waits.
    assert runner.ask("a", first)
    assert started.wait(5)
    other_started, other_go = blocker()
    assert runner.ask("b", lambda begin: (begin(), other_started.set(), other_go.wait(5)))
    assert other_started.wait(5)

    # "a" began, so a change now asks again: one run queued, the next asks are that one.
    assert runner.ask("a", lambda begin: (begin(), runs.append("second")))
    assert runner.waiting("a")
    assert not runner.ask("a", lambda _begin: runs.append("coalesced"))
    assert not runner.ask("a", lambda _begin: runs.append("coalesced"))
    go.set()
    other_go.set()
    executor.shutdown(wait=True)
    assert sorted(runs) == ["first", "second"]  # each once, the asks coalesced never ran
    assert not runner.waiting("a")


def test_a_run_that_never_began_frees_its_key(executor):
    runner = CoalescingRunner(executor, "test run")
    assert runner.ask("a", lambda _begin: None)  # nothing to work on: returns before begin()
    executor.shutdown(wait=True)
    assert not runner.waiting("a")
    assert runner.ask("a", lambda _begin: None) is False  # shut down: refused, not queued
    assert not runner.waiting("a")


def test_a_failed_run_is_logged_and_frees_its_key(executor, caplog):
    runner = CoalescingRunner(executor, "the reconcile after a change")

    def fails(_begin):
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="rltrainer_operator.coalescing"):
        assert runner.ask("a", fails)
        executor.shutdown(wait=True)
    assert not runner.waiting("a")
    [record] = [r for r in caplog.records if r.name == "rltrainer_operator.coalescing"]
    assert record.getMessage() == "the reconcile after a change failed"
    assert "boom" in str(record.exc_info[1])


def test_a_run_gets_the_askers_context(executor):
    # kopf.event() finds kopf's event queue in a context variable of the handler that asked.
    var = contextvars.ContextVar("var", default="unset")
    seen = []
    var.set("the handler's")
    runner = CoalescingRunner(executor, "test run")
    runner.ask("a", lambda _begin: seen.append(var.get()))
    executor.shutdown(wait=True)
    assert seen == ["the handler's"]
