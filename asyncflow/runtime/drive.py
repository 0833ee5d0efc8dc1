"""Driving the CPU partitions of one step inline, in whichever task runs a drain.

Theory of operation (the executor's ready queues are duck-typed here: ``drain_own``,
``complete``, ``report``, ``wake`` and a few flags):
- One ``Driver`` per multi-partition step (kept in ``step.extras``) is shared by the step's
  ready queues on CPU devices. A GPU partition (stream events, awaited transfers) and a
  single-partition step have none.
- A Recv of a CPU queue subscribes to the rendezvous with a ``Delivery``. When a Send run
  inside some drain of the step (the driver is *active*) delivers to it, the Recv completes
  at once and its queue joins ``runnable``; the running drain drains it when its own stack is
  empty (a trampoline: drains never nest, so a ping-pong of any length stays one drain deep).
  Deliveries from elsewhere (a task, an abort, an error) go on the queue's report channel.
- A queue's task is woken (a ``WAKE`` on its channel) only when it must act itself: kernels
  to start as tasks, a failure, or its last node done. A queue that has no channel yet has
  no task parked on it: its wake is a no-op, and whoever owns it looks at its state later
  (``compiler.run_partitions`` starts every partition inline first and gives a task only to
  those left unfinished).
- Time slices: a drain stops, nodes left ``ready``, when the thread's time slice is over
  (``timeslice``). The driver then stops too: the queues still runnable and the one it was
  draining are woken, and the queue it was asked to drain is left to its caller, which
  checkpoints and drains again; so a ping-pong of any length still yields once per slice.
- A waiting kernel's subscribing form is the plan's ``NodePlan.subscribe`` (set at build).
"""
from __future__ import annotations

WAKE = (None, None, None, 0)  # on a report channel: "your queue changed, look again"
_DRIVER = "ready_queue_driver"  # ``step.extras`` key of the step's ``Driver``


def driver_for(step, device):
    """The step's shared ``Driver`` for a queue on ``device``, or None (GPU, one partition)."""
    if step.rendezvous is None or device.kind != "CPU":
        return None
    driver = step.extras.get(_DRIVER)
    if driver is None:
        driver = step.extras[_DRIVER] = Driver()
    return driver


class Driver:
    """Drains the CPU ready queues of one step's partitions inline, one after the other.

    A Send run inside some queue's drain that delivers to another CPU queue's Recv
    subscription does not wake that queue's task: the Recv completes at once and the queue
    joins ``runnable``; the drain that is running (the *driver*, in whichever task) drains it
    when its own stack is empty. A queue's task is woken only when it must act itself.
    """

    __slots__ = ("active", "runnable", "current")

    def __init__(self):
        self.active = False   # a drain of this step is running (on the step's loop thread)
        self.runnable = []    # queues with ready nodes delivered by the running drain
        self.current = None   # the queue being drained (its own stack takes its deliveries)

    def run(self, queue):
        """Drain ``queue``, then every queue made runnable meanwhile.

        Other queues that must act afterwards are woken; ``queue`` itself is not (its caller
        looks at it).
        """
        if self.active:  # not reached from task code; kept safe: the running loop takes it
            queue.schedule(self)
            return
        self.active = True
        runnable = self.runnable
        try:
            self.current = queue
            queue.drain_own()
            over = bool(queue.ready) and queue.failure is None  # its time slice ran out
            while runnable and not over:
                other = runnable.pop()
                other.scheduled = False
                if other.failure is None:
                    self.current = other
                    other.drain_own()
                    over = bool(other.ready) and other.failure is None
                if other is not queue and (other.failure is not None or not other.remaining
                                           or other.waiting or over):
                    other.wake()  # its task must act: start tasks, fail, return, or go on
        finally:
            self.active = False
            self.current = None
            while runnable:  # the slice ran out, or an exception escaped a kernel: let their
                # tasks drain them
                other = runnable.pop()
                other.scheduled = False
                other.wake(force=True)


class Delivery:
    """``deliver(result, exc=None)`` of one subscribed node, called once by its producer.

    Called synchronously. From inside a drain of this step (a Send run inline by a driver),
    a CPU queue completes the node at once and joins the driver's ``runnable``; otherwise
    (a task, an abort, a GPU queue, an error) the report goes on the queue's channel.
    """

    __slots__ = ("queue", "node", "start")

    def __init__(self, queue, node, start):
        self.queue = queue
        self.node = node
        self.start = start

    def __call__(self, result, exc=None):
        queue = self.queue
        driver = queue.driver
        if exc is None and driver is not None and driver.active and queue.failure is None:
            queue.complete(self.node, result, self.start, waited=True)
            if not queue.scheduled and queue is not driver.current:  # (a value already there)
                queue.scheduled = True
                driver.runnable.append(queue)
            return
        queue.report((self.node, result, exc, self.start))
