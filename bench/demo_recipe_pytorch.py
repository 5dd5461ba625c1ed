#!/usr/bin/env python3
"""The demo's recipe in PyTorch: does the gain belong to the recipe or to psformer?

Trains the model and recipe of configs/bible.pbtxt with PyTorch on the same data (the same
SentencePiece model, the same length filters and token budget), on the CPU, and prints the same
curve bench/demo_study.sh prints: valid loss and greedy BLEU of the first 100 valid verses every
300 steps, against minutes (validations included, as there); at the end the greedy BLEU of the test split. BLEU is scored by
`psformer bleu` (sacreBLEU's 13a), so both sides are measured by the same ruler.

    build/export-venv/bin/python bench/demo_recipe_pytorch.py [--steps 4200] [--layers 2] [--pre-ln | --post-ln]
        [--lr-scale 0.5] [--warmup 800] [--tokens 1200] [--dropout 0.1] [--threads 2]

Needs PyTorch and sentencepiece (the export tests' venv, scripts/test makes it), data/bible and
data/bible-text (scripts/demo makes them) and build/psformer. Model: an encoder-decoder
Transformer (torch.nn.Transformer), d_model 256, --layers a side (2), d_ff 1024, 4 heads, sinusoidal
positions, one embedding shared by source, target and the output projection, scaled by
sqrt(d_model); label-smoothed (0.1) cross entropy averaged over target tokens; Adam (0.9, 0.98,
1e-9) with the paper's schedule times --lr-scale. Batches: pairs bucketed by target length (width 8),
at most --tokens padded tokens a side, shuffled every epoch. What it does not copy from psformer:
the initialisation (PyTorch's defaults, Xavier for the attention projections) and the order of
the batches (its own seed).
"""
import argparse
import warnings
import math
import os
import random
import subprocess
import sys
import tempfile
import time

try:
    import sentencepiece
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"demo_recipe_pytorch.py: needs PyTorch and sentencepiece ({e}): run it with build/export-venv/bin/python")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
from pytorch_transformer import BaseTransformer  # noqa: E402 (the model, shared with the GPU benchmark)

PAD, BOS, EOS = 0, 1, 2
warnings.filterwarnings("ignore", message="enable_nested_tensor")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_pairs(sp, prefix, max_length=200, max_ratio=3.0):
    """Encoded (source, target) pairs of PREFIX.en / PREFIX.es, filtered as `psformer prepare` does."""
    with open(prefix + ".en", encoding="utf-8") as f_src, open(prefix + ".es", encoding="utf-8") as f_tgt:
        src_lines, tgt_lines = f_src.read().splitlines(), f_tgt.read().splitlines()
    pairs = []
    for s, t in zip(src_lines, tgt_lines):
        a, b = sp.encode(s), sp.encode(t)
        if not a or not b or len(a) > max_length or len(b) > max_length:
            continue
        if max(len(a), len(b)) > max_ratio * min(len(a), len(b)):
            continue
        pairs.append((a, b))
    return pairs


def make_batches(pairs, tokens, width=8, seed=1):
    """Index lists of batches of at most `tokens` padded tokens a side (bos/eos counted): pairs sorted
    by target-length bucket, then source and target length (ties at random), cut where the bucket
    changes or the next pair would not fit, as psformer's LengthBucketSampler does."""
    rng = random.Random(seed)
    tie = [rng.random() for _ in pairs]
    lengths = [(len(s) + 2, len(t) + 2) for s, t in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (lengths[i][1] // width, lengths[i][0], lengths[i][1], tie[i]))
    batches, current, bucket, src_max, tgt_max = [], [], None, 0, 0
    for i in order:
        s, t = lengths[i]
        new_src, new_tgt = max(src_max, s), max(tgt_max, t)
        fits = new_src * (len(current) + 1) <= tokens and new_tgt * (len(current) + 1) <= tokens
        if current and (t // width != bucket or not fits):
            batches.append(current)
            current, new_src, new_tgt = [], s, t
        current.append(i)
        bucket, src_max, tgt_max = t // width, new_src, new_tgt
    if current:
        batches.append(current)
    return batches


def pad(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long)


class Model(BaseTransformer):
    """bench/gpu/pytorch_transformer.py's model at the demo's size, pre- or post-LN, with the
    encoder and decoder callable apart (for greedy decoding)."""

    def __init__(self, vocab, d, layers, d_ff, heads, dropout, pre_ln):
        super().__init__(vocab, d=d, heads=heads, layers=layers, d_ff=d_ff, dropout=dropout, norm_first=pre_ln)
        self.core.encoder.enable_nested_tensor = False
        if not pre_ln:  # the paper's stacks end with the last layer's own LayerNorm, no extra one
            self.core.encoder.norm = None
            self.core.decoder.norm = None

    def encode(self, src):
        return self.core.encoder(self.embed(src), src_key_padding_mask=src.eq(PAD))

    def decode(self, tgt_in, memory, src):
        n = tgt_in.size(1)
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)  # True: may not attend
        h = self.core.decoder(self.embed(tgt_in), memory, tgt_mask=causal, tgt_is_causal=True,
                              tgt_key_padding_mask=tgt_in.eq(PAD), memory_key_padding_mask=src.eq(PAD))
        return h @ self.embedding.weight.t()

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), src)


