"""Skip-gram word embeddings with a full softmax over a tiny synthetic corpus."""
import numpy as np
import asyncflow.compat.v1 as tf

tf.disable_v2_behavior()

corpus = ("the king rules the land the queen rules the land "
          "a dog chases a cat a cat chases a mouse "
          "the king and the queen live in the castle "
          "a dog and a cat live in the house").split()
vocab = sorted(set(corpus))
word_to_id = {w: i for i, w in enumerate(vocab)}
vocabulary_size = len(vocab)
embedding_size = 8
window = 1

pairs = []
for i, word in enumerate(corpus):
    for j in range(max(0, i - window), min(len(corpus), i + window + 1)):
        if j != i:
            pairs.append((word_to_id[word], word_to_id[corpus[j]]))
pairs = np.array(pairs, dtype=np.int32)

rng = np.random.RandomState(6)
train_inputs = tf.placeholder(tf.int32, shape=[None])
train_labels = tf.placeholder(tf.int32, shape=[None])
embeddings = tf.Variable(
    rng.uniform(-1.0, 1.0, [vocabulary_size, embedding_size]).astype(np.float32))
embed = tf.nn.embedding_lookup(embeddings, train_inputs)
softmax_weights = tf.Variable(
    rng.normal(0, 1.0 / np.sqrt(embedding_size), [embedding_size, vocabulary_size]).astype(np.float32))
softmax_biases = tf.Variable(tf.zeros([vocabulary_size]))
logits = tf.matmul(embed, softmax_weights) + softmax_biases
loss = tf.reduce_mean(
    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=train_labels, logits=logits))
optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)

norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keep_dims=True))
normalized_embeddings = embeddings / norm
similarity = tf.matmul(normalized_embeddings, normalized_embeddings, transpose_b=True)

with tf.Session() as sess:
    tf.global_variables_initializer().run()
    average_loss = 0
    for step in range(1, 201):
        _, loss_val = sess.run([optimizer, loss],
                               feed_dict={train_inputs: pairs[:, 0], train_labels: pairs[:, 1]})
        average_loss += loss_val
        if step % 100 == 0:
            print("Average loss at step ", step, ": ", average_loss / 100)
            average_loss = 0
    sim = similarity.eval()
    print("result loss", loss_val)
    print("result king_queen", sim[word_to_id["king"], word_to_id["queen"]])
