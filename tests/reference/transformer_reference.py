#!/usr/bin/python3
"""An independent NumPy float64 forward of the Transformer of "Attention Is All You Need".

Written from the paper (docs/paper.md) and the documented contracts the C++ model must meet
(the flat parameter order of common/param_layout.h, label smoothing as PyTorch defines it), not
from the C++ code. It writes transformer_fixture.txt: for a post-LN and a pre-LN model, the
weights, a padded batch, the logits, the summed loss and a few gradient entries by central
differences. tests/model_reference_test.cc checks the C++ model (fp32) against it.

Regenerate (needs NumPy; Debian's python3-numpy is enough):
    /usr/bin/python3 tests/reference/transformer_reference.py > tests/reference/transformer_fixture.txt
The output is deterministic (fixed seeds), so regenerating gives the same file.
"""
import numpy as np

PAD, BOS, EOS = 0, 1, 2
LN_EPS = 1e-5


def param_shapes(layers, d, f, vocab, pre_ln):
    """(name, rows, cols) in the documented order of the flat vector."""
    shapes = [("embedding", vocab, d)]

    def attention(prefix, fused):
        if fused:
            shapes.extend([(prefix + "w_qkv", d, 3 * d), (prefix + "b_qkv", 1, 3 * d)])
        else:
            shapes.extend([(prefix + "w_q", d, d), (prefix + "b_q", 1, d),
                           (prefix + "w_kv", d, 2 * d), (prefix + "b_kv", 1, 2 * d)])
        shapes.extend([(prefix + "w_o", d, d), (prefix + "b_o", 1, d)])

    def norm(prefix):
        shapes.extend([(prefix + "gamma", 1, d), (prefix + "beta", 1, d)])

    def ffn(prefix):
        shapes.extend([(prefix + "w1", d, f), (prefix + "b1", 1, f), (prefix + "w2", f, d), (prefix + "b2", 1, d)])

    for l in range(layers):
        p = "encoder.%d." % l
        attention(p + "self_attn.", True)
        norm(p + "ln1.")
        ffn(p + "ffn.")
        norm(p + "ln2.")
    if pre_ln:
        norm("encoder.final_ln.")
    for l in range(layers):
        p = "decoder.%d." % l
        attention(p + "self_attn.", True)
        norm(p + "ln1.")
        attention(p + "cross_attn.", False)
        norm(p + "ln2.")
        ffn(p + "ffn.")
        norm(p + "ln3.")
    if pre_ln:
        norm("decoder.final_ln.")
    return shapes


def unflatten(flat, shapes):
    params, offset = {}, 0
    for name, rows, cols in shapes:
        n = rows * cols
        params[name] = flat[offset:offset + n].reshape(rows, cols) if rows > 1 else flat[offset:offset + n]
        offset += n
    return params


def layer_norm(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + LN_EPS) + beta


def positional_encoding(length, d):
    pos = np.arange(length)[:, None].astype(np.float64)
    two_i = (np.arange(d) // 2 * 2).astype(np.float64)
    angle = pos / np.power(10000.0, two_i / d)
    return np.where(np.arange(d) % 2 == 0, np.sin(angle), np.cos(angle))


def attention(q_in, kv_in, wq, bq, wk, bk, wv, bv, wo, bo, heads, allowed):
    """allowed: (B, Tq, Tk) booleans. Heads are consecutive blocks of d/h columns."""
    b, tq, d = q_in.shape
    tk = kv_in.shape[1]
    dk = d // heads

    def split(x, t):
        return x.reshape(b, t, heads, dk).transpose(0, 2, 1, 3)

    q, k, v = split(q_in @ wq + bq, tq), split(kv_in @ wk + bk, tk), split(kv_in @ wv + bv, tk)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dk)
    scores = np.where(allowed[:, None, :, :], scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, tq, d)
    return context @ wo + bo


def self_attention(x, p, prefix, heads, allowed):
    w, bias = p[prefix + "w_qkv"], p[prefix + "b_qkv"]
    d = x.shape[-1]
    return attention(x, x, w[:, :d], bias[:d], w[:, d:2 * d], bias[d:2 * d], w[:, 2 * d:], bias[2 * d:],
                     p[prefix + "w_o"], p[prefix + "b_o"], heads, allowed)


def cross_attention(x, memory, p, prefix, heads, allowed):
    wkv, bkv = p[prefix + "w_kv"], p[prefix + "b_kv"]
    d = x.shape[-1]
    return attention(x, memory, p[prefix + "w_q"], p[prefix + "b_q"], wkv[:, :d], bkv[:d], wkv[:, d:], bkv[d:],
                     p[prefix + "w_o"], p[prefix + "b_o"], heads, allowed)


def feed_forward(x, p, prefix):
    return np.maximum(0.0, x @ p[prefix + "w1"] + p[prefix + "b1"]) @ p[prefix + "w2"] + p[prefix + "b2"]


def sublayer(x, fn, p, norm_prefix, pre_ln):
    gamma, beta = p[norm_prefix + "gamma"], p[norm_prefix + "beta"]
    if pre_ln:
        return x + fn(layer_norm(x, gamma, beta))
    return layer_norm(x + fn(x), gamma, beta)


