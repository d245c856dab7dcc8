"""Probe (not a shipped recipe): does a 2-layer attention-only model on the Brown Corpus form
induction heads within a CPU budget?

    python scripts/brown_induction_probe.py VOCAB N_CTX BATCH LR STEPS INIT_STD LAYER_NORM OUT.jsonl
    python scripts/brown_induction_probe.py 2048 256 16 2e-3 4000 0 1 probe.jsonl   # the run reported

Every 250 steps it prints the validation loss, the loss on the first and second copy of a
repeated span of validation text and of random tokens, and each head's induction and
previous-token scores on the random repeats. Windows are cut from one text at a time (texts
kept whole). One torch thread. The corpus is read from the cache (python -m deviating fetch-brown).
"""
import json, math, sys, time, random
import torch
torch.set_num_threads(1)
from deviating.data import brown
from deviating.data.brown_tags import train_tokenizer
from headlab.models.gpt import GPT, GPTConfig
from deviating.data.head_scores import run_with_patterns, per_input_head_scores

cfg = dict(vocab=int(sys.argv[1]) if len(sys.argv) > 1 else 2048, n_ctx=int(sys.argv[2]) if len(sys.argv) > 2 else 256,
           d_model=128, n_heads=4, n_layers=2, batch=int(sys.argv[3]) if len(sys.argv) > 3 else 16,
           lr=float(sys.argv[4]) if len(sys.argv) > 4 else 2e-3, steps=int(sys.argv[5]) if len(sys.argv) > 5 else 4000,
           init_std=float(sys.argv[6]) if len(sys.argv) > 6 else 0.0, ln=bool(int(sys.argv[7])) if len(sys.argv) > 7 else True)
out = sys.argv[8] if len(sys.argv) > 8 else "brown_probe.jsonl"
t0 = time.time()
texts = brown.load()
parts = brown.split(texts)
def doc(t): return " ".join(brown.detokenize([w for w, _ in s])[0] for s in t.sentences)
train_docs = [doc(t) for t in parts["train"]]; val_docs = [doc(t) for t in parts["validation"]]
tok = train_tokenizer(train_docs, cfg["vocab"])
eot = 0
def ids(docs): return [torch.tensor(tok.encode(d).ids) for d in docs]
train_ids, val_ids = ids(train_docs), ids(val_docs)
print("tokens", sum(len(x) for x in train_ids), sum(len(x) for x in val_ids), "prep", round(time.time() - t0, 1), flush=True)
n = cfg["n_ctx"]
def window(stream, g):  # a window of one text, starting with eot, kept whole within the text
    d = stream[int(torch.randint(len(stream), (1,), generator=g))]
    s = int(torch.randint(max(1, len(d) - (n - 1)), (1,), generator=g))
    w = d[s:s + n - 1]
    if len(w) < n - 1: w = torch.cat([w, torch.zeros(n - 1 - len(w), dtype=torch.long)])
    return torch.cat([torch.tensor([eot]), w])
gv = torch.Generator().manual_seed(1234)
val = torch.stack([window(val_ids, gv) for _ in range(64)])
half = 64
rep = torch.stack([torch.cat([torch.tensor([eot]), w[1:half + 1], w[1:half + 1]]) for w in val[:32]])
grnd = torch.Generator().manual_seed(99)
rnd = torch.randint(1, cfg["vocab"], (32, half), generator=grnd); rnd = torch.cat([torch.zeros(32, 1, dtype=torch.long), rnd, rnd], 1)
kw = dict(d_vocab=cfg["vocab"], n_ctx=n, d_model=cfg["d_model"], n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], d_mlp=0, layer_norm=cfg["ln"])
if cfg["init_std"]: kw["init_std"] = cfg["init_std"]
torch.manual_seed(0)
model = GPT(GPTConfig(**kw))
opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), weight_decay=0.01)
warm = 100
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, cfg["steps"]) / cfg["steps"])))
g = torch.Generator().manual_seed(0)
def loss_of(x, mask=None):
    logits = model(x)
    l = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none").view(x.shape[0], -1)
    return l
log = open(out, "w")
for step in range(cfg["steps"] + 1):
    if step % 250 == 0:
        model.eval()
        with torch.no_grad():
            vl = float(loss_of(val).mean())
            lr_ = loss_of(rep); first, second = float(lr_[:, :half - 1].mean()), float(lr_[:, half:].mean())
            lrn = loss_of(rnd); rf, rs = float(lrn[:, :half - 1].mean()), float(lrn[:, half:].mean())
            _, pats = run_with_patterns(model, rnd)
            sc = per_input_head_scores(pats, rnd)
            ind = sc["induction"].nanmean(0).tolist(); prev = sc["previous_token"].mean(0).tolist()
        rec = dict(step=step, t=round(time.time() - t0), val=round(vl, 3), rep_first=round(first, 3), rep_second=round(second, 3),
                   rnd_first=round(rf, 3), rnd_second=round(rs, 3), induction=[[round(v, 2) for v in r] for r in ind], prev=[[round(v, 2) for v in r] for r in prev])
        print(json.dumps(rec), flush=True); log.write(json.dumps(rec) + "\n"); log.flush()
        model.train()
    if step == cfg["steps"]: break
    x = torch.stack([window(train_ids, g) for _ in range(cfg["batch"])])
    l = loss_of(x).mean()
    opt.zero_grad(); l.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step()
print("done", round(time.time() - t0), flush=True)
