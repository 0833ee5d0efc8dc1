"""RunGraph, PushTensors and RecvTensors headers decoded from a template
(``transports/header_templates.py``) decode exactly as a full parse does, whatever changes
between frames."""
import msgpack
import numpy as np
import pytest

from transports import header_templates, wire
from transports.messages import PushTensors, RecvTensors, RunGraph, TensorEntry

LIMITS = wire.DEFAULT_LIMITS


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


# -- review: one-byte changes and the int widths of push/pull step ids -----------------------

_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xC0, 0xC2, 0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD3, 0xFF)


def _header(message):
    frame = b"".join(bytes(b) for b in wire.encode(message, LIMITS, checksums=False))
    size = wire.PREFIX.size
    _, header_len = wire.PREFIX.unpack_from(frame)
    return frame[size:size + header_len]


def _full_parse(header):
    try:
        return wire.Decoder(LIMITS)._parse_header(memoryview(header))
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        return type(exc)


@pytest.mark.parametrize("kind", ["push", "pull", "run_graph"])
@pytest.mark.parametrize("step_id", [5, 200, 40000, 2**31 + 1, (7 << 40) + 1])
def test_every_one_byte_change_of_a_templated_header_decodes_as_a_full_parse(kind, step_id):
    # A template is kept from one header; then each byte of a header of the next step, changed
    # to each of a few values (int type markers, nil, fixint edges) in turn, is looked up: what
    # a template answers is exactly what the full parse of those bytes answers, never another
    # message (and where the full parse refuses, no template answers).
    def message(sid):
        if kind == "push":
            return _push(sid, shapes={"w": (4, 3), "b": (3,)})
        if kind == "pull":
            return RecvTensors(sid, [f"{_PS};7f3a;{_W};edge_{i}_w;0:0" for i in range(3)])
        return _run_graph(sid, sid % 1000 + 1)
    first = _header(message(step_id))
    wire.decode(b"".join(bytes(b) for b in wire.encode(message(step_id), LIMITS,
                                                         checksums=False)), LIMITS)
    assert _templates() == 1
    header = _header(message(step_id + 2))
    assert len(header) == len(first)
    answered = 0
    for at in range(len(header)):
        for byte in {*_BYTES, header[at] ^ 1} - {header[at]}:
            changed = header[:at] + bytes([byte]) + header[at + 1:]
            templated = header_templates.lookup(LIMITS, changed)
            if templated is None:
                continue
            answered += 1
            parsed = _full_parse(changed)
            assert type(parsed) is tuple, (at, byte, parsed)
            assert templated[0] is parsed[0] and templated[1] == parsed[1] and \
                templated[2] == parsed[2], (at, byte)
    assert answered  # (the changed ids' own bytes: other steps, decoded from the template)


@pytest.mark.parametrize("kind", ["push", "pull"])
def test_step_ids_at_the_int_widths_edges_decode_right_after_templates_of_every_width(kind):
    edges = [1, 127, 128, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63 - 1]
    for round_ in range(2):  # the second round finds a template of every width
        for step_id in edges:
            if kind == "push":
                sent = _push(step_id)
                _same_push(wire.decode(_frame(sent), LIMITS), sent)
            else:
                keys = [f"{_PS};7f3a;{_W};edge_0_w;0:0"]
                got = wire.decode(_frame(RecvTensors(step_id, keys)), LIMITS)
                assert (got.step_id, got.keys) == (step_id, keys)
    assert _templates() >= 4
    for step_id in (2**63, 2**64 - 1):  # a uint64 beyond int64 in a template's place: what
        # the full parse gives (the step id as sent; a worker refuses it, test_push_acceptance)
        frame = _frame(_push(step_id) if kind == "push" else
                       RecvTensors(step_id, [f"{_PS};7f3a;{_W};edge_0_w;0:0"]))
        assert wire.decode(frame, LIMITS).step_id == step_id


def test_forget_kept_empties_every_cache_and_the_next_frames_teach_them_again():
    # ``repeat_frames.forget_kept`` (each test starts so: tests/conftest.py): the validated headers,
    # the header and frame templates and the encoding templates emptied, the header
    # templates' count from zero again (not from where the dropped ones left it), and the
    # next frames decode by the full parse first, then by their templates again.
    from transports import frame_templates, repeat_frames, schema

    def decoded(message):
        frame = _frame(message)
        fast = wire.decode_repeated(memoryview(frame), LIMITS)
        _same(fast or wire.decode(frame, LIMITS), message)
        return fast is not None

    def kept():
        return (len(schema.VALIDATED_HEADERS), header_templates._count,
                frame_templates.statistics()["kept"], len(repeat_frames._templates_by_key))

    assert [decoded(_run_graph(i, i)) for i in range(1, 4)] == [False, True, True]
    assert all(kept())
    repeat_frames.forget_kept()
    assert kept() == (0, 0, 0, 0) and not header_templates._templates
    assert [decoded(_run_graph(i, i)) for i in range(4, 7)] == [False, True, True]
