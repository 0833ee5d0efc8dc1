"""tf.cond and tf.while_loop: Collatz steps, a loop-computed power and its gradient."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

n = tf.placeholder(tf.int32, [])


def collatz_body(value, steps):
    value = tf.cond(tf.equal(value % 2, 0), lambda: value // 2, lambda: 3 * value + 1)
    return value, steps + 1


_, collatz_steps = tf.while_loop(lambda value, steps: value > 1, collatz_body, [n, 0])

x = tf.Variable(1.5)
i0 = tf.constant(0)
power = tf.while_loop(lambda i, acc: i < 4, lambda i, acc: (i + 1, acc * x), [i0, 1.0])[1]
grad = tf.gradients(power, x)[0]
clipped = tf.cond(power > 4.0, lambda: tf.constant(4.0), lambda: power)

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    print("result collatz27", sess.run(collatz_steps, feed_dict={n: 27}))
    print("result collatz6", sess.run(collatz_steps, feed_dict={n: 6}))
    print("result power", sess.run(power))
    print("result grad", sess.run(grad))
    print("result clipped", sess.run(clipped))
