"""bench_vs_tf1's verdict over issue 34's four targets: the worst round decides, unrounded."""
import os
import sys

import pytest

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "bench"))
bench_vs_tf1 = pytest.importorskip("bench_vs_tf1")


def _round(trivial=0.2, over_ray=1.2, mlp=2.0, pull=5000.0, tf_trivial=0.8, tf_mlp=3.2,
           tf_pull=1000.0):
    return ({"trivial_ms": trivial, "trivial_over_ray": over_ray, "mlp_ms": mlp,
             "pull_mib_s": pull},
            {"trivial_ms": tf_trivial, "mlp_ms": tf_mlp, "pull_mib_s": tf_pull})


def test_a_round_just_over_a_limit_is_not_met_though_it_prints_as_the_limit():
    verdicts = {name: (value, met) for name, value, _, met in
                bench_vs_tf1.target_verdicts([_round(), _round(mlp=2.21, tf_mlp=3.14)])}
    value, met = verdicts["mlp_ms / TF1"]
    assert f"{value:.2f}" == "0.70" and value > 0.7 and not met
    assert verdicts["trivial_ms / TF1"] == (pytest.approx(0.25), True)
    assert verdicts["trivial_over_ray"] == (pytest.approx(1.2), True)
    assert verdicts["pull_mib_s / TF1"] == (pytest.approx(5.0), True)


def test_the_worst_round_decides_each_target():
    rounds = [_round(), _round(over_ray=1.6), _round(pull=2900.0)]
    met = {name: ok for name, _, _, ok in bench_vs_tf1.target_verdicts(rounds)}
    assert met == {"trivial_ms / TF1": True, "trivial_over_ray": False,
                   "mlp_ms / TF1": True, "pull_mib_s / TF1": False}


def test_without_tf_only_the_ray_target_is_judged():
    ours, _ = _round()
    assert [name for name, *_ in bench_vs_tf1.target_verdicts([(ours, None)])] == [
        "trivial_over_ray"]
    assert bench_vs_tf1.target_verdicts([({"trivial_ms": 0.2}, None)]) == []
