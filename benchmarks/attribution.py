"""Attribution patching against the exact grid, against TransformerLens, and edges against path patching.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/attribution.py            # both models, 6 x 20 tokens
    OMP_NUM_THREADS=1 python benchmarks/attribution.py --models gpt2 --n 6 --seq 20

Two models, each with clean inputs and corrupted twins (a few positions of each clean input replaced
by other tokens), scored in the denoising direction (TransformerLens's convention):

* ``gpt2``: a random GPT-2-architecture model (Hugging Face ``GPT2LMHeadModel``, 4 layers x 8 heads,
  d_model 256, vocabulary 2,000), the logit difference of two fixed tokens at the last position;
* ``brown``: the book's ``brown-gpt`` (4 x 4 heads) on held-out Brown Corpus windows (the shipped
  sample), the logit difference at the last position between the clean run's top token and the
  corrupted run's (its second choice where the two agree), per input.

Printed, all measured in this run (median wall time over ``--repeats`` interleaved runs after a
warm-up, one thread; also the process CPU time, less sensitive to other processes): the heads x
positions grid by :func:`headlab.analysis.attribution.attribution_patch`
against the exact :func:`headlab.analysis.patching.activation_patch` grid (time ratio; Spearman per
input, its mean, and of the batch mean; overlap of the top 20 cells; sign agreement where the exact
effect exceeds 0.05), integrated gradients (8 steps) likewise, TransformerLens 4's
``attribution_patch`` where it is installed (time ratio; largest difference of the values), and
the edges of :func:`headlab.analysis.edges.edge_attribution` against
:func:`headlab.analysis.patching.path_patch` on ``--edges`` of them drawn at random (Spearman of the
batch means, per input kind; time, and the time path patching would take for all of them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# As in benchmarks/sweep.py: keep benchmarks/ off sys.path (kernels.py would shadow a package).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != _HERE]

import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import headlab  # noqa: E402
from headlab.analysis.attribution import attribution_patch  # noqa: E402
from headlab.analysis.edges import INPUTS, edge_attribution  # noqa: E402
from headlab.analysis.patching import activation_patch, path_patch  # noqa: E402
from headlab.heads.model import HeadModel  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402

A, B = 3, 5


def corrupt(ids: torch.Tensor, vocab: int, k: int, seed: int) -> torch.Tensor:
    """``ids`` with ``k`` positions of each row (not the last) replaced by other random tokens."""
    g = torch.Generator().manual_seed(seed)
    out = ids.clone()
    for row in out:
        for p in torch.randperm(len(row) - 1, generator=g)[:k]:
            row[p] = (row[p] + torch.randint(1, vocab, (1,), generator=g)) % vocab
    return out


def gpt2_case(n: int, seq: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_head=8, n_embd=256, vocab_size=2000, n_positions=64,
                                       bos_token_id=0, eos_token_id=0)).eval()
    hm = HeadModel(model, name="random GPT-2 4x8 d256")
    clean = torch.randint(1, 2000, (n, seq), generator=torch.Generator().manual_seed(1))
    return hm, clean, corrupt(clean, 2000, 3, 2), Metric(LogitMetric("logit_diff", (A, B)))


def brown_case(n: int, seq: int):
    from deviating.data.brown_sample import SAMPLE_DIR, load_eval

    hm = headlab.load("brown-gpt")
    windows = load_eval(SAMPLE_DIR / "eval-v1024-c128-n128.safetensors").windows
    clean = windows[:n, :seq].clone()
    corrupted = corrupt(clean, hm.vocab_size, 3, 2)
    with torch.no_grad():
        top = [hm.forward(x)[:, -1].topk(2).indices for x in (clean, corrupted)]
    bad = torch.where(top[1][:, 0] == top[0][:, 0], top[0][:, 1], top[1][:, 0])
    return hm, clean, corrupted, Metric(LogitMetric("logit_diff", torch.stack([top[0][:, 0], bad], 1)))


def timed(fns: dict, repeats: int) -> tuple[dict, dict, dict]:
    """Each function run once to warm up, then ``repeats`` times interleaved: median wall seconds,
    median process CPU seconds (less sensitive to other processes on a shared machine), last result."""
    results = {name: fn() for name, fn in fns.items()}
    wall, cpu = {name: [] for name in fns}, {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            results[name] = fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return ({name: statistics.median(t) for name, t in wall.items()},
            {name: statistics.median(t) for name, t in cpu.items()}, results)


def agreement(exact: torch.Tensor, estimate: torch.Tensor, base: torch.Tensor) -> str:
    """Spearman per input (mean, min), of the batch mean, top-20 overlap, signs where |exact| > 0.05 and
    where |exact| is at least a tenth of the largest (batch means of the effects)."""
    exact = exact - base.reshape(-1, *[1] * (exact.dim() - 1))
    estimate = estimate - base.reshape(-1, *[1] * (estimate.dim() - 1))
    per = [spearmanr(e.flatten(), s.flatten())[0] for e, s in zip(exact, estimate)]
    em, sm = exact.mean(0).flatten(), estimate.mean(0).flatten()
    top = len(set(em.abs().topk(20).indices.tolist()) & set(sm.abs().topk(20).indices.tolist()))
    signs = [f"{int((em[big].sign() == sm[big].sign()).sum())}/{int(big.sum())}"
             for big in (em.abs() > 0.05, em.abs() >= 0.1 * em.abs().max())]
    return (f"Spearman per input mean {statistics.mean(per):.3f} (min {min(per):.3f}), batch mean "
            f"{spearmanr(em, sm)[0]:.3f}; top-20 overlap {top}/20; right sign on {signs[0]} cells with "
            f"|effect| > 0.05, {signs[1]} with |effect| >= 0.1 x the largest ({float(em.abs().max()):.3g})")


def tl_bridge(hm: HeadModel):
    """The same weights as a TransformerLens 4 ``TransformerBridge``, or ``None`` without TransformerLens."""
    try:
        from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:
        return None
    import tempfile

    words = Tokenizer(tok_models.WordLevel({f"w{i}": i for i in range(hm.vocab_size)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tempfile.mkdtemp()
    PreTrainedTokenizerFast(tokenizer_object=words, bos_token="w0", eos_token="w0", pad_token="w0",
                            unk_token="w0").save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, add_bos_token=True)
    return TransformerBridge.boot_transformers("gpt2", hf_model=hm.model, tokenizer=tokenizer, device="cpu")


def nodes(name: str, hm, clean, corrupted, metric, repeats: int) -> None:
    kw = dict(metric=metric, direction="denoising", positions=True)
    exact_time, exact_cpu, exact = timed({"exact": lambda: activation_patch(hm, clean, corrupted, **kw)},
                                         max(1, repeats // 3))
    times, cpu, out = timed({"attribution": lambda: attribution_patch(hm, clean, corrupted, **kw),
                             "ig8": lambda: attribution_patch(hm, clean, corrupted, steps=8, **kw)}, repeats)
    with torch.no_grad():
        base = metric.kind(hm.forward(corrupted), hm.tokenize(clean))  # the denoising base run
    cells = exact["exact"][0].numel()
    print(f"\n{name}: {clean.shape[0]} inputs x {clean.shape[1]} tokens, {cells} head x position cells, denoising")
    for label, e, t in (("wall", exact_time, times), ("CPU", exact_cpu, cpu)):
        print(f"  {label}: exact grid {e['exact']:.3f} s; attribution {t['attribution']:.4f} s "
              f"({e['exact'] / t['attribution']:.1f}x faster); IG 8 steps {t['ig8']:.4f} s "
              f"({e['exact'] / t['ig8']:.1f}x faster)")
    print(f"  attribution vs exact: {agreement(exact['exact'], out['attribution'], base)}")
    print(f"  IG (8 steps) vs exact: {agreement(exact['exact'], out['ig8'], base)}")
    bridge = tl_bridge(hm) if hm.arch.name == "gpt2" else None
    if bridge is None:
        print("  TransformerLens: " + ("not installed (pip install 'transformer-lens>=4.3,<5')"
                                       if hm.arch.name == "gpt2" else "not comparable (not a Hugging Face GPT-2)"))
        return
    from transformer_lens.tools.analysis import Node, attribution_patch as tl_attribution_patch

    def tl_metric(logits):
        logits = logits[0] if logits.dim() == 3 else logits
        return logits[-1, A] - logits[-1, B]

    tl_times, tl_cpu, tl_out = timed({"tl": lambda: tl_attribution_patch(bridge, clean, corrupted, tl_metric),
                              "ours": lambda: attribution_patch(hm, clean, corrupted, effect=True, **kw)}, repeats)
    ours = tl_out["ours"].mean(0)
    L, H, P = ours.shape
    diff = max(abs(tl_out["tl"].node_scores[Node("attn_head_out", p, l, h)] - float(ours[l, h, p]))
               for l in range(L) for h in range(H) for p in range(P))
    print(f"  TransformerLens attribution_patch {tl_times['tl']:.4f} s wall, {tl_cpu['tl']:.4f} s CPU; headlab "
          f"{tl_times['ours']:.4f} s wall, {tl_cpu['ours']:.4f} s CPU ({tl_times['tl'] / tl_times['ours']:.1f}x, "
          f"{tl_cpu['tl'] / tl_cpu['ours']:.1f}x faster); largest difference of the {ours.numel()} "
          f"batch-mean cells {diff:.1e} (largest cell {float(ours.abs().max()):.2g})")


def edges(hm, clean, corrupted, metric, sample: int) -> None:
    every = [(ls, hs, lr, hr, c) for lr in range(1, hm.n_layers) for ls in range(lr) for hs in range(hm.n_heads)
             for hr in range(hm.n_heads) for c in range(3)]
    chosen = [every[i] for i in torch.randperm(len(every), generator=torch.Generator().manual_seed(0))[:sample]]
    start = time.perf_counter()
    scores = edge_attribution(hm, clean, corrupted, metric=metric, effect=True)
    ours = time.perf_counter() - start
    with torch.no_grad():
        base = metric.kind(hm.forward(clean), hm.tokenize(clean))
    exact, estimate = [], []
    start = time.perf_counter()
    for ls, hs, lr, hr, c in chosen:
        exact.append(float((path_patch(hm, clean, corrupted, (ls, hs), (lr, hr), INPUTS[c], metric=metric)
                            - base).mean()))
        estimate.append(float(scores.heads[:, ls, hs, lr, hr, c].mean()))
    slow = time.perf_counter() - start
    by = {INPUTS[c]: spearmanr([e for e, k in zip(exact, chosen) if k[4] == c],
                               [e for e, k in zip(estimate, chosen) if k[4] == c])[0] for c in range(3)}
    print(f"  edges (noising): edge attribution scores all {len(every)} head -> q/k/v edges in {ours:.3f} s; "
          f"path patching {len(chosen)} of them (drawn at random) {slow:.1f} s, so all of them ~"
          f"{slow * len(every) / len(chosen):.0f} s; Spearman of batch means on those {len(chosen)}: "
          f"{spearmanr(exact, estimate)[0]:.3f} (q {by['q']:.3f}, k {by['k']:.3f}, v {by['v']:.3f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,brown", help="comma-separated: gpt2, brown")
    parser.add_argument("--n", type=int, default=6, help="inputs")
    parser.add_argument("--seq", type=int, default=20, help="tokens per input")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of the fast methods (a third as many "
                        "of the exact grid)")
    parser.add_argument("--edges", type=int, default=150, help="edges path-patched exactly (drawn at random)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cases = {"gpt2": gpt2_case, "brown": brown_case}
    for name in args.models.split(","):
        if name not in cases:
            raise SystemExit(f"unknown model {name!r}: choose from {', '.join(cases)}")
        hm, clean, corrupted, metric = cases[name](args.n, args.seq)
        nodes(hm.name, hm, clean, corrupted, metric, args.repeats)
        edges(hm, clean, corrupted, metric, args.edges)


if __name__ == "__main__":
    main()
