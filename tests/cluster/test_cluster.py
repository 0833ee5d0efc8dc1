"""ClusterSpec, ASYNCFLOW_CONFIG and replica_device_setter: plain data, no servers."""
import json

import numpy as np
import pytest

import asyncflow as af
from asyncflow.cluster.spec import task_name
from asyncflow.distribute.cluster_resolver import TFConfigClusterResolver

SPEC = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


def test_cluster_spec_accessors():
    cluster = af.ClusterSpec(SPEC)
    assert cluster.as_dict() == SPEC
    assert cluster.jobs == ["ps", "worker"]
    assert cluster.num_tasks("worker") == 2
    assert cluster.job_tasks("worker") == SPEC["worker"]
    assert cluster.task_address("worker", 1) == "127.0.0.1:2224"
    assert cluster.tasks()[0] == ("ps", 0, "127.0.0.1:2222")
    assert af.ClusterSpec(cluster) == cluster
    assert task_name("worker", 1) == "/job:worker/replica:0/task:1"


def test_cluster_spec_sparse_jobs():
    cluster = af.ClusterSpec({"worker": {1: "h:1", "3": "h:3"}})
    assert cluster.task_indices("worker") == [1, 3]
    assert cluster.as_dict() == {"worker": {1: "h:1", 3: "h:3"}}


@pytest.mark.parametrize("bad, message", [
    ({"worker": ["nohost"]}, "host:port"),
    ({"worker": "h:1"}, "list or a dict"),
    ({"a/b": ["h:1"]}, "invalid job name"),
    ({"worker": {"x": "h:1"}}, "not an integer"),
])
def test_cluster_spec_rejects_malformed(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        af.ClusterSpec(bad)


def test_cluster_spec_unknown_job_and_task():
    cluster = af.ClusterSpec(SPEC)
    with pytest.raises(ValueError, match="No such job"):
        cluster.job_tasks("chief")
    with pytest.raises(ValueError, match="No task with index 5"):
        cluster.task_address("worker", 5)


def test_cluster_spec_from_json_string_file_and_tf_config(tmp_path):
    assert af.ClusterSpec.from_json(json.dumps(SPEC)).as_dict() == SPEC
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"cluster": SPEC}))
    assert af.ClusterSpec.from_json(str(path)).as_dict() == SPEC
    with pytest.raises(ValueError, match="neither JSON nor a readable file"):
        af.ClusterSpec.from_json(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="not valid JSON"):
        af.ClusterSpec.from_json("{oops")


def test_asyncflow_config_is_read_by_the_tf_config_resolver():
    """``ASYNCFLOW_CONFIG`` has TF_CONFIG's shape; the CLI reads it with that resolver."""
    env = {"ASYNCFLOW_CONFIG": json.dumps({"cluster": SPEC, "task": {"type": "worker",
                                                                      "index": 1}})}
    resolver = TFConfigClusterResolver(variable="ASYNCFLOW_CONFIG", environ=env)
    assert (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id) == (
        SPEC, "worker", 1)
    with pytest.raises(ValueError, match="ASYNCFLOW_CONFIG.*task"):
        TFConfigClusterResolver(variable="ASYNCFLOW_CONFIG",
                                environ={"ASYNCFLOW_CONFIG": json.dumps({"task": 3})}).task_type
    with pytest.raises(ValueError, match="ASYNCFLOW_CONFIG is not valid JSON"):
        TFConfigClusterResolver(variable="ASYNCFLOW_CONFIG",
                                environ={"ASYNCFLOW_CONFIG": "{oops"}).cluster_spec()


def test_replica_device_setter_round_robins_variables():
    cluster = af.ClusterSpec({"ps": ["h:1", "h:2"], "worker": ["h:3"]})
    with af.Graph().as_default():
        with af.device(af.train.replica_device_setter(cluster=cluster,
                                                      worker_device="/job:worker/task:0")):
            v0 = af.Variable(np.zeros(2, np.float32), name="v0")
            v1 = af.Variable(np.zeros(2, np.float32), name="v1")
            v2 = af.Variable(np.zeros(2, np.float32), name="v2")
            y = v0 + v1
            with af.device("/job:worker/task:0/device:CPU:0"):
                z = y * 2.0
    assert [v.device for v in (v0, v1, v2)] == ["/job:ps/task:0", "/job:ps/task:1",
                                                "/job:ps/task:0"]
    assert y.device == "/job:worker/task:0"
    assert z.device == "/job:worker/task:0/device:CPU:0"


def test_replica_device_setter_without_ps_is_none():
    assert af.train.replica_device_setter(cluster={"worker": ["h:1"]}) is None
    assert af.train.replica_device_setter(ps_tasks=0) is None
