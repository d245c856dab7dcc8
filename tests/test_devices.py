"""``device="auto"``: CUDA, then MPS, then the CPU; devices this machine lacks are refused by name."""

from __future__ import annotations

import pytest
import torch

import headlab
from headlab.devices import resolve_device


def test_auto_picks_the_best_device_here():
    expected = "cuda" if torch.cuda.is_available() else (
        "mps" if torch.backends.mps.is_available() else "cpu")
    assert resolve_device("auto").type == expected
    assert resolve_device().type == expected


def test_explicit_devices_pass_through():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_is_named():
    with pytest.raises(ValueError, match="'cuda'.*no CUDA device"):
        resolve_device("cuda")


@pytest.mark.parametrize("bad", ["", "gpu", "tpu", "cuda:x"])
def test_unknown_devices_are_refused_by_name(bad):
    with pytest.raises((ValueError, TypeError), match=repr(bad) if bad else "device must be"):
        resolve_device(bad)


@pytest.mark.parametrize("bad", [None, 0, 1.5])
def test_non_strings_are_refused(bad):
    with pytest.raises(TypeError, match="device must be"):
        resolve_device(bad)


def test_load_auto_places_the_model():
    m = headlab.load("attn-only-1l", device="auto")
    assert next(m.model.parameters()).device.type == resolve_device("auto").type


def test_train_accepts_auto():
    from deviating.training.loop import train
    from deviating.training.recipes import RECIPES

    result = train(RECIPES["tiny-attn-2l"], steps=2, device="auto", progress=False)
    assert result.info["device"] == str(resolve_device("auto"))
