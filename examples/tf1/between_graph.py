"""Between-graph replication: a parameter server and a worker (two tf.train.Servers in one
process here), variables placed by replica_device_setter, training through server.target."""
import socket

import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


cluster = tf.train.ClusterSpec({"ps": ["127.0.0.1:%d" % free_port()],
                                "worker": ["127.0.0.1:%d" % free_port()]})
ps_server = tf.train.Server(cluster, job_name="ps", task_index=0)
server = tf.train.Server(cluster, job_name="worker", task_index=0)

rng = np.random.RandomState(9)
xs = rng.normal(size=[40, 2]).astype(np.float32)
ys = xs @ np.array([[2.0], [-1.0]], np.float32) + 1.0

with tf.device(tf.train.replica_device_setter(
        worker_device="/job:worker/task:0", cluster=cluster)):
    x = tf.placeholder(tf.float32, [None, 2])
    y = tf.placeholder(tf.float32, [None, 1])
    W = tf.Variable(tf.zeros([2, 1]))
    b = tf.Variable(tf.zeros([1]))
    global_step = tf.train.get_or_create_global_step()
    loss = tf.reduce_mean(tf.square(tf.matmul(x, W) + b - y))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)

with tf.Session(server.target) as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(60):
        _, l = sess.run([train_op, loss], feed_dict={x: xs, y: ys})
        if step % 20 == 0:
            print("step", step, "loss", l)
    print("result loss", sess.run(loss, feed_dict={x: xs, y: ys}))
    print("result step", sess.run(global_step))
    print("result W_device_is_ps", int("ps" in W.device))
