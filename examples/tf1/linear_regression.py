"""Linear regression with gradient descent, in the style of the classic TF1 tutorials."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

flags = tf.app.flags
flags.DEFINE_float("learning_rate", 0.05, "Learning rate.")
flags.DEFINE_integer("training_epochs", 200, "Number of passes over the data.")
flags.DEFINE_integer("display_step", 50, "Print the cost every this many epochs.")
FLAGS = flags.FLAGS


def main(_):
    rng = np.random.RandomState(0)
    train_X = rng.uniform(0, 2, size=[64]).astype(np.float32)
    train_Y = (3.0 * train_X + 0.5 + rng.normal(0, 0.1, size=[64])).astype(np.float32)

    X = tf.placeholder("float")
    Y = tf.placeholder("float")
    W = tf.Variable(0.1, name="weight")
    b = tf.Variable(0.0, name="bias")
    pred = tf.add(tf.multiply(X, W), b)
    cost = tf.reduce_sum(tf.pow(pred - Y, 2)) / (2 * 64)
    optimizer = tf.train.GradientDescentOptimizer(FLAGS.learning_rate).minimize(cost)

    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        sess.run(init)
        for epoch in range(FLAGS.training_epochs):
            sess.run(optimizer, feed_dict={X: train_X, Y: train_Y})
            if (epoch + 1) % FLAGS.display_step == 0:
                c = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
                print("Epoch:", "%04d" % (epoch + 1), "cost=", "{:.9f}".format(c))
        training_cost = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
        print("result cost", training_cost)
        print("result W", sess.run(W))
        print("result b", sess.run(b))


if __name__ == "__main__":
    tf.app.run()
