"""The char-RNN demo (a TF1 model ported with await/async with) trains and samples text."""
import pathlib
import sys

import pytest

DEMOS = pathlib.Path(__file__).resolve().parents[1] / "demos"
sys.path.insert(0, str(DEMOS))
pytest.importorskip("rich")

import char_rnn  # noqa: E402


async def test_char_rnn_loss_falls_and_it_samples_text():
    losses, text = await char_rnn.main(epochs=3, hidden=32, layers=2, batch_size=8, seq_len=20,
                                       text="zen", sample_length=40, show_progress=False)
    assert len(losses) == 3
    assert losses[-1] < losses[0] - 0.2, losses
    vocabulary = set(char_rnn.corpus("zen"))
    assert text.startswith("The ") and len(text) == 44
    assert set(text) <= vocabulary


def test_batches_are_parallel_streams_shifted_by_one():
    ids = __import__("numpy").arange(41)
    windows = char_rnn.batches(ids, batch_size=2, seq_len=5)
    assert len(windows) == 4
    x, y = windows[1]
    assert x.tolist() == [[5, 6, 7, 8, 9], [25, 26, 27, 28, 29]]
    assert (y == x + 1).all()
    with pytest.raises(ValueError, match="too short"):
        char_rnn.batches(ids[:5], batch_size=2, seq_len=5)
