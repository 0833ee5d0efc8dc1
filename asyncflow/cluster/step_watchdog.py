"""A cluster step's health watchdog: what runs once a step outlives ``health_check_interval_s``
(``step_monitor.StepMonitor`` starts it for the master's ``StepDriver``).

It asks the Health of every task of the step each interval until the step's calls end. A task
that does not answer, or answers with another incarnation (it restarted behind a live
connection), fails the step: the driver records the error and cancels that task's RunGraph
(``driver._failed(..., dead_task=...)``). A bug in the watchdog itself fails its step with an
InternalError, never the monitor (which serves the master's other steps).

Who decides a step's outcome when its cancels meet: a session closing and the watchdog
declaring a task dead at the same moment (both before the step's task runs again) end the
step as the first of them says. The watchdog's cancel is the driver's own only while the
master is not closing (``driver.cancel_call``); a close that began first wins, so the step
fails with the closed session's CancelledError, as any step in flight when its session closes.
A verdict that came first keeps its error, as does any failure the driver recorded before the
close began (``driver.failed_before_close``: a task's error while another's call waits).
"""
from __future__ import annotations

import trio

from asyncflow import errors


async def guarded(driver):
    """``watch(driver)``; an exception of its own (not a worker's error) fails the step."""
    try:
        await watch(driver)
    except Exception as exc:  # noqa: BLE001 - not the monitor's other steps' watchdogs
        await driver._failed(errors.InternalError(None, None, f"the watchdog of step "
                            f"{driver.step_id} failed: {type(exc).__name__}: {exc}"))
        for scope in list(driver.call_scopes.values()):  # (as a crash in its nursery did)
            driver.cancel_call(scope)


async def watch(driver):
    """Health of the step's tasks every ``health_check_interval_s`` until its calls end
    (started once the first interval has passed)."""
    master = driver.master
    interval = master.config.health_check_interval_s
    with driver.watchdog_scope:
        while True:
            for tg in driver.run_.task_graphs:
                task = master.tasks[tg.task]
                try:
                    restarted = await master._health(task)
                except errors.OpError as exc:
                    await driver._failed(exc, dead_task=task.name)
                    return
                if restarted or master.restarted([task.name]):
                    await driver._failed(master.restart_error([task], driver.step_id),
                                        dead_task=task.name)
                    return
            await trio.sleep(interval)
