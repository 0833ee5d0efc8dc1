"""A character-level LSTM language model, TF1 style, ported to asyncflow unchanged but for
``await`` and ``async with``.

The model is the classic char-rnn: characters are embedded, run through a ``MultiRNNCell`` of
``BasicLSTMCell``s (with ``DropoutWrapper``) by ``dynamic_rnn``, and a dense layer predicts the
next character. The loss is the mean per-character cross entropy (``sequence_loss`` with unit
weights), gradients are clipped by global norm, and the learning rate decays exponentially.
The LSTM state is carried from one batch to the next (fed back through ``feed_dict``), and at
the end the model samples text one character at a time, the way TF1 tutorials do.

The text ships with Python: the Zen of Python (the ``this`` module) and the docstrings of
``textwrap``, so the demo needs no download.

    python demos/char_rnn.py [--epochs 30] [--hidden 128] [--layers 2] [--seq-len 50]
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import inspect
import io
import os
import textwrap

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import asyncflow as af
from asyncflow import aio


def corpus(size="full"):
    """The Zen of Python, plus (``full``) the docstrings of the ``textwrap`` module."""
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen
        import this
    zen = codecs.decode(this.s, "rot13")
    if size == "zen":
        return zen
    docs = [inspect.getdoc(textwrap)] + [inspect.getdoc(getattr(textwrap, name))
                                         for name in sorted(dir(textwrap))
                                         if not name.startswith("_")
                                         and inspect.getdoc(getattr(textwrap, name))]
    return zen + "\n\n" + "\n\n".join(docs)


class Vocabulary:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text):
        return np.array([self.index[c] for c in text], dtype=np.int32)

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def batches(ids, batch_size, seq_len):
    """``(inputs, targets)`` windows: ``batch_size`` parallel streams through the text."""
    per_stream = (len(ids) - 1) // batch_size
    windows = per_stream // seq_len
    if windows == 0:
        raise ValueError(f"the text ({len(ids)} characters) is too short for batch_size="
                         f"{batch_size} and seq_len={seq_len}")
    x = ids[:batch_size * per_stream].reshape(batch_size, per_stream)
    y = ids[1:batch_size * per_stream + 1].reshape(batch_size, per_stream)
    return [(x[:, k * seq_len:(k + 1) * seq_len], y[:, k * seq_len:(k + 1) * seq_len])
            for k in range(windows)]


class CharRNN:
    """The TF1 graph: placeholders, LSTM stack, loss, clipped Adam with a decaying rate."""

    def __init__(self, vocab_size, hidden=128, layers=2, learning_rate=0.005, decay_steps=50,
                 decay_rate=0.9, grad_clip=5.0):
        self.inputs = af.placeholder(af.int32, [None, None], name="inputs")
        self.targets = af.placeholder(af.int32, [None, None], name="targets")
        self.keep_prob = af.placeholder_with_default(1.0, [], name="keep_prob")
        self.temperature = af.placeholder_with_default(1.0, [], name="temperature")
        cells = [af.nn.rnn_cell.DropoutWrapper(af.nn.rnn_cell.BasicLSTMCell(hidden),
                                               output_keep_prob=self.keep_prob)
                 for _ in range(layers)]
        cell = af.nn.rnn_cell.MultiRNNCell(cells)
        batch_size = af.shape(self.inputs)[0]
        self.initial_state = cell.zero_state(batch_size, af.float32)
        embedding = af.get_variable("embedding", [vocab_size, hidden])
        embedded = af.nn.embedding_lookup(embedding, self.inputs)
        outputs, self.final_state = af.nn.dynamic_rnn(cell, embedded,
                                                      initial_state=self.initial_state)
        logits = af.layers.dense(outputs, vocab_size, name="softmax")
        # sequence_loss with unit weights: the mean cross entropy over batch and time.
        self.loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
            labels=self.targets, logits=logits), name="loss")
        self.probabilities = af.nn.softmax(logits[:, -1, :] / self.temperature)
        self.global_step = af.train.get_or_create_global_step()
        self.learning_rate = af.train.exponential_decay(
            learning_rate, self.global_step, decay_steps, decay_rate, staircase=True)
        tvars = af.trainable_variables()
        grads, _ = af.clip_by_global_norm(af.gradients(self.loss, tvars), grad_clip)
        optimizer = af.train.AdamOptimizer(self.learning_rate)
        self.train_op = optimizer.apply_gradients(zip(grads, tvars), global_step=self.global_step)

    def state_feed(self, state_values):
        """feed_dict entries that carry ``state_values`` into ``initial_state``."""
        return dict(zip(_flatten(self.initial_state), _flatten(state_values)))


def _flatten(structure):
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in _flatten(item)]
    return [structure]


async def sample(sess, model, vocab, prime, length, temperature=0.8, seed=0):
    """Feed ``prime``, then draw ``length`` characters one at a time, carrying the state."""
    rng = np.random.default_rng(seed)
    state = await sess.run(model.initial_state, {model.inputs: np.zeros((1, 1), np.int32)})
    probabilities = None
    for char in prime:
        feed = {model.inputs: vocab.encode(char).reshape(1, 1), model.temperature: temperature,
                **model.state_feed(state)}
        probabilities, state = await sess.run([model.probabilities, model.final_state], feed)
    out = []
    for _ in range(length):
        p = probabilities[0].astype(np.float64)
        choice = int(rng.choice(len(p), p=p / p.sum()))
        out.append(choice)
        feed = {model.inputs: np.array([[choice]], np.int32), model.temperature: temperature,
                **model.state_feed(state)}
        probabilities, state = await sess.run([model.probabilities, model.final_state], feed)
    return prime + vocab.decode(out)


async def main(epochs=30, hidden=128, layers=2, batch_size=16, seq_len=50, text="full",
               sample_length=300, keep_prob=0.9, seed=1, show_progress=True):
    """Train, printing the loss per epoch; return ``(losses, sampled text)``."""
    text = corpus(text)
    vocab = Vocabulary(text)
    data = batches(vocab.encode(text), batch_size, seq_len)
    with af.Graph().as_default():
        af.set_random_seed(seed)
        model = CharRNN(len(vocab.chars), hidden=hidden, layers=layers,
                        decay_steps=max(1, 2 * len(data)))
        losses = []
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            columns = [TextColumn("epoch {task.fields[epoch]}"), BarColumn(),
                       TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn()]
            with Progress(*columns, disable=not show_progress) as progress:
                for epoch in range(1, epochs + 1):
                    task = progress.add_task("train", total=len(data), epoch=epoch, loss=0.0)
                    state = await sess.run(model.initial_state,
                                           {model.inputs: data[0][0]})
                    total = 0.0
                    for x, y in data:
                        feed = {model.inputs: x, model.targets: y, model.keep_prob: keep_prob,
                                **model.state_feed(state)}
                        loss, state, _ = await sess.run(
                            [model.loss, model.final_state, model.train_op], feed)
                        total += float(loss)
                        progress.update(task, advance=1, loss=float(loss))
                    losses.append(total / len(data))
                    progress.console.print(f"epoch {epoch}: mean loss {losses[-1]:.3f}")
            text_out = await sample(sess, model, vocab, "The ", sample_length)
    return losses, text_out


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=50)
    parser.add_argument("--text", choices=["full", "zen"], default="full")
    parser.add_argument("--sample-length", type=int, default=300)
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    losses, text = aio.run_trio(main, args.epochs, args.hidden, args.layers, args.batch_size,
                                args.seq_len, args.text, args.sample_length)
    print("\nsample:\n" + text)