def forward(flat, cfg, src, tgt_in, tgt_out):
    """Returns (logits (B, T, V), summed label-smoothed loss)."""
    layers, d, f, heads, vocab, eps, pre_ln = (cfg[k] for k in
                                                ("layers", "d_model", "d_ff", "heads", "vocab", "eps", "pre_ln"))
    p = unflatten(flat, param_shapes(layers, d, f, vocab, pre_ln))
    emb = p["embedding"]
    b, s = src.shape
    t = tgt_in.shape[1]
    src_keys = np.broadcast_to((src != PAD)[:, None, :], (b, s, s))
    x = emb[src] * np.sqrt(d) + positional_encoding(s, d)
    for l in range(layers):
        pre = "encoder.%d." % l
        x = sublayer(x, lambda h: self_attention(h, p, pre + "self_attn.", heads, src_keys), p, pre + "ln1.", pre_ln)
        x = sublayer(x, lambda h: feed_forward(h, p, pre + "ffn."), p, pre + "ln2.", pre_ln)
    if pre_ln:
        x = layer_norm(x, p["encoder.final_ln.gamma"], p["encoder.final_ln.beta"])
    memory = x
    causal = np.tril(np.ones((t, t), dtype=bool))[None, :, :] & (tgt_in != PAD)[:, None, :]
    cross_keys = np.broadcast_to((src != PAD)[:, None, :], (b, t, s))
    y = emb[tgt_in] * np.sqrt(d) + positional_encoding(t, d)
    for l in range(layers):
        pre = "decoder.%d." % l
        y = sublayer(y, lambda h: self_attention(h, p, pre + "self_attn.", heads, causal), p, pre + "ln1.", pre_ln)
        y = sublayer(y, lambda h: cross_attention(h, memory, p, pre + "cross_attn.", heads, cross_keys), p,
                     pre + "ln2.", pre_ln)
        y = sublayer(y, lambda h: feed_forward(h, p, pre + "ffn."), p, pre + "ln3.", pre_ln)
    if pre_ln:
        y = layer_norm(y, p["decoder.final_ln.gamma"], p["decoder.final_ln.beta"])
    logits = y @ emb.T
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, tgt_out[:, :, None], axis=-1)[:, :, 0]
    smooth = -log_probs.mean(axis=-1)
    token_loss = (1 - eps) * nll + eps * smooth
    return logits, float(np.sum(np.where(tgt_out != PAD, token_loss, 0.0)))


def make_batch():
    # Two sentence pairs of different lengths: padding on both sides, odd lengths.
    src = np.array([[5, 9, 7, 12, EOS], [6, 11, EOS, PAD, PAD]])
    tgt_out = np.array([[8, 4, 10, EOS], [12, EOS, PAD, PAD]])
    tgt_in = np.array([[BOS, 8, 4, 10], [BOS, 12, PAD, PAD]])
    return src, tgt_in, tgt_out


def write_case(name, cfg, seed):
    rng = np.random.default_rng(seed)
    shapes = param_shapes(cfg["layers"], cfg["d_model"], cfg["d_ff"], cfg["vocab"], cfg["pre_ln"])
    parts = []
    for pname, rows, cols in shapes:
        base = 1.0 if pname.endswith("gamma") else 0.0
        parts.append(base + rng.normal(0.0, 0.3, rows * cols))
    # The C++ side holds fp32 parameters: use exactly those values.
    flat = np.concatenate(parts).astype(np.float32).astype(np.float64)
    src, tgt_in, tgt_out = make_batch()
    logits, loss = forward(flat, cfg, src, tgt_in, tgt_out)

    # Gradient entries: per tensor, the largest of 4 sampled central differences.
    h = 1e-5
    grads = []
    offset = 0
    for pname, rows, cols in shapes:
        best = None
        for index in rng.choice(rows * cols, size=min(4, rows * cols), replace=False):
            i = offset + int(index)
            saved = flat[i]
            flat[i] = saved + h
            up = forward(flat, cfg, src, tgt_in, tgt_out)[1]
            flat[i] = saved - h
            down = forward(flat, cfg, src, tgt_in, tgt_out)[1]
            flat[i] = saved
            g = (up - down) / (2 * h)
            if best is None or abs(g) > abs(best[1]):
                best = (i, g)
        if abs(best[1]) > 1e-2:
            grads.append(best)
        offset += rows * cols

    print("case", name)
    print("config", cfg["layers"], cfg["d_model"], cfg["d_ff"], cfg["heads"], cfg["vocab"], repr(cfg["eps"]),
          int(cfg["pre_ln"]))
    print("batch", *src.shape, tgt_in.shape[1])
    print("src", *src.ravel())
    print("tgt_in", *tgt_in.ravel())
    print("tgt_out", *tgt_out.ravel())
    print("params", flat.size, *(repr(float(v)) for v in flat))
    print("logits", logits.size, *(repr(float(v)) for v in logits.ravel()))
    print("loss", repr(loss))
    print("grads", len(grads), *("%d %r" % (i, float(g)) for i, g in grads))
    print("end")


def main():
    print("# Written by tests/reference/transformer_reference.py; regenerate with the command in its docstring.")
    base = dict(layers=2, d_model=8, d_ff=16, heads=2, vocab=13, eps=0.1)
    write_case("post_ln", dict(base, pre_ln=False), seed=1)
    write_case("pre_ln", dict(base, pre_ln=True), seed=2)


if __name__ == "__main__":
    main()
