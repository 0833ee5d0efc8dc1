"""The word2vec demo trains on 2 ps and 2 worker processes and finds neighbours (short form)."""
import pathlib
import sys

import numpy as np

DEMOS = pathlib.Path(__file__).resolve().parents[1] / "demos"
sys.path.insert(0, str(DEMOS))

import word2vec  # noqa: E402


def test_word2vec_loss_falls_and_neighbours_are_words_of_the_vocabulary():
    first, last, found = word2vec.main(steps=160, vocabulary=2000)
    assert last < 0.5 * first, (first, last)
    assert set(found) == set(word2vec.PROBES)
    for word, neighbours in found.items():
        assert len(neighbours) == 5 and word not in neighbours


def test_skipgram_pairs_are_within_the_window():
    ids = np.arange(1000, dtype=np.int64)
    centres, contexts = word2vec.skipgram_batch(ids, np.random.default_rng(0))
    distance = np.abs(contexts[:, 0] - centres)
    assert centres.shape == (word2vec.BATCH,) and contexts.shape == (word2vec.BATCH, 1)
    assert distance.min() >= 1 and distance.max() <= word2vec.WINDOW
