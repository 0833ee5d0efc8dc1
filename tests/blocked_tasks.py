"""Start a call as a trio task and wait until it blocks: how the queue tests stand in for TF's
"start a thread, sleep until the op has blocked".

Import from tests as ``from blocked_tasks import start_blocked`` (pytest puts the tests
directory on ``sys.path``).
"""
import trio
import trio.testing


async def start_blocked(nursery, fn, *args):
    """Run ``await fn(*args)`` as a task in ``nursery`` and wait until every task is blocked.

    Returns a dict that gets ``"value"`` (the result) or ``"error"`` (the exception) when the
    call ends, for the test to inspect.
    """
    box = {}

    async def run():
        try:
            box["value"] = await fn(*args)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            box["error"] = exc
    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()
    return box
