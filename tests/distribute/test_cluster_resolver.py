"""Cluster resolvers: TF's results for the same environments, re-read on every call.

The expected values are TF's (its resolvers' source and tests). Where an interpreter with
TensorFlow exists (``ASYNCFLOW_TF_PYTHON``, or a ``tfenv`` virtualenv beside the checkout), the
same cases also run through TF's own resolvers in that interpreter (a subprocess: TensorFlow is
never imported here) and the two must agree case by case.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import asyncflow as af
from asyncflow.distribute.cluster_resolver import (
    KubernetesClusterResolver, SlurmClusterResolver, TFConfigClusterResolver, bind_host_for,
    expand_hostlist, expand_tasks_per_node,
)

SLURM_KEYS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
              "SLURM_STEP_TASKS_PER_NODE", "CUDA_VISIBLE_DEVICES", "SLURM_LOCALID",
              "SLURMD_NODENAME", "SLURM_DISTRIBUTION")

# -- the cases: (name, environment, constructor kwargs) ---------------------------------------
TF_CONFIG_CASES = [
    ("dense_worker", {"cluster": {"chief": ["c0:2222"], "ps": ["p0:2222", "p1:2222"],
                                  "worker": ["w0:2222", "w1:2222", "w2:2222"]},
                      "task": {"type": "worker", "index": 1}}, {}),
    ("chief", {"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222"]},
               "task": {"type": "chief", "index": 0}}, {}),
    ("legacy_master", {"cluster": {"master": ["m0:2222"], "ps": ["p0:2222"]},
                       "task": {"type": "master", "index": 0}, "environment": "cloud"}, {}),
    ("evaluator_not_member", {"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222"]},
                              "task": {"type": "evaluator", "index": 0}}, {}),
    ("sparse_job", {"cluster": {"ps": ["p0:2222"], "worker": {"1": "w1:2222", "3": "w3:2222"}},
                    "task": {"type": "worker", "index": 3}}, {}),
    ("no_cluster_no_task", {}, {}),
    ("task_without_cluster", {"task": {"type": "worker", "index": 2}}, {}),
    ("rpc_layer", {"cluster": {"ps": ["p0:1"], "worker": ["w0:1"]}, "rpc_layer": "grpc",
                   "task": {"type": "ps", "index": 0}}, {}),
    ("session_master", {"cluster": {"ps": ["p0:1"], "worker": ["w0:1"]},
                        "session_master": "sm:9", "task": {"type": "ps", "index": 0}}, {}),
    ("single_task", {"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": 0}},
     {}),
    ("overrides", {"cluster": {"ps": ["p0:1", "p1:1"], "worker": ["w0:1"]},
                   "task": {"type": "worker", "index": 0}},
     {"task_type": "ps", "task_id": 1, "rpc_layer": "http"}),
    ("kubeflow_sparse_cluster_is_ignored",
     {"sparseCluster": {"ps": ["p0:1"], "worker": {"1": "w1:1"}},
      "task": {"type": "worker", "index": 1}}, {}),
    ("ray_train_worker_only", {"cluster": {"worker": ["10.0.0.1:4001", "10.0.0.2:4002"]},
                               "task": {"type": "worker", "index": 1}}, {}),
]

SLURM_CASES = [
    ("tf_simple_from_env", {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "3",
                            "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
                            "SLURM_STEP_NODELIST": "t02n13,t02n41,t02n43",
                            "CUDA_VISIBLE_DEVICES": "0"}, {}),
    ("tf_ps_worker_tasks_per_node_int", {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "3",
                                         "SLURM_STEP_NODELIST": "t02n13,t02n41,t02n43"},
     {"jobs": {"ps": 1, "worker": 2}, "tasks_per_node": 1, "gpus_per_node": 1,
      "gpus_per_task": 1, "auto_set_gpu": False}),
    ("tf_multi_task_per_node", {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "5",
                                "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
                                "SLURM_STEP_NODELIST": "t02n13,t02n41,t02n43",
                                "CUDA_VISIBLE_DEVICES": ""},
     {"jobs": {"ps": 1, "worker": 4}, "gpus_per_node": 2, "gpus_per_task": 1}),
    ("tf_multi_gpu_per_task", {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "5",
                               "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
                               "SLURM_STEP_NODELIST": "t02n13,t02n41,t02n43",
                               "CUDA_VISIBLE_DEVICES": ""},
     {"jobs": {"ps": 1, "worker": 4}, "gpus_per_node": 4, "gpus_per_task": 2}),
    ("hosts_sorted_jobs_sorted", {"SLURM_PROCID": "4", "SLURM_STEP_NUM_TASKS": "6",
                                  "SLURM_STEP_TASKS_PER_NODE": "3,2,1",
                                  "SLURM_STEP_NODELIST": "zeta,alpha[01-02]"},
     {"jobs": {"worker": 4, "chief": 1, "ps": 1}, "port_base": 23000, "gpus_per_node": 3,
      "gpus_per_task": 1, "auto_set_gpu": False}),
    ("tasks_per_node_dict", {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3",
                             "SLURM_STEP_NODELIST": "ignored"},
     {"tasks_per_node": {"b": 1, "a": 2}, "gpus_per_node": 2, "gpus_per_task": 1,
      "auto_set_gpu": False}),
    ("jobs_do_not_add_up", {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "3",
                            "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_STEP_NODELIST": "n1"},
     {"jobs": {"ps": 1, "worker": 1}, "gpus_per_node": 3, "gpus_per_task": 1}),
    ("too_many_gpus", {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2",
                       "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "n1"},
     {"gpus_per_node": 2, "gpus_per_task": 2}),
    ("not_in_a_step", {}, {"gpus_per_node": 1}),
]


# -- the same cases through TF, in its own interpreter ------------------------------------------
_TF_SCRIPT = r"""
import json, os, sys
from tensorflow.python.distribute.cluster_resolver import tfconfig_cluster_resolver as tfconfig
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm
TFConfigClusterResolver = tfconfig.TFConfigClusterResolver
SlurmClusterResolver = slurm.SlurmClusterResolver
cases = json.load(sys.stdin)
keys = cases["slurm_keys"]
out = {}

