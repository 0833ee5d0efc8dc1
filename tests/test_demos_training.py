"""The training demos run end to end (short forms): build, train, checkpoint, restore."""
import pathlib
import sys

import pytest

DEMOS = pathlib.Path(__file__).resolve().parents[1] / "demos"
sys.path.insert(0, str(DEMOS))
pytest.importorskip("sklearn")

import train_convnet  # noqa: E402
import train_digits  # noqa: E402


async def test_main_demo_trains_saves_and_restores(tmp_path):
    accuracy = await train_digits.main(steps=150, batch_size=128, logdir=str(tmp_path / "logs"),
                                       checkpoint_dir=str(tmp_path / "ckpt"))
    assert accuracy > 0.85
    assert list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert (tmp_path / "ckpt" / "checkpoint").exists()
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    events = event_accumulator.EventAccumulator(str(tmp_path / "logs"))
    events.Reload()
    assert events.Tags()["scalars"] == ["loss", "accuracy"]  # not loss_1, accuracy_1


async def test_convnet_demo_learns():
    assert await train_convnet.main(steps=60, batch_size=64) > 0.6
