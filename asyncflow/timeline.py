"""Chrome trace event JSON from a traced run (``af.timeline.write``), for Perfetto.

Theory of operation:
- Input: ``run_metadata.step_stats``, one record per executed node with ``node_name``,
  ``op_type``, ``device`` (full name), ``start_us`` and ``end_us``.
- Each device is a process (``pid``), named by an ``M``/``process_name`` event. Ops are ``X``
  (complete) events. Ops that overlap in time on one device (async kernels, offloaded ones)
  are packed greedily into lanes (``tid``) so no two events of a lane overlap; each lane is
  named with an ``M``/``thread_name`` event.
- A Send and its Recv share their edge name (``edge_<n>_<producer>_<slot>/_Send`` and
  ``.../_Recv``); each such pair gets a flow arrow: an ``s`` event inside the Send and an
  ``f`` event (``bp: "e"``: bind to the enclosing slice) inside the Recv, category
  ``DataFlow``, sharing an ``id``.
- Times are microseconds relative to the earliest start, as Chrome's format expects.
"""
from __future__ import annotations

import json

_SEND_SUFFIX = "/_Send"
_RECV_SUFFIX = "/_Recv"


def _field(record, name):
    return record[name] if isinstance(record, dict) else getattr(record, name)


def _lanes(events):
    """Assign each (start, end) a lane so lanes never overlap; returns lane per event."""
    lane_end = []
    lanes = []
    for start, end in events:
        for lane, last in enumerate(lane_end):
            if last <= start:
                lane_end[lane] = end
                lanes.append(lane)
                break
        else:
            lane_end.append(end)
            lanes.append(len(lane_end) - 1)
    return lanes


def chrome_trace(step_stats):
    """The trace as a dict ``{"traceEvents": [...]}``.

    Args:
        step_stats: records (objects or dicts) with node_name, op_type, device, start_us,
            end_us.
    """
    records = [{"name": _field(r, "node_name"), "op": _field(r, "op_type"),
                "device": _field(r, "device"), "start": int(_field(r, "start_us")),
                "end": max(int(_field(r, "end_us")), int(_field(r, "start_us")))}
               for r in step_stats]
    origin = min((r["start"] for r in records), default=0)
    devices = list(dict.fromkeys(r["device"] for r in records))
    events = []
    placed = {}
    for pid, device in enumerate(devices):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": device}})
        mine = sorted((r for r in records if r["device"] == device),
                      key=lambda r: (r["start"], r["end"], r["name"]))
        lanes = _lanes([(r["start"], r["end"]) for r in mine])
        for lane in sorted(set(lanes)):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane,
                           "args": {"name": f"lane {lane}"}})
        for record, lane in zip(mine, lanes):
            event = {"ph": "X", "cat": "Op", "name": record["name"], "pid": pid, "tid": lane,
                     "ts": record["start"] - origin, "dur": record["end"] - record["start"],
                     "args": {"name": record["name"], "op": record["op"]}}
            events.append(event)
            placed[record["name"], device] = event
    events += _flows(placed)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _flows(placed):
    sends = {name[:-len(_SEND_SUFFIX)]: event for (name, _), event in placed.items()
             if name.endswith(_SEND_SUFFIX)}
    flows = []
    for flow_id, ((name, _), recv) in enumerate(sorted(placed.items())):
        if not name.endswith(_RECV_SUFFIX):
            continue
        send = sends.get(name[:-len(_RECV_SUFFIX)])
        if send is None:
            continue
        recv_end = recv["ts"] + recv["dur"]
        arrival = min(max(recv["ts"], send["ts"]), recv_end)
        common = {"cat": "DataFlow", "name": name[:-len(_RECV_SUFFIX)], "id": flow_id}
        flows.append(dict(common, ph="s", pid=send["pid"], tid=send["tid"], ts=send["ts"]))
        flows.append(dict(common, ph="f", bp="e", pid=recv["pid"], tid=recv["tid"], ts=arrival))
    return flows


def write(run_metadata, path):
    """Write ``run_metadata.step_stats`` to ``path`` as Chrome trace JSON (open in Perfetto).

    Args:
        run_metadata: an ``af.RunMetadata`` filled by a run with ``FULL_TRACE``.
        path: the file to write.

    Returns:
        The trace dict that was written.
    """
    trace = chrome_trace(run_metadata.step_stats)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(trace, handle)
    return trace