def describe(resolver, spec):
    # call master() only where it is defined: its errors are part of the result
    try:
        master = resolver.master()
    except Exception as exc:
        master = "error:" + type(exc).__name__
    return {"cluster": {job: {str(i): a for i, a in
                             ((i, spec.task_address(job, i)) for i in spec.task_indices(job))}
                        for job in spec.jobs},
            "task_type": resolver.task_type, "task_id": resolver.task_id, "master": master,
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}

for name, config, kwargs in cases["tf_config"]:
    os.environ["TF_CONFIG"] = json.dumps(config)
    resolver = TFConfigClusterResolver(**kwargs)
    out["tf_config/" + name] = describe(resolver, resolver.cluster_spec())
for name, env, kwargs in cases["slurm"]:
    for key in keys:
        os.environ.pop(key, None)
    os.environ.update(env)
    try:
        resolver = SlurmClusterResolver(**kwargs)
        out["slurm/" + name] = describe(resolver, resolver.cluster_spec())
    except Exception as exc:
        out["slurm/" + name] = {"error": type(exc).__name__}
print(json.dumps(out))
"""


def _describe(resolver, spec):
    try:
        master = resolver.master()
    except Exception as exc:  # noqa: BLE001 - the error type is part of the result
        master = "error:" + type(exc).__name__
    return {"cluster": {job: {str(i): spec.task_address(job, i) for i in spec.task_indices(job)}
                        for job in spec.jobs},
            "task_type": resolver.task_type, "task_id": resolver.task_id, "master": master,
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _ours(monkeypatch):
    out = {}
    for name, config, kwargs in TF_CONFIG_CASES:
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
        resolver = TFConfigClusterResolver(**kwargs)
        out["tf_config/" + name] = _describe(resolver, resolver.cluster_spec())
    for name, env, kwargs in SLURM_CASES:
        for key in SLURM_KEYS:
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        try:
            resolver = SlurmClusterResolver(**kwargs)
            out["slurm/" + name] = _describe(resolver, resolver.cluster_spec())
        except (RuntimeError, ValueError) as exc:
            out["slurm/" + name] = {"error": type(exc).__name__}
    return out


def _tf_python():
    """An interpreter with TensorFlow (``ASYNCFLOW_TF_PYTHON``, or a ``tfenv`` venv next to the
    project's parent directory), or None."""
    candidates = [os.environ.get("ASYNCFLOW_TF_PYTHON")]
    root = pathlib.Path(__file__).resolve().parents[2]
    candidates.append(str(root.parent / "tfenv" / "bin" / "python"))
    for python in candidates:
        if python and os.access(python, os.X_OK):
            probe = subprocess.run([python, "-c", "import tensorflow"], capture_output=True,
                                   timeout=300)
            if probe.returncode == 0:
                return python
    return None


def test_resolvers_agree_with_tensorflow(monkeypatch):
    python = _tf_python()
    if python is None:
        pytest.skip("no interpreter with TensorFlow (set ASYNCFLOW_TF_PYTHON)")
    payload = json.dumps({"tf_config": TF_CONFIG_CASES, "slurm": SLURM_CASES,
                          "slurm_keys": SLURM_KEYS})
    env = {k: v for k, v in os.environ.items() if k not in SLURM_KEYS and k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([python, "-c", _TF_SCRIPT], input=payload, capture_output=True,
                            text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ours = _ours(monkeypatch)
    assert sorted(ours) == sorted(theirs)
    for name in sorted(theirs):
        assert ours[name] == theirs[name], name


# -- expected values from TF's behaviour (run without TensorFlow) -------------------------------
def _tf_config(monkeypatch, config):
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))


def test_tf_config_dense_cluster_and_task(monkeypatch):
    _tf_config(monkeypatch, TF_CONFIG_CASES[0][1])
    resolver = TFConfigClusterResolver()
    assert resolver.cluster_spec() == af.ClusterSpec(
        {"chief": ["c0:2222"], "ps": ["p0:2222", "p1:2222"],
         "worker": ["w0:2222", "w1:2222", "w2:2222"]})
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.rpc_layer is None
    assert resolver.master() == "w1:2222"
    assert resolver.is_member()


def test_tf_config_evaluator_is_a_client_not_a_member(monkeypatch):
    _tf_config(monkeypatch, TF_CONFIG_CASES[3][1])
    resolver = TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("evaluator", 0)
    assert resolver.cluster_spec().jobs == ["chief", "worker"]
    assert not resolver.is_member()
    with pytest.raises(ValueError, match="evaluator"):
        resolver.master()  # TF: the task is not in the cluster spec


def test_tf_config_sparse_job_and_empty(monkeypatch):
    _tf_config(monkeypatch, TF_CONFIG_CASES[4][1])
    spec = TFConfigClusterResolver().cluster_spec()
    assert spec.task_indices("worker") == [1, 3]
    assert spec.task_address("worker", 3) == "w3:2222"
    monkeypatch.delenv("TF_CONFIG")
    resolver = TFConfigClusterResolver()
    assert not resolver.cluster_spec() and resolver.task_type is None and resolver.task_id is None
    assert resolver.master() == ""


def test_tf_config_master_rules(monkeypatch):
    _tf_config(monkeypatch, TF_CONFIG_CASES[7][1])
    assert TFConfigClusterResolver().master() == "grpc://p0:1"
    assert TFConfigClusterResolver().master("worker", 0, rpc_layer="http") == "http://w0:1"
    _tf_config(monkeypatch, TF_CONFIG_CASES[8][1])
    assert TFConfigClusterResolver().master() == "sm:9"
    _tf_config(monkeypatch, TF_CONFIG_CASES[9][1])
    assert TFConfigClusterResolver().master() == ""


def test_tf_config_overrides_and_setters(monkeypatch):
    _tf_config(monkeypatch, TF_CONFIG_CASES[10][1])
    resolver = TFConfigClusterResolver(task_type="ps", task_id=1, rpc_layer="http")
    assert (resolver.task_type, resolver.task_id, resolver.master()) == ("ps", 1, "http://p1:1")
    resolver.task_type, resolver.task_id = None, None
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)


