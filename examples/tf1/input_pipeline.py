"""An input queue pipeline: a producer of indices, a batching queue filled by queue runners,
and a consumer loop that runs until the input is exhausted (OutOfRangeError)."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

values = np.arange(20, dtype=np.float32) * 0.5
table = tf.constant(values)
index = tf.train.range_input_producer(20, num_epochs=2, shuffle=False).dequeue()
example = tf.gather(table, index)
batch = tf.train.batch([example], batch_size=4)
batch_sum = tf.reduce_sum(batch)

with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(tf.local_variables_initializer())
    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    total, batches = 0.0, 0
    try:
        while not coord.should_stop():
            total += sess.run(batch_sum)
            batches += 1
    except tf.errors.OutOfRangeError:
        print("Done training -- epoch limit reached")
    finally:
        coord.request_stop()
    coord.join(threads)
    print("result total", total)
    print("result batches", batches)
