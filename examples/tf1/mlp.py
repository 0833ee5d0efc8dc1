"""A multilayer perceptron with dropout (keep_prob fed 0.8 in training, 1.0 at evaluation)."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

n_hidden_1 = 32
n_hidden_2 = 32
n_input = 4
n_classes = 2

rng = np.random.RandomState(2)
data = rng.normal(size=[400, n_input]).astype(np.float32)
target = (np.sum(data[:, :2] ** 2, axis=1) < 1.2).astype(np.int64)
labels = np.eye(n_classes, dtype=np.float32)[target]


def init(shape):
    return rng.normal(0, 0.3, size=shape).astype(np.float32)


x = tf.placeholder("float", [None, n_input])
y = tf.placeholder("float", [None, n_classes])
keep_prob = tf.placeholder(tf.float32)

weights = {
    "h1": tf.Variable(init([n_input, n_hidden_1])),
    "h2": tf.Variable(init([n_hidden_1, n_hidden_2])),
    "out": tf.Variable(init([n_hidden_2, n_classes])),
}
biases = {
    "b1": tf.Variable(tf.zeros([n_hidden_1])),
    "b2": tf.Variable(tf.zeros([n_hidden_2])),
    "out": tf.Variable(tf.zeros([n_classes])),
}


def multilayer_perceptron(x):
    layer_1 = tf.nn.relu(tf.add(tf.matmul(x, weights["h1"]), biases["b1"]))
    layer_1 = tf.nn.dropout(layer_1, keep_prob)
    layer_2 = tf.nn.relu(tf.add(tf.matmul(layer_1, weights["h2"]), biases["b2"]))
    layer_2 = tf.nn.dropout(layer_2, keep_prob)
    return tf.matmul(layer_2, weights["out"]) + biases["out"]


logits = multilayer_perceptron(x)
cost = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=y))
optimizer = tf.train.AdamOptimizer(learning_rate=0.01).minimize(cost)
correct = tf.equal(tf.argmax(logits, 1), tf.argmax(y, 1))
accuracy = tf.reduce_mean(tf.cast(correct, "float"))

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for epoch in range(300):
        _, c = sess.run([optimizer, cost], feed_dict={x: data, y: labels, keep_prob: 0.8})
        if (epoch + 1) % 100 == 0:
            print("Epoch:", "%04d" % (epoch + 1), "cost={:.9f}".format(c))
    print("result accuracy", sess.run(accuracy, feed_dict={x: data, y: labels, keep_prob: 1.0}))
    print("result eval_cost", sess.run(cost, feed_dict={x: data, y: labels, keep_prob: 1.0}))
