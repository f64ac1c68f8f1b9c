"""SIGTERM/SIGINT handling: a flag in the handler, the stop itself outside it."""

from __future__ import annotations

import os
import signal
import threading

from helpers import wait_for

from lockworker.runtime.signals import stop_on_signals


def test_a_signal_while_the_main_thread_holds_a_lock_the_stop_needs_does_not_deadlock() -> None:
    """The stop wakes waiters under locks the main thread may hold when the signal lands.

    Calling it inside the handler (which runs in the main thread) would deadlock here.
    """
    registry = threading.Lock()
    stopped: list[int] = []

    def on_stop(signum: int) -> None:
        with registry:
            stopped.append(signum)

    with stop_on_signals(on_stop) as installed:
        assert installed
        with registry:
            os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: stopped, timeout=5)
    assert stopped == [signal.SIGTERM]


def test_previous_handlers_are_restored_after_the_block_and_after_the_first_signal() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals(lambda signum: None):
        assert signal.getsignal(signal.SIGINT) is not before
        os.kill(os.getpid(), signal.SIGINT)
        wait_for(lambda: signal.getsignal(signal.SIGINT) is before, timeout=5)
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_nothing_is_installed() -> None:
    result: list[bool] = []

    def run() -> None:
        with stop_on_signals(lambda signum: None) as installed:
            result.append(installed)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert result == [False]


def test_with_on_again_a_second_signal_calls_it_and_not_the_previous_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    stopped: list[int] = []
    again: list[int] = []
    with stop_on_signals(stopped.append, on_again=again.append):
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: stopped, timeout=5)
        assert signal.getsignal(signal.SIGINT) is not before  # still ours
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt here
        wait_for(lambda: again, timeout=5)
    assert (stopped, again) == ([signal.SIGTERM], [signal.SIGINT])
    assert signal.getsignal(signal.SIGINT) is before


def test_with_on_again_one_signal_does_not_call_it() -> None:
    again: list[int] = []
    with stop_on_signals(lambda signum: None, on_again=again.append):
        os.kill(os.getpid(), signal.SIGTERM)
    assert again == []
