"""A small step's RunGraph frame from its kept image (``transports.run_graph_step.StepImage``):
exactly the bytes a full encode gives for any ids of the image's widths and any feed values
of the signature, checksummed or not; None (the prepared encode builds it) for an id of
another width or not a uint, a feed of another dtype, shape or layout, another checksum
setting; no image of a frame over ``WHOLE_BYTES``."""
import numpy as np
import pytest

from frame_bytes import full_frame
from transports import repeat_frames, wire
from transports.run_graph_step import WHOLE_BYTES, RunGraphStep, StepImage

LIMITS = wire.DEFAULT_LIMITS


def _values(rng):
    return [np.asarray(rng.standard_normal(), np.float32), np.zeros((0, 2), np.int64),
            rng.integers(-9, 9, (2, 3)).astype(np.int32)]


def _image(step, ids, values, checksums):
    """(the prepared signature, its image) after the step's first full encode."""
    wire.encode(step.message(*ids, values), LIMITS, checksums=checksums)
    prepared = repeat_frames.prepare(step.message(*ids, values), LIMITS, checksums)
    names = prepared.volatile_names()
    assert names == ("step_id", "request_id")
    return prepared, StepImage.learn(prepared.encode_step, names, ids, values, checksums)


@pytest.mark.parametrize("checksums", [True, False])
def test_each_width_of_ids_builds_the_full_encodes_bytes(checksums):
    rng = np.random.default_rng(0)
    step = RunGraphStep("session-1/graph/7", ["_feed_0:0", "_feed_1:0", "_feed_2:0"],
                        ["mul:0"], None, False)
    for step_id, request_id in [(2**61 + 1, 1), (2**61 + 3, 200), (2**62 - 1, 300),
                                (5, 70_000), (2**40 + 7, 2**33)]:
        values = _values(rng)
        prepared, image = _image(step, (step_id, request_id), values, checksums)
        assert image is not None
        for k in range(1, 5):  # other ids of the same widths, other values
            ids = (step_id ^ (2 * k), request_id + k if request_id not in (200, 1) else
                   request_id + 2 * k)
            values = _values(rng)
            built = image.frame(ids, values, checksums)
            assert len(built) == 1
            want = full_frame(step.message(*ids, values), checksums=checksums)
            assert bytes(built[0]) == want
            assert wire.decode(bytes(built[0]), LIMITS) == step.message(*ids, values)


def test_no_frame_for_another_width_feed_or_setting():
    rng = np.random.default_rng(1)
    step = RunGraphStep("session-1/graph/7", ["_feed_0:0", "_feed_1:0", "_feed_2:0"],
                        ["mul:0"], None, False)
    values = _values(rng)
    _, image = _image(step, (2**61 + 1, 100), values, True)
    assert image.frame((2**61 + 3, 101), values, True) is not None
    assert image.frame((2**61 + 3, 128), values, True) is None  # request_id one byte wider
    assert image.frame((2**20, 101), values, True) is None      # step_id narrower
    assert image.frame((2**61 + 3, 0), values, True) is None    # (a default: left out)
    assert image.frame((2**61 + 3, True), values, True) is None
    assert image.frame((2**61 + 3, 101), values, False) is None
    for changed in (np.float64(1.0), np.zeros(2, np.float32), values[2].T, values[2].tolist()):
        assert image.frame((2**61 + 3, 101), [changed, *values[1:]], True) is None
    assert image.frame((2**61 + 3, 101), values[:2], True) is None


def test_no_image_of_a_large_frame():
    step = RunGraphStep("session-1/graph/8", ["_feed_0:0"], ["mul:0"], None, False)
    values = [np.zeros(WHOLE_BYTES // 4, np.float32)]
    _, image = _image(step, (2**61 + 1, 1), values, True)
    assert image is None
