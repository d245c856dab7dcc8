"""The Triton kernel on the parity cases of every backend (``fused_cases.py``).

On the CPU the kernel runs in Triton's interpreter. The interpreter is chosen when
``triton`` is *imported* (``TRITON_INTERPRET=1``), so the cases run in one subprocess
with that variable set; no other test sees it. Where CUDA exists, the same cases run
natively (marked ``gpu``). Without the ``triton`` package these tests are skipped
(``pip install headlab[kernels]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fused_cases import CASES, judge, problems

pytest.importorskip("triton", reason="the Triton kernel needs the kernels extra: pip install headlab[kernels]")

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    """Every case judged on the Triton backend in the interpreter, in one subprocess."""
    out = tmp_path_factory.mktemp("triton") / "cases.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(HERE / "fused_cases.py"), str(out)], env=env, cwd=HERE,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_interpreted_kernel_parity(case, interpreted):
    result = interpreted[case.name]["result"]
    assert not problems(case, result), problems(case, result)


# One fresh process without TRITON_INTERPRET (whatever this worker's environment holds) for the
# three checks that need one: a kernel imported under the interpreter (by any earlier test in this
# worker) is an InterpretedFunction, which nothing can compile. One process instead of three saves
# two starts of Python, torch and triton. Each check reports on its own line; one failing does
# not hide the others.
WITHOUT_INTERPRETER = """
import json, sys, traceback, torch
out = {}
def check(name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except BaseException:
        out[name] = {"ok": False, "error": traceback.format_exc()[-4000:]}
def cpu_tensors():
    from headlab.kernels.streaming import fused_attention
    q = torch.randn(1, 1, 8, 16)
    try:
        fused_attention(q, q, q, backend='triton')
    except RuntimeError as err:
        return str(err)
    return 'no error'
def compiled(dtype, causal):
    from headlab.kernels.triton_attention import compile_for_gpu
    kernel = compile_for_gpu(dtype, causal=causal)
    assert kernel.asm['cubin'], 'no cubin'
    assert 'tt.dot' in kernel.asm['ttir'], 'no tt.dot in the TTIR'
    return True
check('cpu tensors', cpu_tensors)
check('float32', lambda: compiled(torch.float32, True))
check('bfloat16', lambda: compiled(torch.bfloat16, False))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def without_interpreter() -> dict:
    """The three checks of :data:`WITHOUT_INTERPRETER`, run in one fresh process, by name."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", WITHOUT_INTERPRETER], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_cpu_tensors_without_the_interpreter_say_what_to_do(without_interpreter):
    """In a fresh process that imports triton without TRITON_INTERPRET, CPU tensors get a clear error."""
    result = without_interpreter["cpu tensors"]
    assert result["ok"], result["error"]
    assert "TRITON_INTERPRET=1" in result["value"], result["value"]


def test_triton_refuses_float64_and_odd_blocks():
    from headlab.kernels.triton_attention import triton_attention

    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="power of two"):
        triton_attention(q, q, q, causal=False, key_mask=None, statistics=None, scale=0.25, block_size=24)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_kernel_compiles_for_a_gpu_on_a_machine_without_one(dtype, without_interpreter):
    """The interpreter runs any Python; the compiler accepts only valid Triton (e.g. no plain-int
    globals in a kernel). Compiling for an H100/H200 down to its binary needs no GPU (float32
    causal, bfloat16 not: both branches of the mask)."""
    result = without_interpreter[dtype]
    assert result["ok"], result["error"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_native_kernel_parity(case):
    result = judge(case, "triton", device="cuda")
    assert not problems(case, result), problems(case, result)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_native_kernel_at_length_matches_sdpa():
    from headlab.kernels.streaming import fused_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1000, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out, _ = fused_attention(q, k, v, causal=True, backend="triton")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.float(), want.float(), rtol=0, atol=2e-2)
