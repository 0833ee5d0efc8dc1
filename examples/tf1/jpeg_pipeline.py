"""A JPEG input pipeline: the program writes small JPEG files, then a slice_input_producer
queue hands out (filename, label) pairs, tf.read_file + decode_jpeg + resize_images turn each
file into an image, and tf.train.batch's queue runners batch them until the epochs run out."""
import os
import tempfile

import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

flags = tf.app.flags
flags.DEFINE_integer("batch_size", 4, "Images per batch.")
flags.DEFINE_integer("image_size", 12, "Side of the resized square images.")
flags.DEFINE_integer("num_epochs", 2, "Passes over the files.")
FLAGS = flags.FLAGS


def write_images(directory, count=6):
    """Encode `count` gradient images of different sizes as JPEG files."""
    filenames, labels = [], []
    with tf.Graph().as_default():
        pixels = tf.placeholder(tf.uint8, [None, None, 3])
        encoded = tf.image.encode_jpeg(pixels, quality=95)
        with tf.Session() as sess:
            for i in range(count):
                rows, cols = np.mgrid[0:20 + 4 * i, 0:24 + 2 * i]
                image = np.stack([rows * 9 + 20 * i, cols * 7, (rows + cols) * 3], axis=-1)
                image = image.clip(0, 255).astype(np.uint8)
                path = os.path.join(directory, "image%d.jpg" % i)
                with open(path, "wb") as f:
                    f.write(sess.run(encoded, feed_dict={pixels: image}))
                filenames.append(path)
                labels.append(i % 2)
    return filenames, labels


def main(_):
    directory = tempfile.mkdtemp()
    filenames, labels = write_images(directory)

    filename, label = tf.train.slice_input_producer(
        [tf.constant(filenames), tf.constant(labels)], num_epochs=FLAGS.num_epochs,
        shuffle=False)
    image = tf.image.decode_jpeg(tf.read_file(filename), channels=3,
                                 dct_method="INTEGER_ACCURATE")
    image = tf.image.resize_images(image, [FLAGS.image_size, FLAGS.image_size])
    image.set_shape([FLAGS.image_size, FLAGS.image_size, 3])
    images, label_batch = tf.train.batch([image, label], batch_size=FLAGS.batch_size)
    mean_pixel = tf.reduce_mean(images)
    red_minus_blue = tf.reduce_mean(images[:, :, :, 0] - images[:, :, :, 2])

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        batches, means, contrast, positives = 0, 0.0, 0.0, 0
        try:
            while not coord.should_stop():
                m, c, l = sess.run([mean_pixel, red_minus_blue, label_batch])
                print("batch %d: mean pixel %.3f, labels %s" % (batches, m, l))
                batches += 1
                means += m
                contrast += c
                positives += int(l.sum())
        except tf.errors.OutOfRangeError:
            print("Done -- epoch limit reached")
        finally:
            coord.request_stop()
        coord.join(threads)

    for path in filenames:
        os.remove(path)
    os.rmdir(directory)
    print("result batches", batches)
    print("result positives", positives)
    print("result mean_pixel", means / batches)
    print("result red_minus_blue", contrast / batches)


if __name__ == "__main__":
    tf.app.run()
