#!/usr/bin/env python3
"""The Transformer base model in PyTorch, for side-by-side timing with psformer_gpu_bench.

Same model and batch as bench/gpu/gpu_bench.cc: d_model 512, 6 encoder + 6 decoder layers,
8 heads, d_ff 2048, dropout 0.1, post-LN (the paper's), a shared 37000-word embedding scaled by
sqrt(d_model) that is also the output projection, sinusoidal positions, label-smoothed (0.1)
cross entropy summed over target tokens; 390 sentences x 64 tokens on each side (~25k tokens).
Times forward + backward (no optimizer step: psformer's workers leave Adam to the servers) under
bf16 autocast (or fp32 / tf32 with --math), and prints one line in the C++ benchmark's format:
tokens per second, step time, TFLOPS and MFU (the same FLOP count), peak memory.
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"pytorch_transformer.py: needs PyTorch ({e}); the GPU machines have it, the development VMs do not")

PAD, BOS, EOS, RESERVED = 0, 1, 2, 4


class BaseTransformer(nn.Module):
    def __init__(self, vocab, d=512, heads=8, layers=6, d_ff=2048, dropout=0.1, max_len=512, norm_first=False):
        super().__init__()
        self.d = d
        self.embedding = nn.Embedding(vocab, d)
        nn.init.normal_(self.embedding.weight, 0.0, d ** -0.5)
        self.core = nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=layers, num_decoder_layers=layers,
                                   dim_feedforward=d_ff, dropout=dropout, batch_first=True, norm_first=norm_first)
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        rate = torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
        pe = torch.zeros(max_len, d, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position / rate)
        pe[:, 1::2] = torch.cos(position / rate)
        self.register_buffer("pe", pe.float(), persistent=False)

    def embed(self, ids):
        return self.dropout(self.embedding(ids) * math.sqrt(self.d) + self.pe[: ids.shape[1]])

    def forward(self, src, tgt_in):
        t = tgt_in.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf"), device=src.device), diagonal=1)
        src_pad = src == PAD
        tgt_pad = tgt_in == PAD
        y = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=causal, src_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return y @ self.embedding.weight.t()  # tied output projection, no bias


def model_flops(d, d_ff, layers, vocab, batch, s, t):
    """The count of gpu_bench.cc's ModelFlops: 3 x 2 x the forward's multiply-adds."""
    src, tgt = batch * s, batch * t
    encoder = layers * (src * (4 * d * d + 2 * d * d_ff) + 2 * batch * s * s * d)
    decoder = layers * (tgt * (6 * d * d + 2 * d * d_ff) + src * 2 * d * d + 2 * batch * t * t * d
                        + 2 * batch * t * s * d)
    return 6 * (encoder + decoder + tgt * d * vocab)


PEAKS = [("H100 PCIe", (756, 378, 51)), ("H100", (989, 495, 67)), ("H200", (989, 495, 67)),
         ("A100", (312, 156, 19.5))]


def peak_tflops(name, math_mode):
    index = {"bf16": 0, "tf32": 1, "fp32": 2}[math_mode]
    for key, peaks in PEAKS:
        if key in name:
            return peaks[index]
    return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math", choices=["bf16", "tf32", "fp32"], default="bf16")
    parser.add_argument("--sentences", type=int, default=390)
    parser.add_argument("--len", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("pytorch_transformer.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = args.math == "tf32"
    torch.backends.cudnn.allow_tf32 = args.math == "tf32"
    device = torch.device("cuda")
    torch.manual_seed(1)
    model = BaseTransformer(args.vocab).to(device).train()
    step_fn = torch.compile(model) if args.compile else model
    g = torch.Generator().manual_seed(1)
    n, length = args.sentences, args.len
    src = torch.randint(RESERVED, args.vocab, (n, length), generator=g)
    tgt_out = torch.randint(RESERVED, args.vocab, (n, length), generator=g)
    src[:, -1] = EOS
    tgt_out[:, -1] = EOS
    tgt_in = torch.cat([torch.full((n, 1), BOS), tgt_out[:, :-1]], dim=1)
    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)

    times, loss_value = [], 0.0
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.warmup + args.steps):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.math == "bf16"):
            logits = step_fn(src, tgt_in)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), tgt_out.view(-1), ignore_index=PAD,
                               label_smoothing=0.1, reduction="sum")
        loss.backward()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
        loss_value = loss.item() / tgt_out.numel()
    median = statistics.median(times)
    flops = model_flops(512, 2048, 6, args.vocab, n, length, length)
    tflops = flops / median / 1e12
    name = torch.cuda.get_device_name()
    peak = peak_tflops(name, args.math)
    mfu = f"{100 * tflops / peak:.2f}%" if peak else "n/a"
    params = sum(p.numel() for p in model.parameters())
    print(f'impl=pytorch-{torch.__version__}{"-compiled" if args.compile else ""} gpu="{name}" math={args.math} '
          f"params={params} batch={n}x{length} src_tokens={n * length} tgt_tokens={n * length} "
          f"step_ms={median * 1e3:.1f} (min {min(times) * 1e3:.1f}) tgt_tokens_per_s={n * length / median:.0f} "
          f"tflops={tflops:.1f} mfu={mfu} peak_mem_gib={torch.cuda.max_memory_allocated() / 2**30:.2f} "
          f"loss={loss_value:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
