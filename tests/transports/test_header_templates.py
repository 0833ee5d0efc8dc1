"""RunGraph, PushTensors and RecvTensors headers decoded from a template
(``transports/header_templates.py``) decode exactly as a full parse does, whatever changes
between frames."""
import msgpack
import numpy as np
import pytest

from transports import header_templates, wire
from transports.messages import PushTensors, RecvTensors, RunGraph, TensorEntry

LIMITS = wire.DEFAULT_LIMITS


@pytest.fixture(autouse=True)
def no_templates():
    header_templates._templates.clear()
    yield
    header_templates._templates.clear()


def _frame(message):
    return b"".join(bytes(b) for b in wire.encode(message, LIMITS))


def _run_graph(step_id, request_id, handle="sess/1/abcd", fetches=("mul:0",), value=1.0,
               **kwargs):
    feeds = [TensorEntry("_feed_0:0", np.asarray(value, np.float32))]
    return RunGraph(handle, step_id, feeds, list(fetches), request_id=request_id, **kwargs)


def _same(decoded, sent):
    assert (decoded.graph_handle, decoded.step_id, decoded.fetch_keys, decoded.timeout_ms,
            decoded.trace, decoded.request_id) == (sent.graph_handle, sent.step_id,
                                                   sent.fetch_keys, sent.timeout_ms,
                                                   sent.trace, sent.request_id)
    assert [e.key for e in decoded.feeds] == [e.key for e in sent.feeds]
    for got, want in zip(decoded.feeds, sent.feeds):
        assert got.value.dtype == want.value.dtype and got.value.shape == want.value.shape
        assert np.array_equal(got.value, want.value)


def _templates():
    return sum(len(kept) for kept in header_templates._templates.values())


def test_steps_after_the_first_decode_from_its_template_with_their_own_ids():
    sent = [_run_graph((7 << 40) + 2 * i + 1, i + 1, value=float(i)) for i in range(200)]
    for message in sent:
        _same(wire.decode(_frame(message), LIMITS), message)
    # fixint, then uint8 request ids: one template per encoding width
    assert 1 <= _templates() <= 2
    assert header_templates.lookup(LIMITS, b"") is None


def test_a_request_id_crossing_an_encoding_width_and_small_step_ids_decode_right():
    for step_id, request_id in [(1, 1), (3, 127), (5, 128), (2**62 + 1, 255), (9, 256),
                                (11, 2**16), (13, 2**32), (15, 2**63 - 1)]:
        message = _run_graph(step_id, request_id)
        _same(wire.decode(_frame(message), LIMITS), message)


@pytest.mark.parametrize("change", [
    {"handle": "sess/1/abce"},  # another graph, same length
    {"fetches": ("mul:1",)},    # another signature, same length
    {"timeout_ms": 5},
    {"trace": True},
])
def test_a_header_that_differs_outside_the_ids_is_parsed_not_templated(change):
    first = _run_graph(2**40 + 1, 1000)
    _same(wire.decode(_frame(first), LIMITS), first)
    other = _run_graph(2**40 + 3, 1001, **change)
    _same(wire.decode(_frame(other), LIMITS), other)
    again = _run_graph(2**40 + 5, 1002, **change)
    _same(wire.decode(_frame(again), LIMITS), again)


def test_feeds_of_another_shape_or_dtype_are_not_taken_from_the_template():
    first = _run_graph(2**40 + 1, 1000)
    _same(wire.decode(_frame(first), LIMITS), first)
    for value in (np.zeros(3, np.float32), np.asarray(2.0, np.float64), np.ones((1, 1))):
        message = RunGraph("sess/1/abcd", 2**40 + 7, [TensorEntry("_feed_0:0", value)],
                           ["mul:0"], request_id=1001)
        _same(wire.decode(_frame(message), LIMITS), message)


def test_a_decoded_message_owns_its_lists():
    first = _run_graph(2**40 + 1, 1000, fetches=("a:0", "b:0"))
    wire.decode(_frame(first), LIMITS).fetch_keys.append("mine")
    second = wire.decode(_frame(_run_graph(2**40 + 3, 1001, fetches=("a:0", "b:0"))), LIMITS)
    second.fetch_keys.append("mine too")
    third = wire.decode(_frame(_run_graph(2**40 + 5, 1002, fetches=("a:0", "b:0"))), LIMITS)
    assert third.fetch_keys == ["a:0", "b:0"]


