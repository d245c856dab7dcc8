"""Two threads measuring one model at once get each the results they would get alone.

The sweep and patching replay the clean pass and tile the inputs by replacing blocks' forwards
(headlab.heads.replay); that replacement answers only the thread that made it. Before, a plain
forward in one thread picked up another thread's tiling: silently wrong numbers or obscure errors.
"""

from __future__ import annotations

import threading

import torch

from headlab import Metric, activation_patch, sweep
from tiny_models import make_model, random_batch

ROUNDS = 4


def _race(jobs: dict):
    """Run each job ``ROUNDS`` times in its own thread, all started together; results per job."""
    barrier = threading.Barrier(len(jobs))
    results: dict = {name: [] for name in jobs}
    errors: list = []

    def work(name, fn):
        try:
            barrier.wait()
            for _ in range(ROUNDS):
                results[name].append(fn())
        except BaseException as err:  # noqa: BLE001 - reported below with the job's name
            errors.append((name, repr(err)))

    threads = [threading.Thread(target=work, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return results


def test_two_sweeps_and_a_plain_forward_at_once_equal_each_alone():
    torch.set_num_threads(1)
    hm = make_model("gpt2")
    a, b = random_batch(hm, n=4, seq=9, seed=1), random_batch(hm, n=3, seq=6, seed=2)
    alone = {"sweep a": sweep(hm, a).effects, "sweep b": sweep(hm, b, metric=Metric("kl")).effects}
    with torch.no_grad():
        alone["forward"] = hm(b)
    jobs = {"sweep a": lambda: sweep(hm, a).effects, "sweep b": lambda: sweep(hm, b, metric=Metric("kl")).effects}
    with torch.no_grad():
        jobs["forward"] = lambda: hm(b)
        raced = _race(jobs)
    for name, values in raced.items():
        for got in values:
            torch.testing.assert_close(got, alone[name], atol=1e-6, rtol=1e-5, msg=f"{name} changed under a race")
    assert hm.hooks_installed == 0
    assert all("forward" not in block.__dict__ for block in hm.blocks)  # every block's own forward is back


def test_patching_in_one_thread_and_a_sweep_in_another_equal_each_alone():
    torch.set_num_threads(1)
    hm = make_model("llama_gqa")
    clean, corrupted = random_batch(hm, n=2, seq=7, seed=3), random_batch(hm, n=2, seq=7, seed=4)
    texts = random_batch(hm, n=3, seq=8, seed=5)
    patch = lambda: activation_patch(hm, clean, corrupted, metric="kl", positions=True, normalise=False)  # noqa: E731
    alone = {"patch": patch(), "sweep": sweep(hm, texts).effects}
    raced = _race({"patch": patch, "sweep": lambda: sweep(hm, texts).effects})
    for name, values in raced.items():
        for got in values:
            torch.testing.assert_close(got, alone[name], atol=1e-6, rtol=1e-5, msg=f"{name} changed under a race")
    assert hm.hooks_installed == 0
