"""A worker drops the codec's templates of a graph's frames when the graph is deregistered
(``transports.repeat_frames.forget_graph``): kept, a closed session's would be tried before
every later session's frames of their length, in each of them, until the templates filled and
all were cleared (bench/RESULTS.md, c48dup)."""
import asyncflow as af
from transports import frame_templates, header_templates


def _handles():
    """The graph handles of the header and frame templates kept now."""
    frames = {frame.fields.get("graph_handle")
              for kept in frame_templates._by_size.values() for frame in kept}
    headers = {template.payload.get("graph_handle")
               for kept in header_templates._templates.values() for template in kept}
    return (frames | headers) - {None}


async def test_a_closed_session_leaves_no_template_of_its_graphs_frames(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        p = af.placeholder(af.float32, [])
        with af.device("/job:worker/task:0"):
            doubled = p * 2.0
    async with af.Session(graph=graph, cluster=spec) as open_one:
        for value in (1.0, 2.0, 3.0):
            assert await open_one.run(doubled, {p: value}) == 2 * value
        live = _handles()
        assert live
        async with af.Session(graph=graph, cluster=spec) as closing:
            for value in (1.0, 2.0, 3.0):
                assert await closing.run(doubled, {p: value}) == 2 * value
            closed = _handles() - live
            assert closed  # (its RunGraphs' templates were learnt)
        assert not closed & _handles() and live <= _handles()
        for value in (4.0, 5.0):  # (the open session's still read by its templates)
            assert await open_one.run(doubled, {p: value}) == 2 * value
        assert _handles() == live