def test_an_id_pattern_inside_a_string_is_never_taken_for_the_id():
    step_id = int.from_bytes(b"\x80AAAAAAA", "big")  # its encoding can sit in UTF-8 text
    decoy = b"\xc2" + msgpack.packb("step_id") + msgpack.packb(step_id)
    message = _run_graph(step_id, 1000, handle="h" + decoy.decode("utf-8"))
    assert _frame(message).count(msgpack.packb("step_id") + msgpack.packb(step_id)) == 2
    _same(wire.decode(_frame(message), LIMITS), message)
    assert _templates() == 0  # the pattern occurs twice: not provable, not kept
    later = _run_graph(step_id + 2, 1001, handle="h" + decoy.decode("utf-8"))
    _same(wire.decode(_frame(later), LIMITS), later)


def test_a_header_whose_fixint_id_is_replaced_by_another_type_is_parsed():
    first = _run_graph(2**40 + 1, 5)
    frame = b"".join(bytes(b) for b in wire.encode(first, LIMITS, checksums=False))
    _same(wire.decode(frame, LIMITS), first)
    assert _templates() == 1
    key = msgpack.packb("request_id")
    at = frame.index(key + msgpack.packb(5)) + len(key)
    damaged = frame[:at] + b"\xc0" + frame[at + 1:]  # a nil: same length, another structure
    with pytest.raises(wire.RemoteProtocolError, match="request_id"):
        wire.decode(damaged, LIMITS)


_PS, _W = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
_GRADIENTS = {"w1": (64, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}


def _push(step_id, shapes=_GRADIENTS, dtype=np.float32, tensor="grad"):
    return PushTensors(step_id, [
        TensorEntry(f"{_W};7f3a;{_PS};edge_{i}_{tensor}_{name};0:0",
                    np.full(shape, step_id % 7, dtype)) for i, (name, shape) in
        enumerate(shapes.items())])


def _same_push(decoded, sent):
    assert type(decoded) is PushTensors and decoded.step_id == sent.step_id
    assert [e.key for e in decoded.tensors] == [e.key for e in sent.tensors]
    for got, want in zip(decoded.tensors, sent.tensors):
        assert got.value.dtype == want.value.dtype and np.array_equal(got.value, want.value)
        assert not got.is_dead and got.error is None


def test_a_steps_pushes_and_pulls_decode_from_a_template_with_their_own_step_ids():
    # A parameter-server step's PushTensors (its four gradients) and a RecvTensors differ from
    # step to step only in the step id: after the first, each is decoded from its template.
    for step_id in [(7 << 40) + 2 * i + 1 for i in range(50)] + [3, 300, 70000, 2**63 - 1]:
        pushed = _push(step_id)
        _same_push(wire.decode(_frame(pushed), LIMITS), pushed)
        keys = [e.key for e in pushed.tensors]
        pulled = wire.decode(_frame(RecvTensors(step_id, keys)), LIMITS)
        assert type(pulled) is RecvTensors and (pulled.step_id, pulled.keys) == (step_id, keys)
    assert 2 <= _templates() <= 10  # one per kind and id width
    templated = [t for kept in header_templates._templates.values() for t in kept]
    assert {t.schema.kind for t in templated} == {"push_tensors", "recv_tensors"}


@pytest.mark.parametrize("change", [
    {"tensor": "genu"},                      # other keys of the same length
    {"shapes": {**_GRADIENTS, "b2": (5, 2)}},  # a tensor of another shape, as many bytes
    {"dtype": np.int32},                     # another dtype, as many bytes
])
def test_a_push_that_differs_outside_its_step_id_is_parsed_not_templated(change):
    first = _push(2**40 + 1)
    _same_push(wire.decode(_frame(first), LIMITS), first)
    for step_id in (2**40 + 3, 2**40 + 5):
        other = _push(step_id, **change)
        _same_push(wire.decode(_frame(other), LIMITS), other)