@torch.no_grad()
def greedy(model, sp, sources, batch=64):
    """Greedy translations of `sources` (encoded), at most len + 50 tokens each, as text."""
    model.eval()
    out = [None] * len(sources)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        src = pad([sources[i] + [EOS] for i in idx])
        memory = model.encode(src)
        ys = torch.full((len(idx), 1), BOS, dtype=torch.long)
        done = torch.zeros(len(idx), dtype=torch.bool)
        for _ in range(src.size(1) + 50):
            nxt = model.decode(ys, memory, src)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
            done |= nxt.eq(EOS)
            if done.all():
                break
        for row, i in enumerate(idx):
            ids = [t for t in ys[row, 1:].tolist() if t not in (PAD,)]
            out[i] = sp.decode(ids[: ids.index(EOS)] if EOS in ids else ids)
    model.train()
    return out


def bleu(hyps, ref_file, n):
    """`psformer bleu` of `hyps` against the first `n` lines of `ref_file`: (score, its line)."""
    with tempfile.TemporaryDirectory() as tmp:
        hyp, ref = os.path.join(tmp, "hyp"), os.path.join(tmp, "ref")
        with open(hyp, "w", encoding="utf-8") as f:
            f.write("\n".join(hyps) + "\n")
        with open(ref_file, encoding="utf-8") as f_in, open(ref, "w", encoding="utf-8") as f:
            f.write("\n".join(f_in.read().splitlines()[:n]) + "\n")
        line = subprocess.run([os.path.join(ROOT, "build/psformer"), "bleu", "--hyp", hyp, "--ref", ref],
                              check=True, capture_output=True, text=True).stdout.strip()
    return float(line.split()[2]), line


@torch.no_grad()
def valid_loss(model, pairs, batches, smoothing):
    model.eval()
    total, tokens = 0.0, 0
    for b in batches:
        src = pad([pairs[i][0] + [EOS] for i in b])
        tgt = pad([[BOS] + pairs[i][1] + [EOS] for i in b])
        logits = model(src, tgt[:, :-1])
        gold = tgt[:, 1:]
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=PAD,
                                 label_smoothing=smoothing, reduction="sum").item()
        tokens += gold.ne(PAD).sum().item()
    model.train()
    return total / tokens


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4200)
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    p.add_argument("--valid-every", type=int, default=300)
    norm = p.add_mutually_exclusive_group()
    norm.add_argument("--pre-ln", dest="pre_ln", action="store_true", default=True)
    norm.add_argument("--post-ln", dest="pre_ln", action="store_false")
    p.add_argument("--lr-scale", type=float, default=0.5)
    p.add_argument("--warmup", type=int, default=800)
    p.add_argument("--tokens", type=int, default=1200)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--smoothing", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=os.path.join(ROOT, "data/bible"))
    p.add_argument("--text", default=os.path.join(ROOT, "data/bible-text"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)

    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(a.data, "spm.model"))
    train = read_pairs(sp, os.path.join(a.text, "train"))
    valid = read_pairs(sp, os.path.join(a.text, "valid"))
    with open(os.path.join(a.text, "valid.en"), encoding="utf-8") as f:
        valid_sources = [sp.encode(s) for s in f.read().splitlines()[:100]]
    with open(os.path.join(a.text, "test.en"), encoding="utf-8") as f:
        test_sources = [sp.encode(s) for s in f.read().splitlines()]
    batches = make_batches(train, a.tokens)
    valid_batches = make_batches(valid, 4000)
    print(f"{len(train)} training pairs, {len(batches)} batches an epoch; {a.layers}+{a.layers} layers, {'pre' if a.pre_ln else 'post'}-LN, "
          f"lr scale {a.lr_scale}, warm-up {a.warmup}, <= {a.tokens} tokens a side, dropout {a.dropout}", flush=True)

    model = Model(sp.get_piece_size(), 256, a.layers, 1024, 4, a.dropout, a.pre_ln)
    print(f"parameters: {sum(t.numel() for t in model.parameters())}", flush=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: a.lr_scale * 256 ** -0.5 * min((s + 1) ** -0.5, (s + 1) * a.warmup ** -1.5))
    start, step, epoch = time.time(), 0, 0
    while step < a.steps:
        order = list(range(len(batches)))
        random.Random(a.seed * 1000 + epoch).shuffle(order)
        for k in order:
            b = batches[k]
            src = pad([train[i][0] + [EOS] for i in b])
            tgt = pad([[BOS] + train[i][1] + [EOS] for i in b])
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=PAD,
                                   label_smoothing=a.smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            if step % a.valid_every == 0 or step == a.steps:
                minutes = (time.time() - start) / 60
                score, _ = bleu(greedy(model, sp, valid_sources), os.path.join(a.text, "valid.es"), 100)
                print(f"  step {step:5d}  {minutes:5.1f} min  valid loss {valid_loss(model, valid, valid_batches, a.smoothing):.3f}"
                      f"  valid BLEU {score:.2f}  (train loss {loss.item():.3f})", flush=True)
            if step == a.steps:
                break
        epoch += 1
    print(f"trained {step} steps in {(time.time() - start) / 60:.1f} min (validations included)", flush=True)
    _, line = bleu(greedy(model, sp, test_sources), os.path.join(a.text, "test.es"), len(test_sources))
    print(f"  test (greedy, final weights): {line}", flush=True)


if __name__ == "__main__":
    main()
