"""Fault injection: exceptions raised at random points inside nested ablate/capture/patch contexts.

Each trial opens a random stack of the head interface's contexts on the organism (zero, mean
and resample ablations, gated blocks, captures of patterns and ``z``, ``patch_z``,
``patch_pattern``, a suspended reference pass), runs forwards inside it, and raises an
``InjectedFault`` at one random point: while a context is being entered, in the body, inside a
callback at some layer, or at the N-th module call of some forward (a process-wide hook that the
test owns, so the fault lands anywhere inside the model, between the head interface's own
hooks). After every trial the model must be exactly as before: no hook left (on the model or
in the process), nothing left open in the dispatcher, parameters and outputs bitwise equal.
"""

from __future__ import annotations

import contextlib
import random
import time

import pytest
import torch
from torch.nn.modules import module as torch_module

import headlab
from headlab.heads.ablation import Ablation
from headlab.heads.dispatch import live_routes

TRIALS = 1000
TEXTS = ["the dog sees the cat .", "a bird sings ."]
REFERENCE = ["the cat sleeps .", "the dogs see a bird .", "a cat runs ."]


class InjectedFault(Exception):
    """The exception the test raises on purpose."""


class Arm:
    """A process-wide module pre-hook that raises at the N-th module call after :meth:`at`."""

    def __init__(self):
        self.countdown = None
        self.fired = 0
        self.handle = torch_module.register_module_forward_pre_hook(self)

    def at(self, n):
        self.countdown = n

    def __call__(self, module, args):
        if self.countdown is None:
            return None
        self.countdown -= 1
        if self.countdown <= 0:
            self.countdown = None
            self.fired += 1
            raise InjectedFault(f"at a call of {type(module).__name__}")
        return None


def random_heads(rng, m, k=None):
    k = k or rng.randint(1, 4)
    return sorted({(rng.randrange(m.n_layers), rng.randrange(m.n_heads)) for _ in range(k)})


def random_context(rng, m, fault):
    """One context manager (not entered yet) and what it is, for the report."""
    kind = rng.choice(["zero", "mean", "resample", "gated", "capture", "patch_z", "patch_pattern", "suspended"])
    layers = sorted(rng.sample(range(m.n_layers), rng.randint(1, m.n_layers)))

    def callback(name):
        def fn(layer, x):
            if fault["where"] == name and fault["layer"] == layer:
                raise InjectedFault(f"in {name} at layer {layer}")
            return x * 1.0
        return fn

    if kind == "zero":
        return kind, m.ablate(random_heads(rng, m))
    if kind in ("mean", "resample"):
        return kind, m.ablate(random_heads(rng, m), Ablation(kind, REFERENCE, rng.randrange(3)))
    if kind == "gated":
        gate = (torch.rand(m.n_layers, m.n_heads, generator=torch.Generator().manual_seed(rng.randrange(99))) > 0.3)
        return kind, m.gated(gate.float())
    if kind == "capture":
        names = rng.choice([("pattern",), ("z",), ("pattern", "z"), ("result",)])
        return kind, m.capture(names, layers=layers)
    if kind == "patch_z":
        return kind, m.patch_z(callback("patch_z"), layers=layers)
    if kind == "patch_pattern":
        return kind, m.patch_pattern(callback("patch_pattern"), layers=layers)
    return kind, m.dispatcher.suspended()


def one_trial(rng, m, batch, arm):
    """Open a random stack, run forwards in it, raise one fault somewhere; returns the fault's place."""
    depth = rng.randint(1, 4)
    where = rng.choice(["enter", "body", "patch_z", "patch_pattern", "module call", "gradients", "none"])
    fault = {"where": where, "layer": rng.randrange(m.n_layers)}
    enter_fault_at = rng.randrange(depth)
    try:
        with contextlib.ExitStack() as stack:
            for i in range(depth):
                kind, ctx = random_context(rng, m, fault)
                if where == "enter" and i == enter_fault_at:
                    raise InjectedFault(f"while entering {kind}")
                if where == "module call" and rng.random() < 0.3:
                    arm.at(rng.randint(1, 60))  # maybe inside a reference pass of a mean ablation
                stack.enter_context(ctx)
            if where == "module call":
                arm.at(rng.randint(1, 60))
            with torch.no_grad():
                m(batch)
            if where == "gradients":
                arm.at(rng.randint(1, 120))  # forward or backward of the gradient pass
                m.head_gradients(batch)
            if where == "body":
                raise InjectedFault("in the body")
    except InjectedFault as err:
        return str(err).split(" at layer")[0].split(" of ")[0]
    finally:
        arm.at(None)
    return "no fault reached"


def test_random_faults_inside_nested_contexts_leave_the_model_exactly_as_it_was(record_property):
    torch.manual_seed(0)
    m = headlab.load("organism", device="cpu")
    batch = m.tokenize(TEXTS)
    params = {k: v.detach().clone() for k, v in m.model.state_dict().items()}
    with torch.no_grad():
        clean = m(batch)
    global_hooks = (len(torch_module._global_forward_pre_hooks), len(torch_module._global_forward_hooks))
    arm = Arm()
    rng = random.Random(17)
    places, leaks, changed = {}, 0, 0
    start, cpu = time.perf_counter(), time.process_time()
    try:
        for trial in range(TRIALS):
            place = one_trial(rng, m, batch, arm)
            places[place] = places.get(place, 0) + 1
            if m.hooks_installed or live_routes() or not m.dispatcher.idle or any(
                    mod._forward_pre_hooks or mod._forward_hooks for mod in m.model.modules()):
                leaks += 1
            with torch.no_grad():
                if not torch.equal(m(batch), clean):
                    changed += 1
            assert not leaks and not changed, f"trial {trial} ({place}): {leaks} leaks, {changed} changed"
    finally:
        arm.handle.remove()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(torch.equal(v, params[k]) for k, v in m.model.state_dict().items())
    assert all(p.grad is None for p in m.model.parameters())
    assert (len(torch_module._global_forward_pre_hooks), len(torch_module._global_forward_hooks)) == global_hooks
    faults = sum(n for p, n in places.items() if p != "no fault reached")
    assert faults >= TRIALS // 2, places  # most trials did raise somewhere
    assert len([p for p in places if p != "no fault reached"]) >= 5, places  # at many kinds of places
    record_property("summary", f"fault injection: {TRIALS} trials on the organism, {faults} faults raised at "
                               f"{len(places) - ('no fault reached' in places)} kinds of places, 0 leaked hooks, "
                               f"outputs bitwise identical after every trial ({cpu:.1f} s of CPU, {seconds:.1f} s wall)")


def test_a_fault_inside_a_reference_pass_leaves_the_outer_ablation_working():
    """A mean ablation opened inside another, whose reference pass fails: the outer one still applies."""
    m = headlab.load("organism", device="cpu")
    batch = m.tokenize(TEXTS)
    with torch.no_grad(), m.ablate([(1, 2)]):
        outer = m(batch)
    arm = Arm()
    try:
        with torch.no_grad(), m.ablate([(1, 2)]):
            arm.at(5)  # inside the reference forward of the inner ablation
            with pytest.raises(InjectedFault):
                with m.ablate([(0, 1)], Ablation("mean", reference=REFERENCE)):
                    pass
            assert torch.equal(m(batch), outer)
    finally:
        arm.handle.remove()
    assert m.hooks_installed == 0 and m.dispatcher.idle
