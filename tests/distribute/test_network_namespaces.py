"""Two real hosts on one machine: a ps and a worker in two Linux network namespaces.

The fixture creates two namespaces joined by a veth pair created *inside* them, with addresses
of a private /24 that exist only there (no default route: nothing in them reaches anything but
the other namespace). Each namespace gets Kubernetes-style DNS names through
``/etc/netns/NAME/hosts`` (``ip netns exec`` bind-mounts it over ``/etc/hosts``), so the tasks
run exactly as pods would: ``asyncflow worker --resolver kubernetes`` binds ``0.0.0.0:2222`` and
advertises ``ps-0.ps.default.svc:2222``.

Network rule: every process that talks to these addresses or names runs inside a namespace
(``ip netns exec``); the test process itself only reads their output. Packets to a namespace
address sent from the root namespace would follow the machine's default route.
A second test starts two workers on the same port, one in each namespace, and checks that a client
in each reaches its own over the same-host Unix sockets (a shared temporary directory, one socket
name per namespace). Needs root and iproute2; skipped otherwise.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

from cli_workers import CliWorker

SUBNET = "10.213.77"
PORT = 2222
NAMES = {"ps": f"{SUBNET}.1", "worker": f"{SUBNET}.2"}
TOKEN = {"ASYNCFLOW_TOKEN": "netns-test-token"}


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _skip_reason():
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    probe = _ip("netns", "list", check=False)
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


@pytest.fixture
def namespaces():
    """``{"ps": name_a, "worker": name_b}``: two joined namespaces with pod DNS names."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    names = {"ps": f"af{tag}a", "worker": f"af{tag}b"}
    veths = {"ps": f"af{tag}va", "worker": f"af{tag}vb"}
    hosts = "127.0.0.1 localhost\n" + "".join(
        f"{address} {job}-0.{job}.default.svc\n" for job, address in NAMES.items())
    created = []
    try:
        for job, name in names.items():
            _ip("netns", "add", name)
            created.append(name)
            etc = pathlib.Path("/etc/netns") / name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
        _ip("link", "add", veths["ps"], "netns", names["ps"], "type", "veth", "peer", "name",
            veths["worker"], "netns", names["worker"])
        for job, name in names.items():
            _ip("-n", name, "addr", "add", f"{NAMES[job]}/24", "dev", veths[job])
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", veths[job], "up")
        # the route to the peer leaves through the veth (asked inside the namespace; sends nothing)
        route = _ip("-n", names["worker"], "route", "get", NAMES["ps"]).stdout
        assert f"dev {veths['worker']}" in route, route
        yield names
    finally:
        for name in created:
            pids = _ip("netns", "pids", name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", name, check=False)
            shutil.rmtree(pathlib.Path("/etc/netns") / name, ignore_errors=True)
        if pathlib.Path("/etc/netns").is_dir() and not any(pathlib.Path("/etc/netns").iterdir()):
            pathlib.Path("/etc/netns").rmdir()


_CLIENT = r"""
import json, trio, numpy as np
import asyncflow as af
from asyncflow.distribute.cluster_resolver import KubernetesClusterResolver

async def main():
    resolver = KubernetesClusterResolver()          # ASYNCFLOW_JOBS, POD_NAMESPACE, ASYNCFLOW_PORT
    x = np.linspace(-1, 1, 16).astype(np.float32)
    with af.device("/job:ps/task:0"):
        w = af.Variable(np.float32(0.0), name="w")
        step = af.train.get_or_create_global_step()
    with af.device("/job:worker/task:0"):
        loss = af.reduce_mean(af.square(w * x - 2.0 * x))
    train_op = af.train.GradientDescentOptimizer(0.2).minimize(loss, global_step=step)
    options = af.RunOptions(timeout_in_ms=60_000)
    async with af.Session(cluster=resolver) as sess:
        await sess.run(af.global_variables_initializer(), options=options)
        losses = [float(await sess.run(loss, options=options))]
        for _ in range(10):
            _, value = await sess.run([train_op, loss], options=options)
            losses.append(float(value))
        devices = sess.list_devices()
        result = {"spec": resolver.cluster_spec().as_dict(), "losses": losses,
                  "step": int(await sess.run(step)), "devices": devices}
    result["shutdown"] = await af.distribute.shutdown_cluster(resolver)
    print(json.dumps(result))

trio.run(main)
"""


def test_ps_and_worker_on_two_hosts_train_through_pod_dns_names(namespaces):
    pod_env = {**TOKEN, "ASYNCFLOW_JOBS": json.dumps({"ps": 1, "worker": 1}),
               "POD_NAMESPACE": "default", "ASYNCFLOW_PORT": str(PORT)}
    workers = []
    try:
        for job, name in namespaces.items():
            workers.append(CliWorker(["--resolver", "kubernetes", "--log-level", "WARNING"],
                                     env={**pod_env, "ASYNCFLOW_JOB": job,
                                          "HOSTNAME": f"{job}-0"},
                                     prefix=("ip", "netns", "exec", name)).start())
        assert [w.address for w in workers] == [f"0.0.0.0:{PORT}"] * 2
        # the client runs inside the ps's namespace, like a chief pod
        client = subprocess.run(["ip", "netns", "exec", namespaces["ps"], sys.executable, "-c",
                                 _CLIENT], capture_output=True, text=True, timeout=300,
                                env={**os.environ, **pod_env, "OPENBLAS_NUM_THREADS": "1"})
        assert client.returncode == 0, client.stderr[-4000:]
        result = json.loads(client.stdout.strip().splitlines()[-1])
        assert result["spec"] == {"ps": [f"ps-0.ps.default.svc:{PORT}"],
                                  "worker": [f"worker-0.worker.default.svc:{PORT}"]}
        assert "/job:worker/replica:0/task:0/device:CPU:0" in result["devices"]
        assert result["step"] == 10
        losses = result["losses"]  # each train step reports the loss before its update
        assert losses[1] == losses[0]
        assert all(later < earlier for earlier, later in zip(losses[1:], losses[2:])), losses
        assert result["shutdown"] == {"/job:ps/replica:0/task:0": "stopped",
                                      "/job:worker/replica:0/task:0": "stopped"}
        for worker in workers:
            assert worker.wait(60) == 0
    finally:
        for worker in workers:
            worker.kill()


_OWN_WORKER = r"""
import json, socket, sys, trio
from transports.http import same_host
from transports.http.client import TrioHttpChannel

async def main():
    async with TrioHttpChannel(f"127.0.0.1:{sys.argv[1]}", token=sys.argv[2]) as channel:
        with trio.fail_after(60):
            replies = [await channel.health() for _ in range(3)]
            text = await channel.metrics_text(timeout=30)
        (calls,) = [int(line.split()[1]) for line in text.splitlines()
                    if line.startswith("asyncflow_transport_same_host_calls_total ")]
        print(json.dumps({"tasks": sorted({r.task for r in replies}),
                          "incarnations": sorted({r.incarnation for r in replies}),
                          "bare_calls": channel.bare_calls, "server_same_host_calls": calls,
                          "http_over_unix": [c.stream.socket.family == socket.AF_UNIX
                                             for c in channel._idle],
                          "bare_path": same_host.socket_path(int(sys.argv[1]), "bare")}))

trio.run(main)
"""


def test_workers_on_one_port_in_two_namespaces_keep_their_own_same_host_sockets(namespaces):
    """The same-host Unix sockets live in the shared file system; their names carry the network
    namespace, so a client dialling its own namespace's 127.0.0.1:2222 reaches its own worker
    over the Unix socket, never the other namespace's (with one token for both, a crossed call
    would be accepted: the task names tell)."""
    workers = []
    try:
        for job, name in namespaces.items():
            cluster = json.dumps({job: [f"127.0.0.1:{PORT}"]})
            workers.append(CliWorker(["--cluster", cluster, "--job", job, "--task", "0",
                                      "--bind", "0.0.0.0", "--log-level", "WARNING"], env=TOKEN,
                                     prefix=("ip", "netns", "exec", name)).start())
        assert [w.address for w in workers] == [f"0.0.0.0:{PORT}"] * 2
        results = {}
        for job, name in namespaces.items():  # a client in each namespace, only on its loopback
            client = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                                     _OWN_WORKER, str(PORT), TOKEN["ASYNCFLOW_TOKEN"]],
                                    capture_output=True, text=True, timeout=120,
                                    env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
            assert client.returncode == 0, client.stderr[-4000:]
            results[job] = json.loads(client.stdout.strip().splitlines()[-1])
        for job, result in results.items():
            assert result["tasks"] == [f"/job:{job}/replica:0/task:0"], result
            assert len(result["incarnations"]) == 1
            assert result["bare_calls"] == 3 and result["server_same_host_calls"] == 3, result
            assert result["http_over_unix"] == [True], result  # /metrics: HTTP on the Unix socket
            assert os.path.exists(result["bare_path"])
        assert results["ps"]["incarnations"] != results["worker"]["incarnations"]
        assert results["ps"]["bare_path"] != results["worker"]["bare_path"]
        for worker in workers:
            assert worker.alive()
    finally:
        for worker in workers:
            worker.kill()
