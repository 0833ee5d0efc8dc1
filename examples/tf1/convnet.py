"""A small convolutional network on synthetic 8x8 images (stripes: horizontal or vertical)."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

rng = np.random.RandomState(3)
n = 64
images = rng.normal(0, 0.3, size=[n, 8, 8, 1]).astype(np.float32)
classes = rng.randint(0, 2, size=n)
for i in range(n):
    if classes[i] == 0:
        images[i, 2:4, :, 0] += 1.0
    else:
        images[i, :, 2:4, 0] += 1.0
labels = np.eye(2, dtype=np.float32)[classes]

x = tf.placeholder(tf.float32, [None, 8, 8, 1])
y_ = tf.placeholder(tf.float32, [None, 2])


def weight_variable(shape):
    return tf.Variable(rng.normal(0, 0.1, size=shape).astype(np.float32))


def bias_variable(shape):
    return tf.Variable(tf.constant(0.1, shape=shape))


def conv2d(x, W):
    return tf.nn.conv2d(x, W, strides=[1, 1, 1, 1], padding="SAME")


def max_pool_2x2(x):
    return tf.nn.max_pool(x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")


W_conv1 = weight_variable([3, 3, 1, 8])
b_conv1 = bias_variable([8])
h_conv1 = tf.nn.relu(conv2d(x, W_conv1) + b_conv1)
h_pool1 = max_pool_2x2(h_conv1)

W_fc1 = weight_variable([4 * 4 * 8, 16])
b_fc1 = bias_variable([16])
h_pool1_flat = tf.reshape(h_pool1, [-1, 4 * 4 * 8])
h_fc1 = tf.nn.relu(tf.matmul(h_pool1_flat, W_fc1) + b_fc1)

W_fc2 = weight_variable([16, 2])
b_fc2 = bias_variable([2])
y_conv = tf.matmul(h_fc1, W_fc2) + b_fc2

cross_entropy = tf.reduce_mean(
    tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y_conv))
train_step = tf.train.AdamOptimizer(1e-2).minimize(cross_entropy)
correct_prediction = tf.equal(tf.argmax(y_conv, 1), tf.argmax(y_, 1))
accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for i in range(30):
        if i % 10 == 0:
            train_accuracy = accuracy.eval(feed_dict={x: images, y_: labels})
            print("step %d, training accuracy %g" % (i, train_accuracy))
        train_step.run(feed_dict={x: images, y_: labels})
    print("result loss", sess.run(cross_entropy, feed_dict={x: images, y_: labels}))
    print("result accuracy", accuracy.eval(feed_dict={x: images, y_: labels}))
