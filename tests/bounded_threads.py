"""Run a blocking call on a thread of its own with a bound: a test of code that could hang
(an interrupted intra-op split) fails instead of hanging the suite.

Import from tests as ``from bounded_threads import bounded`` (pytest puts the tests directory
on ``sys.path``).
"""
import threading


def bounded(fn, timeout=60):
    """``fn()`` on a thread of its own, joined for ``timeout`` seconds (a hang fails the test
    instead of hanging it); returns what it raised (None: it returned)."""
    outcome = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 -- returned to the test
            outcome.append(exc)
        else:
            outcome.append(None)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"hung for {timeout} s"
    return outcome[0]
