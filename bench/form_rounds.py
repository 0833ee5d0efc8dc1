"""Forms of one tree alternated in one process over the dense models' training steps (issue 37),
written once for the scripts that compare them: bench_ab_setting.py (any module setting),
bench_outside_ab.py (the same, in the time outside kernels), bench_gemm_splits.py (the GEMM
splits' constants), bench_compiled_applies.py (the applies' compiled loops).

A *form* is a name; ``use(form)`` switches the process to it (module attributes the code
reads; ``setting_forms`` makes it for ``--set MODULE:NAME=VALUE``). Each form has a session of
its own, built, compiled and warmed with its form in use, so a setting read when a plan is
compiled (a graph pass's switch) is measured too, not only one read at run time (one shared
session compiled its plan once, under the first form, and measured the others A/A: c41alone
found it); rounds alternate the forms in one process, so the machine's noise (its slow and fast
phases, bench/RESULTS.md) hits them alike. ``model_rounds`` runs ``rounds`` rounds of ``steps``
steps of each form in turn (the order reversed every other round where ``swap``), a round's
figure per form its median step and CPU (``bench_models.median_step_ms``) or a script's own
``measure``; ``seeded_losses`` gives each form's losses over three seeded steps from the same
weights, as hex of their float32 bits, so a script can say whether the forms agree bit for
bit; ``report`` prints a model's rounds and that check.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)


def build(af, model, seed=None):
    """``model``'s graph (bench_models' weights and data from seed 0) and what a step runs:
    ``(graph, feed, loss, train, init)``; ``seed`` the graph's random seed where given."""
    graph = af.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        if seed is not None:
            af.set_random_seed(seed)
        feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
        init = af.global_variables_initializer()
    return graph, dict(zip(feeds, bench_models.data(model, rng))), loss, train, init


async def model_rounds(af, model, forms, use, *, rounds, steps, warmup, swap=True,
                       config=None, measure=bench_models.median_step_ms):
    """``{form: [a round's figure per round]}`` for ``model``, a session a form (its plan
    compiled with the form in use); ``use(forms[0])`` on return. Warm-up: ``warmup`` steps of
    each form in turn. A round's figure: ``await measure(sess, fetches, feed, steps)``, by
    default ``(median wall ms, median CPU ms)``."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            runs = {}
            for form in forms:
                use(form)
                graph, feed, loss, train, init = build(af, model)
                sess = await stack.enter_async_context(af.Session(graph=graph, config=config))
                await sess.run(init)
                await sess.run([loss, train], feed)  # (compiled now, under this form)
                runs[form] = (sess, [loss, train], feed)
            for form in tuple(forms) * warmup:
                use(form)
                await runs[form][0].run(runs[form][1], runs[form][2])
            out = {form: [] for form in forms}
            for index in range(rounds):
                for form in forms if not swap or index % 2 == 0 else forms[::-1]:
                    use(form)
                    out[form].append(await measure(*runs[form], steps))
        finally:
            use(forms[0])
    return out


def setting_forms(specs):
    """``use(form)`` for forms "A" (the tree as it is) and "B" (each of ``specs``,
    ``MODULE:NAME=VALUE`` with a Python literal, set): bench_ab_setting.py's and
    bench_outside_ab.py's ``--set``."""
    settings = []
    for spec in specs:
        target, value = spec.split("=", 1)
        module_name, name = target.split(":")
        module = importlib.import_module(module_name)
        settings.append((module, name, getattr(module, name), ast.literal_eval(value)))

    def use(form):
        for module, name, a_value, b_value in settings:
            setattr(module, name, a_value if form == "A" else b_value)
    return use


async def seeded_losses(af, model, forms, use, steps=3):
    """``{form: hex of the float32 losses of `steps` seeded steps}``, each form from the same
    initial weights in its own session; ``use(forms[0])`` on return."""
    out = {}
    try:
        for form in forms:
            use(form)
            graph, feed, loss, train, init = build(af, model, seed=7)
            async with af.Session(graph=graph) as sess:
                await sess.run(init)
                values = [(await sess.run([loss, train], feed))[0] for _ in range(steps)]
            out[form] = np.float32(values).tobytes().hex()
    finally:
        use(forms[0])
    return out


def report(model, rounds, steps, losses, base=None):
    """Print each form's best and median round (with their ratios to ``base``'s where given),
    its rounds, and whether the seeded losses agree bit for bit."""
    print(f"{model}: {len(next(iter(rounds.values())))} rounds of {steps} steps, median step "
          f"ms (CPU ms)")
    if base is not None:
        base_best = min(w for w, _ in rounds[base])
        base_median = float(np.median([w for w, _ in rounds[base]]))
    for form, values in rounds.items():
        best = min(w for w, _ in values)
        median = float(np.median([w for w, _ in values]))
        ratios = (f" ({best / base_best:.3f}x {base})" if base is not None else "",
                  f" ({median / base_median:.3f}x)" if base is not None else "")
        print(f"  {form:>6}: best {best:.3f}{ratios[0]}, median {median:.3f}{ratios[1]}; "
              f"rounds " + " ".join(f"{w:.2f}({c:.1f})" for w, c in values))
    same = len(set(losses.values())) == 1
    print(f"  seeded losses over 3 steps: {'the same bits in every form' if same else losses}")
