"""Timeline: Chrome trace JSON checked as data (fields, lanes, flow arrows)."""
import json

import numpy as np

import asyncflow as af
from asyncflow.exec.options import NodeStats


def _check_trace(trace):
    events = trace["traceEvents"]
    for event in events:
        assert {"ph", "pid", "name"} <= set(event)
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0 and "tid" in event
    lanes = {}
    for event in (e for e in events if e["ph"] == "X"):
        lanes.setdefault((event["pid"], event["tid"]), []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in lanes.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    return events


def test_lanes_and_flows_from_records():
    dev0, dev1 = "/device:CPU:0", "/device:CPU:1"
    stats = [NodeStats("a", "Const", dev0, 100, 110),
             NodeStats("edge_0_a_0/_Send", "_Send", dev0, 110, 112),
             NodeStats("slow", "MatMul", dev0, 105, 200),   # overlaps: another lane
             NodeStats("edge_0_a_0/_Recv", "_Recv", dev1, 101, 113),
             NodeStats("b", "Identity", dev1, 113, 114)]
    events = _check_trace(af.timeline.chrome_trace(stats))
    names = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {dev0: 0, dev1: 1}
    tids = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert tids["slow"] != tids["a"]
    flows = [e for e in events if e.get("cat") == "DataFlow"]
    assert [e["ph"] for e in flows] == ["s", "f"]
    start, finish = flows
    assert start["id"] == finish["id"] and finish["bp"] == "e"
    assert (start["pid"], finish["pid"]) == (0, 1)
    recv = next(e for e in events if e["name"] == "edge_0_a_0/_Recv")
    assert recv["ts"] <= finish["ts"] <= recv["ts"] + recv["dur"]


async def test_full_trace_of_a_partitioned_run(tmp_path):
    with af.Graph().as_default() as graph:
        with af.device("/device:CPU:0"):
            x = af.placeholder(af.float32, [4], name="x")
            y = af.square(x)
        with af.device("/device:CPU:1"):
            z = af.reduce_sum(y, name="z")
    metadata = af.RunMetadata()
    async with af.Session(graph=graph, config=af.SessionConfig(device_count={"CPU": 2})) as sess:
        await sess.run(z, {x: np.ones(4)}, options=af.RunOptions(trace_level=af.RunOptions.FULL_TRACE),
                       run_metadata=metadata)
    kinds = {s.op_type for s in metadata.step_stats}
    assert {"_Send", "_Recv", "Sum"} <= kinds
    assert all(s.device.startswith("/job:localhost/replica:0/task:0/device:CPU:") for s in metadata.step_stats)
    path = tmp_path / "trace.json"
    af.timeline.write(metadata, str(path))
    events = _check_trace(json.loads(path.read_text()))
    sends = [e for e in events if e["ph"] == "X" and e["name"].endswith("/_Send")]
    flow_starts = [e for e in events if e["ph"] == "s"]
    assert len(sends) == len(flow_starts) == 1
