"""The deploy/ examples, run or validated for real on this machine.

- Kubernetes: every manifest under ``deploy/kubernetes`` passes ``kubernetes-validate --strict``
  (the TFJob CRD is unknown to it, so its pod templates are validated as PodTemplates and its
  own fields against the TFJob v1 fields the example uses); the StatefulSet/Service names and
  ports agree with the addresses KubernetesClusterResolver computes from the pods' environment.
- TFJob behaviour: processes get the TF_CONFIG the operator writes (a chief, a ps, two workers);
  ``asyncflow worker`` needs no flags, ``deploy/train.py`` (the chief) trains and ends the job.
- Slurm: ``deploy/slurm/task.sh`` for each rank with the variables srun sets, on loopback; and,
  where Slurm is installed, the same under a real ``srun``.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from asyncflow.distribute.cluster_resolver import KubernetesClusterResolver
from cli_workers import CliWorker, consecutive_ports, free_ports

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
K8S_VERSIONS = ("1.28.0", "1.37.0")  # the pod-index label needs 1.28


def _documents(path):
    yaml = pytest.importorskip("yaml")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _validate(resource, version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(resource, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_native_manifests_validate_strictly(version):
    documents = _documents(KUBERNETES / "asyncflow-cluster.yaml")
    assert [d["kind"] for d in documents] == ["Service", "StatefulSet", "Service",
                                              "StatefulSet", "Job", "PersistentVolumeClaim"]
    for resource in documents:
        _validate(resource, version)


def test_every_task_mounts_the_shared_checkpoints_as_its_data_dir():
    """A sharded Saver writes each task's shard on that task: its data dir must be the
    checkpoint volume, the one claim every pod mounts at the same path."""
    documents = _documents(KUBERNETES / "asyncflow-cluster.yaml")
    (claim,) = [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    for doc in documents:
        if doc["kind"] not in ("StatefulSet", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        (volume,) = pod["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        (container,) = pod["containers"]
        (mount,) = container["volumeMounts"]
        assert mount["name"] == volume["name"]
        if doc["kind"] == "StatefulSet":
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["ASYNCFLOW_DATA_DIR"] == mount["mountPath"]


def test_the_validator_rejects_what_the_tests_rely_on_it_for():
    documents = _documents(KUBERNETES / "asyncflow-cluster.yaml")
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    statefulset = json.loads(json.dumps(documents[1]))
    statefulset["spec"]["podManagmentPolicy"] = statefulset["spec"].pop("podManagementPolicy")
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(statefulset, K8S_VERSIONS[-1])
    statefulset = json.loads(json.dumps(documents[1]))
    statefulset["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(statefulset, K8S_VERSIONS[-1])


def _env_of(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def test_native_manifests_match_the_kubernetes_resolver():
    documents = _documents(KUBERNETES / "asyncflow-cluster.yaml")
    services = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Service"}
    statefulsets = {d["metadata"]["name"]: d for d in documents if d["kind"] == "StatefulSet"}
    for name, sts in statefulsets.items():
        service = services[sts["spec"]["serviceName"]]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        container, = sts["spec"]["template"]["spec"]["containers"]
        env = _env_of(container)
        jobs = json.loads(env["ASYNCFLOW_JOBS"])
        assert jobs[name] == sts["spec"]["replicas"]
        assert container["command"][:4] == ["asyncflow", "worker", "--resolver", "kubernetes"]
        assert container["readinessProbe"]["tcpSocket"]["port"] == 2222
        index_source = next(e for e in container["env"] if e["name"] == "ASYNCFLOW_TASK_INDEX")
        assert "apps.kubernetes.io/pod-index" in index_source["valueFrom"]["fieldRef"]["fieldPath"]
        token = next(e for e in container["env"] if e["name"] == "ASYNCFLOW_TOKEN")
        assert "secretKeyRef" in token["valueFrom"]
        # what the pod "ps-1" of this StatefulSet computes, in namespace "mnist"
        last = sts["spec"]["replicas"] - 1
        resolver = KubernetesClusterResolver(environ={
            **{k: v for k, v in env.items() if v is not None}, "ASYNCFLOW_TASK_INDEX": str(last),
            "POD_NAMESPACE": "mnist"})
        port = container["ports"][0]["containerPort"]
        assert resolver.cluster_spec().task_address(name, last) == (
            f"{name}-{last}.{service['metadata']['name']}.mnist.svc:{port}")
        assert (resolver.task_type, resolver.task_id) == (name, last)
        assert resolver.bind_host() == "0.0.0.0"


TFJOB_REPLICA_TYPES = {"Chief", "Master", "PS", "Worker", "Evaluator"}


def test_tfjob_example_is_a_valid_tfjob():
    tfjob, = _documents(KUBERNETES / "tfjob.yaml")
    assert (tfjob["apiVersion"], tfjob["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert set(tfjob) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(tfjob["spec"]) <= {"runPolicy", "tfReplicaSpecs", "successPolicy",
                                  "enableDynamicWorker"}
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] in ("All", "Running", "None")
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    assert set(replicas) <= TFJOB_REPLICA_TYPES
    for replica_type, replica in replicas.items():
        assert set(replica) <= {"replicas", "restartPolicy", "template"}
        assert isinstance(replica["replicas"], int) and replica["replicas"] >= 1
        assert replica["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
        containers = replica["template"]["spec"]["containers"]
        # the operator reads the port of the container named "tensorflow", port "tfjob-port"
        main, = [c for c in containers if c["name"] == "tensorflow"]
        assert {"name": "tfjob-port", "containerPort": 2222} in main["ports"]
        for version in K8S_VERSIONS:
            _validate({"apiVersion": "v1", "kind": "PodTemplate",
                       "metadata": {"name": f"mnist-{replica_type.lower()}"},
                       "template": replica["template"]}, version)


def _pods(replicas, name="mnist"):
    """The TF_CONFIG the TFJob operator writes: one Service per replica, chief included."""
    ports = iter(free_ports(sum(replicas.values())))
    # Kubernetes would give "mnist-ps-0.NAMESPACE.svc:2222"; here each is a loopback port.
    return {rtype: [f"127.0.0.1:{next(ports)}" for _ in range(count)]
            for rtype, count in replicas.items()}


def test_tfjob_pods_train_and_complete(tmp_path):
    cluster = _pods({"chief": 1, "ps": 1, "worker": 2})
    env = {"ASYNCFLOW_TOKEN": "tfjob-token"}

    def tf_config(rtype, index):
        return json.dumps({"cluster": cluster, "task": {"type": rtype, "index": index},
                           "environment": "cloud"})

    workers = []
    try:
        for rtype, index in (("ps", 0), ("worker", 0), ("worker", 1)):
            workers.append(CliWorker(["--log-level", "WARNING"],
                                     env={**env, "TF_CONFIG": tf_config(rtype, index)}).start())
        chief = subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "train.py"), "--resolver", "tf_config",
             "--steps", "12", "--checkpoint-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, **env, "TF_CONFIG": tf_config("chief", 0),
                 "OPENBLAS_NUM_THREADS": "1"})
        assert chief.returncode == 0, chief.stderr[-4000:]
        result = json.loads(chief.stdout.strip().splitlines()[-1])
        assert result["global_step"] == 12
        assert result["shutdown"] == {"/job:ps/replica:0/task:0": "stopped",
                                      "/job:worker/replica:0/task:0": "stopped",
                                      "/job:worker/replica:0/task:1": "stopped"}
        assert [w.wait(60) for w in workers] == [0, 0, 0]  # every replica succeeded
        assert (tmp_path / "checkpoint").exists()
    finally:
        for worker in workers:
            worker.kill()


def _slurm_env(rank, ntasks, port_base, tmp_path):
    return {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank),
            "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_STEP_NODELIST": "127.0.0.1",
            "SLURM_STEP_TASKS_PER_NODE": str(ntasks), "SLURMD_NODENAME": "127.0.0.1",
            "CUDA_VISIBLE_DEVICES": "", "ASYNCFLOW_JOBS": '{"chief": 1, "ps": 1, "worker": 2}',
            "ASYNCFLOW_PORT_BASE": str(port_base), "ASYNCFLOW_STEPS": "12",
            "ASYNCFLOW_CHECKPOINT_DIR": str(tmp_path), "ASYNCFLOW_TOKEN": "slurm-token",
            "PYTHON": sys.executable, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def test_slurm_task_script_with_the_variables_srun_sets(tmp_path):
    base = consecutive_ports(4)  # rank k listens on base + k
    procs = []
    try:
        for rank in range(4):
            procs.append(subprocess.Popen(
                ["bash", str(ROOT / "deploy" / "slurm" / "task.sh")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, **_slurm_env(rank, 4, base, tmp_path)}))
        outputs = [proc.communicate(timeout=300) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0, 0, 0], outputs[0][1][-3000:]
        result = json.loads(outputs[0][0].strip().splitlines()[-1])
        assert result["global_step"] == 12
        assert set(result["shutdown"].values()) == {"stopped"} and len(result["shutdown"]) == 3
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_slurm_task_script_under_a_real_srun(tmp_path):
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed here (no srun)")
    if subprocess.run(["sinfo"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("Slurm is installed but no controller answers (sinfo failed)")
    base = consecutive_ports(4)
    env = {**os.environ, **_slurm_env(0, 4, base, tmp_path)}
    for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME"):
        env.pop(key)  # srun sets them
    result = subprocess.run(["srun", "-n", "4", "--overcommit", "--distribution=block",
                             "--kill-on-bad-exit=1", "bash",
                             str(ROOT / "deploy" / "slurm" / "task.sh")],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("{"))
    assert json.loads(line)["global_step"] == 12