def test_tf_config_is_read_on_every_call(monkeypatch):
    resolver = TFConfigClusterResolver()
    _tf_config(monkeypatch, {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker",
                                                                      "index": 0}})
    assert resolver.cluster_spec().job_tasks("worker") == ["a:1"]
    _tf_config(monkeypatch, {"cluster": {"worker": ["b:2", "c:3"]},
                             "task": {"type": "worker", "index": 1}})
    assert resolver.cluster_spec().job_tasks("worker") == ["b:2", "c:3"]
    assert resolver.task_id == 1


def test_tf_config_errors_name_the_variable(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        TFConfigClusterResolver().cluster_spec()
    _tf_config(monkeypatch, {"cluster": {"worker": ["nohostport"]}})
    with pytest.raises(ValueError, match='TF_CONFIG: "cluster" is malformed.*host:port'):
        TFConfigClusterResolver().cluster_spec()
    environ = {"ASYNCFLOW_CONFIG": json.dumps({"cluster": {"ps": ["x:1"]},
                                               "task": {"type": "ps", "index": 0}})}
    resolver = TFConfigClusterResolver(variable="ASYNCFLOW_CONFIG", environ=environ)
    assert resolver.cluster_spec().job_tasks("ps") == ["x:1"]


def test_hostlist_and_tasks_per_node_expansion():
    # TF's own test values
    assert expand_hostlist("n1") == ["n1"]
    assert expand_hostlist("n[1,3]") == ["n1", "n3"]
    assert expand_hostlist("n[1-2],m5,o[3-4,6,7-9]") == [
        "n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]
    assert expand_hostlist("n[0001-0003],m5,o[009-011]") == [
        "n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"]
    assert expand_tasks_per_node("3(x2),2,11(x4)") == [3, 3, 2, 11, 11, 11, 11]
    assert expand_tasks_per_node("13(x10)") == [13] * 10
    with pytest.raises(ValueError, match="Slurm hostlist 'n\\[1-x\\]'"):
        expand_hostlist("n[1-x]")
    with pytest.raises(ValueError, match="tasks-per-node list '3\\(y2\\)'"):
        expand_tasks_per_node("3(y2)")


def _slurm(monkeypatch, env):
    for key in SLURM_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_slurm_multi_task_per_node_as_tf(monkeypatch):
    _slurm(monkeypatch, SLURM_CASES[2][1])
    resolver = SlurmClusterResolver(jobs={"ps": 1, "worker": 4}, gpus_per_node=2,
                                    gpus_per_task=1)
    assert resolver.cluster_spec() == af.ClusterSpec(
        {"ps": ["t02n13:8888"],
         "worker": ["t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"]})
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # rank 1's GPU on its node
    resolver.task_type, resolver.task_id = "worker", 3
    assert resolver.master() == "grpc://t02n43:8888"


def test_slurm_sorts_hosts_and_jobs(monkeypatch):
    _slurm(monkeypatch, SLURM_CASES[4][1])
    resolver = SlurmClusterResolver(**SLURM_CASES[4][2])
    assert resolver.cluster_spec() == af.ClusterSpec(
        {"chief": ["alpha01:23000"], "ps": ["alpha01:23001"],
         "worker": ["alpha02:23000", "zeta:23000", "zeta:23001", "zeta:23002"]})
    assert (resolver.task_type, resolver.task_id) == ("worker", 2)  # rank 4: zeta's 2nd slot


def test_slurm_cpu_only_tasks(monkeypatch):
    # TF divides by gpus_per_task, so it cannot resolve a node without GPUs; we can.
    _slurm(monkeypatch, {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3",
                         "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_STEP_NODELIST": "localhost"})
    resolver = SlurmClusterResolver(jobs={"ps": 1, "worker": 2}, port_base=23000,
                                    gpus_per_node=0)
    assert resolver.cluster_spec() == af.ClusterSpec(
        {"ps": ["localhost:23000"], "worker": ["localhost:23001", "localhost:23002"]})
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert resolver.bind_host() == "localhost"


def test_slurm_errors(monkeypatch):
    _slurm(monkeypatch, {})
    with pytest.raises(RuntimeError, match="SLURM_PROCID not found.*srun"):
        SlurmClusterResolver(gpus_per_node=0)
    _slurm(monkeypatch, SLURM_CASES[6][1])
    with pytest.raises(RuntimeError, match="Requested 2 tasks .* Slurm step has 3"):
        SlurmClusterResolver(**SLURM_CASES[6][2])
    _slurm(monkeypatch, SLURM_CASES[7][1])
    with pytest.raises(RuntimeError, match="more GPUs per node than available"):
        SlurmClusterResolver(**SLURM_CASES[7][2])


def test_slurm_refuses_cyclic_distribution(monkeypatch):
    # srun -n 4 -N 2 --distribution=cyclic puts rank 1 on the second node as its local task 0;
    # TF's rule would send peers to n1:8889, where nobody listens.
    env = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
           "SLURM_STEP_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n2", "SLURM_LOCALID": "0"}
    _slurm(monkeypatch, env)
    with pytest.raises(RuntimeError, match="rank 1 runs as local task 0 on n2.*block"):
        SlurmClusterResolver(gpus_per_node=0)
    _slurm(monkeypatch, {**env, "SLURMD_NODENAME": "n1", "SLURM_LOCALID": "1"})  # block: fine
    assert SlurmClusterResolver(gpus_per_node=0).task_id == 1
    _slurm(monkeypatch, {**env, "SLURMD_NODENAME": "n1", "SLURM_LOCALID": "1",
                         "SLURM_DISTRIBUTION": "cyclic"})
    with pytest.raises(RuntimeError, match="SLURM_DISTRIBUTION=cyclic"):
        SlurmClusterResolver(gpus_per_node=0)


# -- Kubernetes (DNS names; no TF counterpart: TF's lists pods through the API server) --------
def test_kubernetes_statefulset_names():
    environ = {"ASYNCFLOW_JOBS": '{"ps": 1, "worker": 2}', "ASYNCFLOW_JOB": "worker",
               "ASYNCFLOW_TASK_INDEX": "1", "POD_NAMESPACE": "team-a"}
    resolver = KubernetesClusterResolver(environ=environ)
    assert resolver.cluster_spec() == af.ClusterSpec(
        {"ps": ["ps-0.ps.team-a.svc:2222"],
         "worker": ["worker-0.worker.team-a.svc:2222", "worker-1.worker.team-a.svc:2222"]})
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.master() == "grpc://worker-1.worker.team-a.svc:2222"
    assert resolver.bind_host() == "0.0.0.0"


def test_kubernetes_index_sources_and_jobset_template():
    environ = {"ASYNCFLOW_JOBS": '{"ps": 2}', "ASYNCFLOW_JOB": "ps", "HOSTNAME": "ps-1",
               "ASYNCFLOW_PORT": "3000"}
    resolver = KubernetesClusterResolver(environ=environ)
    assert resolver.task_id == 1  # the StatefulSet ordinal of the hostname
    assert resolver.cluster_spec().job_tasks("ps") == ["ps-0.ps.default.svc:3000",
                                                       "ps-1.ps.default.svc:3000"]
    environ.update(JOB_COMPLETION_INDEX="0",
                   ASYNCFLOW_ADDRESS_TEMPLATE="train-{job}-0-{index}.train:{port}")
    assert resolver.task_id == 0  # an Indexed Job's index wins over the hostname
    assert resolver.cluster_spec().job_tasks("ps") == ["train-ps-0-0.train:3000",
                                                       "train-ps-0-1.train:3000"]


def test_kubernetes_errors_name_the_variable():
    with pytest.raises(ValueError, match="ASYNCFLOW_JOBS is not set"):
        KubernetesClusterResolver(environ={}).cluster_spec()
    with pytest.raises(ValueError, match="ASYNCFLOW_JOBS must map job names to task counts"):
        KubernetesClusterResolver(environ={"ASYNCFLOW_JOBS": '{"ps": "one"}'}).cluster_spec()
    with pytest.raises(ValueError, match="unknown field 'pod'"):
        KubernetesClusterResolver({"ps": 1}, address_template="{pod}:1",
                                  environ={}).cluster_spec()
    with pytest.raises(TypeError, match="label selectors"):
        KubernetesClusterResolver({"worker": ["job-name=tensorflow"]})


def test_sessions_and_cluster_spec_accept_a_resolver(monkeypatch):
    _tf_config(monkeypatch, {"cluster": {"worker": ["127.0.0.1:1"]}})
    resolver = TFConfigClusterResolver()
    assert af.ClusterSpec(resolver).job_tasks("worker") == ["127.0.0.1:1"]
    assert af.distribute.cluster_resolver.TFConfigClusterResolver is TFConfigClusterResolver


def test_bind_host_for():
    assert bind_host_for("127.0.0.1:5") == "127.0.0.1"
    assert bind_host_for("localhost:5") == "localhost"
    assert bind_host_for("ps-0.ps.ns.svc:2222") == "0.0.0.0"
    assert bind_host_for("10.1.2.3:2222") == "0.0.0.0"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
