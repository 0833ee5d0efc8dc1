"""Validated frame headers that differ from step to step only in a few ids.

The decoder keeps a header it validated under its exact bytes (``schema.VALIDATED_HEADERS``), so
a repeated reply is not parsed again. A RunGraph's header never repeats: its ``step_id`` and
``request_id`` change every step, and it was parsed and checked every time (about a third of a
trivial step's request decoding); so do a PushTensors' and a RecvTensors' (their ``step_id``;
their keys and descriptors repeat from step to step). Here such a header is kept as a
*template*: its bytes with the values of those ints masked, the ints' places, and what the
parse produced. A later header of the same length whose bytes equal the template's outside
those places, with the same msgpack int type byte before each, is the same header with other
ids: its payload is the template's with the new ids (each checked by its field as a parse
would), and no msgpack is parsed.

A template is kept only when it is proven: each id's encoding (its map key then the int, as
msgpack writes it) occurs exactly once in the header, and a header with every id changed in
place unpacks to the same map but those ids. So a template never reads an id from anywhere but
the field's own int, whatever a peer sends. Payloads holding maps, or lists of anything but
plain values, are not kept (lists are copied for every message). Nothing here knows about
asyncflow.
"""

from __future__ import annotations

from typing import Any, Callable, Final

import msgpack

__all__ = ["VOLATILE", "drop_from", "forget_all", "forget_where", "lookup", "match", "remember"]

# kind -> the payload's int fields that change from one message to the next: a RunGraph's, and
# the step id of the transfers between workers (a PushTensors' header, four descriptors on a
# parameter-server step, is on the step's critical path twice: 43 -> 26 us a decode)
VOLATILE: Final = {"run_graph": ("step_id", "request_id"), "push_tensors": ("step_id",),
                   "recv_tensors": ("step_id",)}
_KEPT: Final = 64  # templates; all dropped when full (a few per registered graph in practice)
_INT_MARKERS: Final = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}  # msgpack's unsigned ints
_PLAIN: Final = (str, int, float, bool, bytes, type(None))
_NOT_A_VALUE: Final = object()

_templates: dict = {}  # (limits, header length) -> list of _Template
_count = 0


class _Template:
    __slots__ = ("masked", "spans", "schema", "payload", "plans")

    def __init__(self, masked: bytes, spans: tuple, schema: Any, payload: dict,
                 plans: list) -> None:
        self.masked = masked
        self.spans = spans  # (field, start, width, fixint): where the int's value bytes are
        self.schema = schema
        self.payload = payload
        self.plans = plans


def lookup(limits: Any, header: bytes) -> tuple | None:
    """``(schema, payload, plans)`` for ``header`` from a template, else None."""
    found = match(limits, header)
    return None if found is None else found[1:]


def match(limits: Any, header: bytes) -> tuple | None:
    """``(spans, schema, payload, plans)`` for ``header`` from a template, else None; ``spans``:
    per volatile id, ``(field, start, width, fixint)``, where the header holds its value."""
    candidates = _templates.get((limits, len(header)))
    if not candidates:
        return None
    for template in candidates:
        masked = bytearray(header)
        for _, start, width, fixint in template.spans:
            if fixint and masked[start] >= 0x80:
                break  # not a positive fixint where the template has one
            masked[start:start + width] = bytes(width)
        else:
            if masked != template.masked:
                continue
            payload = {name: list(value) if type(value) is list else value
                       for name, value in template.payload.items()}
            for field, start, width, _ in template.spans:
                payload[field.name] = field.from_wire(
                    int.from_bytes(header[start:start + width], "big"))
            return template.spans, template.schema, payload, template.plans
    return None


def remember(limits: Any, header: bytes, parsed: tuple,
             unpack: Callable[[bytes], dict]) -> None:
    """Keep a template of ``header`` (validated, parsed into ``parsed``) when its kind has
    volatile ids and the template can be proven (see the module docstring); ``unpack`` is the
    decoder's msgpack reading of a header."""
    global _count
    schema, payload, plans = parsed
    names = VOLATILE.get(schema.kind)
    if not names or not all(type(v) in _PLAIN or type(v) is list and all(
            type(item) in _PLAIN for item in v) for v in payload.values()):
        return
    fields = {f.name: f for f in schema.plain}
    spans, changed = [], bytearray(header)
    for name in names:
        value = payload.get(name)
        if type(value) is not int or value < 0 or name not in fields:
            return
        key, encoded = msgpack.packb(name), msgpack.packb(value)
        at = header.find(key + encoded)
        if at < 0 or header.find(key + encoded, at + 1) >= 0:
            return
        start, width = at + len(key), 1
        if len(encoded) > 1:
            if _INT_MARKERS.get(encoded[0]) != len(encoded) - 1:
                return
            start, width = start + 1, len(encoded) - 1
        spans.append((fields[name], start, width, len(encoded) == 1))
        changed[start + width - 1] ^= 1  # still a positive fixint when width is 1
    try:  # the proof: those bytes are the ids and nothing else
        moved = unpack(bytes(changed))["payload"]
        plain = unpack(header)["payload"]
    except Exception:  # noqa: BLE001 -- unprovable: simply not kept
        return
    for field, start, width, _ in spans:
        expected = int.from_bytes(changed[start:start + width], "big")
        if moved.get(field.name) != expected or plain.get(field.name) != payload[field.name]:
            return
        moved[field.name] = plain[field.name]
    if moved != plain:
        return
    masked = bytearray(header)
    for _, start, width, _ in spans:
        masked[start:start + width] = bytes(width)
    if _count >= _KEPT:
        _templates.clear()
        _count = 0
    kept = {name: list(value) if type(value) is list else value
            for name, value in payload.items()}  # (the parsed message has its own lists)
    _templates.setdefault((limits, len(header)), []).append(
        _Template(bytes(masked), tuple(spans), schema, kept, plans))
    _count += 1


def forget_where(name: str, value: Any) -> None:
    """Drop every template whose payload's field ``name`` is ``value`` (a deregistered
    graph's: ``graph_handle``; its headers would be tried first by every later header of
    their length). One that another thread's trio run keeps meanwhile may go with them."""
    global _count
    _count = max(_count - drop_from(_templates, lambda t: t.payload, name, value), 0)


def drop_from(table: dict, fields: Callable[[Any], dict], name: str, value: Any) -> int:
    """Drop from ``table`` (key -> list of templates) every template whose ``fields(template)``
    holds ``value`` under ``name``; returns how many went. A list is replaced, never edited (a
    decode already reading it finishes on it); one left empty goes with its key."""
    dropped = 0
    for key, kept in list(table.items()):
        left = [t for t in kept if fields(t).get(name, _NOT_A_VALUE) != value]
        if len(left) != len(kept):
            dropped += len(kept) - len(left)
            if left:
                table[key] = left
            else:
                table.pop(key, None)
    return dropped


def forget_all() -> None:
    """Drop every header template, as when they fill (the next header of each signature is
    parsed in full and its ids proved again)."""
    global _count
    _templates.clear()
    _count = 0
