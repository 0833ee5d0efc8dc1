"""Train, save a checkpoint, then restore it into a fresh session and keep training."""
import os
import tempfile

import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

rng = np.random.RandomState(8)
xs = rng.normal(size=[50, 3]).astype(np.float32)
ys = xs @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3

x = tf.placeholder(tf.float32, [None, 3])
y = tf.placeholder(tf.float32, [None, 1])
W = tf.Variable(tf.zeros([3, 1]), name="W")
b = tf.Variable(tf.zeros([1]), name="b")
global_step = tf.Variable(0, name="global_step", trainable=False)
loss = tf.reduce_mean(tf.square(tf.matmul(x, W) + b - y))
train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
saver = tf.train.Saver(max_to_keep=2)
model_dir = os.path.join(tempfile.mkdtemp(), "run", "model")
os.makedirs(model_dir)

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(3):
        for _ in range(10):
            sess.run(train_op, feed_dict={x: xs, y: ys})
        save_path = saver.save(sess, os.path.join(model_dir, "model.ckpt"),
                               global_step=global_step)
        print("Model saved in path: %s" % os.path.basename(save_path))
    saved_loss = sess.run(loss, feed_dict={x: xs, y: ys})

with tf.Session() as sess:
    latest = tf.train.latest_checkpoint(model_dir)
    saver.restore(sess, latest)
    print("Model restored from", os.path.basename(latest))
    restored_loss = sess.run(loss, feed_dict={x: xs, y: ys})
    for _ in range(20):
        sess.run(train_op, feed_dict={x: xs, y: ys})
    print("result saved_loss", saved_loss)
    print("result restored_loss", restored_loss)
    print("result step", sess.run(global_step))
    print("result kept", len([f for f in os.listdir(model_dir) if f.endswith(".meta")]))
    print("result final_loss", sess.run(loss, feed_dict={x: xs, y: ys}))
