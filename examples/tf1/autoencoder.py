"""An autoencoder (sigmoid layers, RMSProp) compressing 16-d patterns to 4 units."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

learning_rate = 0.05
training_epochs = 150
num_input = 16
num_hidden = 4

rng = np.random.RandomState(4)
basis = rng.uniform(0, 1, size=[3, num_input])
data = np.clip(rng.uniform(0, 1, size=[128, 3]) @ basis / 1.5, 0, 1).astype(np.float32)

X = tf.placeholder("float", [None, num_input])
weights = {
    "encoder_h1": tf.Variable(rng.normal(0, 0.3, [num_input, num_hidden]).astype(np.float32)),
    "decoder_h1": tf.Variable(rng.normal(0, 0.3, [num_hidden, num_input]).astype(np.float32)),
}
biases = {
    "encoder_b1": tf.Variable(tf.zeros([num_hidden])),
    "decoder_b1": tf.Variable(tf.zeros([num_input])),
}


def encoder(x):
    return tf.nn.sigmoid(tf.add(tf.matmul(x, weights["encoder_h1"]), biases["encoder_b1"]))


def decoder(x):
    return tf.nn.sigmoid(tf.add(tf.matmul(x, weights["decoder_h1"]), biases["decoder_b1"]))


encoder_op = encoder(X)
decoder_op = decoder(encoder_op)
loss = tf.reduce_mean(tf.pow(X - decoder_op, 2))
optimizer = tf.train.RMSPropOptimizer(learning_rate).minimize(loss)

init = tf.global_variables_initializer()
with tf.Session() as sess:
    sess.run(init)
    for i in range(1, training_epochs + 1):
        _, l = sess.run([optimizer, loss], feed_dict={X: data})
        if i % 50 == 0:
            print("Step %i: Minibatch Loss: %f" % (i, l))
    print("result loss", sess.run(loss, feed_dict={X: data}))
