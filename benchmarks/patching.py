"""The batched heads x positions patching grid against the per-(head, position) loop a researcher would run.

    OMP_NUM_THREADS=1 python benchmarks/patching.py                  # 4 inputs x 16 tokens (CPU)
    OMP_NUM_THREADS=1 python benchmarks/patching.py --n 16 --seq 32  # the sweep benchmark's inputs
    python benchmarks/patching.py --device cuda --n 16 --seq 32

On the GPT-2-shape random model of ``benchmarks/sweep.py`` (6 layers x 12 heads, d_model 384, vocab
2,000), every (head, position) of the clean run gets the corrupted run's ``z`` (noising), scored by
the logit difference of two tokens at the last position, per input:

* ``activation_patch``: :func:`headlab.analysis.patching.activation_patch` with ``positions=True``
  (many patches per forward, the layers below each patch replayed);
* TransformerLens's idiom, where it is installed (``headlab[bench]``): one ``run_with_hooks`` per
  (layer, head, position) writing the corrupted ``blocks.{l}.attn.hook_z[:, p, h]``;
* otherwise a plain loop through headlab's own ``patch_z``, one forward per (head, position).

The values are compared, and the loop's time over the grid's printed (median wall and process CPU
time, interleaved runs after a warm-up, measured in the same run) beside the FLOP bound of
``benchmarks/peers.py`` (how much of the loop's work skipping the layers below a patch can save).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

# As in benchmarks/sweep.py: keep benchmarks/ off sys.path (kernels.py would shadow a package).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != _HERE]

import torch  # noqa: E402

from headlab.analysis.patching import activation_patch  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402


def _load_peers():
    """benchmarks/peers.py, loaded by path (benchmarks/ is kept off sys.path, see above)."""
    spec = importlib.util.spec_from_file_location("headlab_bench_peers", _HERE / "peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


peers = _load_peers()
A, B = 3, 5  # the logit difference scored at the last position


def tl_loop(bridge, clean: torch.Tensor, corrupted: torch.Tensor, n_layers: int, n_heads: int) -> torch.Tensor:
    """TransformerLens's idiom: ``(n, n_layers, n_heads, pos)``, one ``run_with_hooks`` per patch."""
    with torch.no_grad():
        _, cache = bridge.run_with_cache(corrupted, names_filter=lambda name: name.endswith("attn.hook_z"))
        out = torch.empty(clean.shape[0], n_layers, n_heads, clean.shape[1])
        for layer in range(n_layers):
            src = cache[f"blocks.{layer}.attn.hook_z"]
            for head in range(n_heads):
                for p in range(clean.shape[1]):
                    def patch(z, hook, head=head, p=p):
                        z[:, p, head] = src[:, p, head]
                        return z
                    logits = bridge.run_with_hooks(clean, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", patch)])
                    out[:, layer, head, p] = logits[:, -1, A] - logits[:, -1, B]
    return out


def patch_z_loop(hm, clean: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """The same grid through headlab's ``patch_z``, one forward per (head, position)."""
    _, cache = hm.run_with_cache(corrupted, names=("z",))
    out = torch.empty(clean.shape[0], hm.n_layers, hm.n_heads, clean.shape[1])
    for layer in range(hm.n_layers):
        for head in range(hm.n_heads):
            for p in range(clean.shape[1]):
                def fn(l, z, head=head, p=p):
                    z = z.clone()
                    z[:, p, head] = cache.z(l)[:, p, head]
                    return z
                with torch.no_grad(), hm.patch_z(fn, layers=[layer]):
                    logits = hm.forward(clean)
                out[:, layer, head, p] = (logits[:, -1, A] - logits[:, -1, B]).cpu()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=4, help="inputs (at most 16)")
    parser.add_argument("--seq", type=int, default=16, help="tokens per input (at most 32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}, "
          f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs")
    case = peers.build_case("gpt2")
    hm = case.hm
    hm.model.to(args.device)
    clean = case.batch["input_ids"][:args.n, :args.seq].to(args.device)
    corrupted = peers._random_ids(seed=1)["input_ids"][:args.n, :args.seq].to(args.device)
    metric = Metric(LogitMetric("logit_diff", (A, B)))
    fns = {"activation_patch": lambda: activation_patch(hm, clean, corrupted, metric=metric, positions=True)}
    version = peers.transformer_lens_version()
    if version is None:
        print("TransformerLens is not installed (pip install 'headlab[bench]'): comparing with a patch_z loop")
        fns["patch_z loop"] = lambda: patch_z_loop(hm, clean, corrupted)
    else:
        bridge = peers.transformer_lens_bridge(case)
        bridge.to(args.device)
        fns[f"TransformerLens {version} loop"] = lambda: tl_loop(bridge, clean, corrupted, hm.n_layers, hm.n_heads)
    n_patches = hm.n_layers * hm.n_heads * args.seq
    grid = fns["activation_patch"]()
    peer = list(fns)[1]
    reference = fns[peer]()  # also the warm-up
    err = float((grid - reference).abs().max())
    firsts = [l for l in range(hm.n_layers) for _ in range(hm.n_heads * args.seq)]
    bound = peers.flop_bound(hm, {"input_ids": clean, "attention_mask": torch.ones_like(clean)}, firsts)
    print(f"\n{case.label}: {n_patches} (head, position) patches x {args.n} inputs of {args.seq} tokens")
    print(f"  FLOP bound: {bound['block']:.2f}x reusing whole clean blocks below a patch, "
          f"{bound['gate']:.2f}x reusing up to its gate")
    print(f"  values: max |activation_patch - {peer}| = {err:.1e} (largest |value| {float(grid.abs().max()):.3f})")
    times = peers.timed(fns, args.repeats)
    for name, t in times.items():
        print(f"  {name:<34} {t['wall']:7.2f} s wall  {t['cpu']:7.2f} s CPU")
    ratio = {k: times[peer][k] / times["activation_patch"][k] for k in ("wall", "cpu")}
    print(f"  {peer + ' / activation_patch':<34} {ratio['wall']:5.2f}x wall, {ratio['cpu']:5.2f}x CPU")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": case.label, "patches": n_patches, "n": args.n, "seq": args.seq, "peer": peer,
                       "max_abs_diff": err, "times": times, "ratio": ratio, "bound": bound,
                       "load_before": load}, f, indent=2)


if __name__ == "__main__":
    main()
