"""The master's one timer for the health watchdogs of its steps.

Why: a step sends its last (or only) RunGraph from the caller's task, which waits for the
reply; a one-task step has no nursery at all. A nursery, a spawned task and an Event per
step, to wait for the calls under a timer, cost two extra passes of trio's scheduler (~60 us
of the client's CPU measured on the 2-core container, a tenth of a trivial remote step).
What the timer was for: a step that outlives ``health_check_interval_s`` gets a watchdog
that asks its tasks for their Health (a worker that hangs, or restarted behind a live
connection).

How: ``watch(step)`` notes the step and when it started; one task per master and trio run
(a system task, spawned on first use) sleeps until the oldest noted step has run for an
interval and then starts ``step.start_watchdog(nursery)`` in its own nursery, so a watchdog
starts exactly as late as it did with a timer per step. ``unwatch(step)`` when the step ends
(its watchdog, if started, is the step's to cancel). With nothing noted the task sleeps an
interval at a time: steps noted meanwhile are due after it wakes, never before. ``close()``
(the master closes) ends the task; so does the end of the trio run.

Nothing here knows about RunGraph or the cluster.
"""
from __future__ import annotations

import logging

import trio

_log = logging.getLogger(__name__)


class StepMonitor:
    """Starts a step's watchdog once it outlives ``interval`` seconds (see the module doc)."""

    def __init__(self, interval):
        self.interval = interval
        self._steps = {}      # step -> when it started (insertion order: oldest first)
        self._token = None    # the trio run whose system task serves this monitor
        self._scope = None
        self._ended = None    # set when that task has ended

    def watch(self, step):
        token = trio.lowlevel.current_trio_token()
        if self._token is not token:
            self._token = token
            self._scope, self._ended = trio.CancelScope(), trio.Event()
            trio.lowlevel.spawn_system_task(self._serve, self._scope, self._ended,
                                            name="asyncflow step monitor")
        self._steps[step] = trio.current_time()

    def unwatch(self, step):
        self._steps.pop(step, None)

    def close(self):
        """End the task (and the watchdogs it started); returns an Event set once they have
        ended, or None if there is none to wait for in the current trio run."""
        ended = None
        if self._scope is not None:
            self._scope.cancel()
            if self._token is trio.lowlevel.current_trio_token():
                ended = self._ended
        self._token = self._scope = self._ended = None
        self._steps.clear()
        return ended

    async def _serve(self, scope, ended):
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    while True:
                        now = trio.current_time()
                        while self._steps:
                            step, started = next(iter(self._steps.items()))
                            if now < started + self.interval:
                                break
                            del self._steps[step]
                            step.start_watchdog(nursery)
                        wake = (next(iter(self._steps.values())) if self._steps else now) \
                            + self.interval
                        await trio.sleep_until(wake)
        except Exception:  # noqa: BLE001 - a system task must not crash the run
            if self._scope is scope:
                self._token = None  # the next step starts another
            _log.exception("the step monitor failed; long steps get no health watchdog")
        finally:
            ended.set()
