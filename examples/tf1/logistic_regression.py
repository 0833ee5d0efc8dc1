"""Softmax (logistic) regression on three synthetic clusters, TF1 tutorial style."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

learning_rate = 0.5
training_epochs = 60
batch_size = 30

rng = np.random.RandomState(1)
centers = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
labels = rng.randint(0, 3, size=300)
features = (centers[labels] + rng.normal(0, 0.6, size=[300, 2])).astype(np.float32)
one_hot = np.eye(3, dtype=np.float32)[labels]

x = tf.placeholder(tf.float32, [None, 2])
y = tf.placeholder(tf.float32, [None, 3])
W = tf.Variable(tf.zeros([2, 3]))
b = tf.Variable(tf.zeros([3]))
pred = tf.nn.softmax(tf.matmul(x, W) + b)
cost = tf.reduce_mean(-tf.reduce_sum(y * tf.log(pred), reduction_indices=1))
optimizer = tf.train.GradientDescentOptimizer(learning_rate).minimize(cost)
correct_prediction = tf.equal(tf.argmax(pred, 1), tf.argmax(y, 1))
accuracy = tf.reduce_mean(tf.cast(correct_prediction, "float"))

init = tf.global_variables_initializer()
with tf.Session() as sess:
    sess.run(init)
    for epoch in range(training_epochs):
        avg_cost = 0.0
        total_batch = 300 // batch_size
        for i in range(total_batch):
            batch_xs = features[i * batch_size:(i + 1) * batch_size]
            batch_ys = one_hot[i * batch_size:(i + 1) * batch_size]
            _, c = sess.run([optimizer, cost], feed_dict={x: batch_xs, y: batch_ys})
            avg_cost += c / total_batch
        if (epoch + 1) % 20 == 0:
            print("Epoch:", "%04d" % (epoch + 1), "cost=", "{:.9f}".format(avg_cost))
    print("result cost", avg_cost)
    print("result accuracy", accuracy.eval({x: features, y: one_hot}))
