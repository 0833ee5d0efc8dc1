"""FIFOs for tests of reads that never end (a ReadFile on a FIFO nobody writes)."""
import errno
import os
import time


def release_fifo(path):
    """Let go of a read still waiting on the FIFO at ``path``: a writer opens and closes it,
    so the read ends at EOF (bounded retries while the reading thread has not reached its
    open yet; a FIFO nobody reads any more is left as it is)."""
    for _ in range(200):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError as exc:  # ENXIO: no reader (yet, or any more)
            if exc.errno != errno.ENXIO:
                raise
        time.sleep(0.01)
