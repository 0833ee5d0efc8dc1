"""The chief of a cluster job: train a model on tasks resolved from the environment, then end them.

Runs unchanged on every engine of docs/deploy.md::

    python deploy/train.py --resolver tf_config      # Kubeflow TFJob, Ray Train: reads TF_CONFIG
    python deploy/train.py --resolver kubernetes     # deploy/kubernetes/asyncflow-cluster.yaml
    python deploy/train.py --resolver slurm --jobs '{"chief": 1, "ps": 1, "worker": 2}' \
        --port-base 23000
    python deploy/train.py --ray '{"ps": 1, "worker": 2}'   # tasks as Ray actors (ray.init first)

A linear regression, y = X w + noise, with the variables on the ps tasks
(``replica_device_setter``) and one shard of every batch per worker, under
``MonitoredTrainingSession`` (checkpoints in ``--checkpoint-dir``; a task that dies and comes
back is recovered from the latest one). When the chief itself is a task of the cluster (TFJob's
and Slurm's ``chief``), it serves that task too. At the end it sends Shutdown to the other
tasks, so their processes exit 0 and the engine sees the job complete.
Prints one JSON line: ``{"global_step": ..., "loss": ..., "shutdown": {...}}``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import trio

import asyncflow as af
from asyncflow import aio
from asyncflow.distribute import cluster_resolver as resolvers


def build_model(spec, features=8, batch=64, seed=0):
    """The regression graph: ``(train_op, loss, global_step)``."""
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=(features, 1)).astype(np.float32)
    x = rng.normal(size=(batch, features)).astype(np.float32)
    y = x @ true_w + 0.01 * rng.normal(size=(batch, 1)).astype(np.float32)
    workers = spec.num_tasks("worker")
    with af.device(af.train.replica_device_setter(cluster=spec)):
        w = af.get_variable("w", [features, 1], initializer=af.zeros_initializer())
        global_step = af.train.get_or_create_global_step()
    losses = []
    for i, (xs, ys) in enumerate(zip(np.array_split(x, workers), np.array_split(y, workers))):
        with af.device(f"/job:worker/task:{i}"):
            losses.append(af.reduce_mean(af.square(af.matmul(xs, w) - ys)))
    loss = af.add_n(losses) / workers
    train_op = af.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
    return train_op, loss, global_step


async def train(cluster, steps, checkpoint_dir):
    """Train for ``steps`` global steps; returns ``(global_step, loss)``."""
    with af.Graph().as_default():
        train_op, loss, global_step = build_model(af.ClusterSpec(cluster))
        hooks = [af.train.StopAtStepHook(last_step=steps)]
        async with af.train.MonitoredTrainingSession(
                cluster=cluster, checkpoint_dir=checkpoint_dir, hooks=hooks,
                save_checkpoint_steps=max(1, steps // 4), log_step_count_steps=None,
                recovery_wait_secs=300) as sess:
            value = None
            while not sess.should_stop():
                _, value, step = await sess.run([train_op, loss, global_step])
    return int(step), float(value)


def make_resolver(args):
    if args.resolver == "slurm":
        return resolvers.SlurmClusterResolver(jobs=json.loads(args.jobs) if args.jobs else None,
                                              port_base=args.port_base)
    if args.resolver == "kubernetes":
        return resolvers.KubernetesClusterResolver(json.loads(args.jobs) if args.jobs else None)
    variable = "ASYNCFLOW_CONFIG" if os.environ.get("ASYNCFLOW_CONFIG") else "TF_CONFIG"
    return resolvers.TFConfigClusterResolver(variable=variable)


async def run_chief(resolver, args):
    spec = resolver.cluster_spec()
    own_job = resolver.task_type if resolver.is_member() else None
    async with trio.open_nursery() as nursery:
        if own_job is not None:  # the chief is a task of the cluster too: serve it
            server = af.Server(spec, own_job, resolver.task_id, host=resolver.bind_host())
            await nursery.start(server.serve)
        step, loss = await train(resolver, args.steps, args.checkpoint_dir)
        others = [job for job in spec.jobs if job != own_job]
        stopped = await af.distribute.shutdown_cluster(resolver, jobs=others)
        nursery.cancel_scope.cancel()
    return {"global_step": step, "loss": loss, "shutdown": stopped}


def run_on_ray(args):
    import ray

    from asyncflow.ray import start_cluster
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    with start_cluster(json.loads(args.ray)) as cluster:
        step, loss = aio.run_trio(train, cluster, args.steps, args.checkpoint_dir)
    return {"global_step": step, "loss": loss, "shutdown": "the Ray actors were removed"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resolver", choices=["tf_config", "slurm", "kubernetes"],
                        default="tf_config")
    parser.add_argument("--jobs", help='job sizes for slurm/kubernetes: \'{"ps": 1, "worker": 2}\'')
    parser.add_argument("--port-base", type=int, default=8888, help="Slurm: first port per node")
    parser.add_argument("--ray", metavar="JOBS", help="start the tasks as Ray actors instead")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args(argv)
    result = run_on_ray(args) if args.ray else aio.run_trio(run_chief, make_resolver(args), args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
