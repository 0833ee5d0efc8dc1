"""TensorFlow 1.x's own tests, ported: shared queues and variables live in the process-wide
resource manager (as in one TF process), so each test starts with it empty (what
``await af.Session.reset()`` does, here callable from synchronous tests too)."""
import pytest

from asyncflow.exec.resources import process_resources


@pytest.fixture(autouse=True)
def empty_process_resources():
    process_resources().reset(None)
    yield
    process_resources().reset(None)
