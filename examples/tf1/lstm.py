"""An LSTM (BasicLSTMCell, dynamic_rnn) learning the running sum's sign of a sequence."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

timesteps = 6
num_hidden = 8
rng = np.random.RandomState(5)
seqs = rng.normal(size=[64, timesteps, 1]).astype(np.float32)
targets = (np.sum(seqs, axis=(1, 2)) > 0).astype(np.float32).reshape(-1, 1)

X = tf.placeholder("float", [None, timesteps, 1])
Y = tf.placeholder("float", [None, 1])
tf.set_random_seed(7)
cell = tf.nn.rnn_cell.BasicLSTMCell(num_hidden)
outputs, state = tf.nn.dynamic_rnn(cell, X, dtype=tf.float32)
last = outputs[:, -1, :]
W = tf.Variable(rng.normal(0, 0.3, size=[num_hidden, 1]).astype(np.float32))
b = tf.Variable(tf.zeros([1]))
logits = tf.matmul(last, W) + b
loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=Y, logits=logits))
train_op = tf.train.AdamOptimizer(0.05).minimize(loss)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), Y), tf.float32))

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    first = sess.run(loss, feed_dict={X: seqs, Y: targets})
    for step in range(1, 151):
        sess.run(train_op, feed_dict={X: seqs, Y: targets})
        if step % 50 == 0:
            print("Step " + str(step) + ", Loss= " +
                  "{:.4f}".format(sess.run(loss, feed_dict={X: seqs, Y: targets})))
    print("result first_loss", first)
    print("result accuracy", sess.run(accuracy, feed_dict={X: seqs, Y: targets}))
