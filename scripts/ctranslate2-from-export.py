#!/usr/bin/env python3
"""Builds a CTranslate2 model from a `psformer export` directory, with the decoder started from
psformer's learned <s> (bos) embedding.

A POST_LN model's export is a MarianMTModel, a PRE_LN model's a Pegasus model (pre-norm, a final
LayerNorm per stack); both become a TransformerSpec. CTranslate2's own
`ct2-transformers-converter` reads a MarianMTModel as Marian trains it: it
starts the decoder from a zero embedding and drops a trailing <pad> from the vocabulary. A
psformer model starts from <s>, so that converter would feed it an input it never saw; this one
builds the same TransformerSpec from the exported tensors with decoder_start_token "<s>" and the
vocabulary as it is (docs/export.md). Needs ctranslate2, safetensors and numpy, not torch.

Usage: ctranslate2-from-export.py EXPORT_DIR OUT_DIR [--quantization int8]
Translate with: ctranslate2.Translator(OUT_DIR).translate_batch([pieces + ["</s>"]], beam_size=4,
max_decoding_length=max_positions - 1): the model has no positions beyond max_positions (config.json's
max_position_embeddings), and CTranslate2's default cap (256) would run past them.
"""
import argparse
import importlib
import json
import os
import shutil
import sys

# The packages the conversion needs, imported only once the command line and the export directory
# are checked (load_packages), so that a mistake there is said as such and not as a traceback.
PACKAGES = ("numpy", "ctranslate2", "safetensors")
np = common_spec = transformer_spec = load_file = None


def load_packages():
    global np, common_spec, transformer_spec, load_file
    missing = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        sys.exit(f"error: this script needs the Python packages {', '.join(PACKAGES)} (not torch); "
                 f"missing here: {', '.join(missing)}. Install them with: "
                 f"python3 -m pip install {' '.join(PACKAGES)}")
    np = importlib.import_module("numpy")
    specs = importlib.import_module("ctranslate2.specs")
    common_spec, transformer_spec = specs.common_spec, specs.transformer_spec
    load_file = importlib.import_module("safetensors.numpy").load_file


def linear(spec, weights, name, bias=True):
    spec.weight = weights[name + ".weight"]
    if bias:
        spec.bias = weights[name + ".bias"]


def fused(spec, weights, names):
    spec.weight = np.concatenate([weights[n + ".weight"] for n in names])
    spec.bias = np.concatenate([weights[n + ".bias"] for n in names])


def norm(spec, weights, name):
    spec.gamma = weights[name + ".weight"]
    spec.beta = weights[name + ".bias"]


def set_layer(layer, weights, prefix, cross):
    """One encoder (cross=False) or decoder (cross=True) layer. The names are the same in both
    architectures; where each LayerNorm sits (after or before its sub-layer) is the spec's pre_norm."""
    attn = prefix + "self_attn."
    fused(layer.self_attention.linear[0], weights, [attn + p for p in ("q_proj", "k_proj", "v_proj")])
    linear(layer.self_attention.linear[1], weights, attn + "out_proj")
    norm(layer.self_attention.layer_norm, weights, prefix + "self_attn_layer_norm")
    if cross:
        attn = prefix + "encoder_attn."
        linear(layer.attention.linear[0], weights, attn + "q_proj")
        fused(layer.attention.linear[1], weights, [attn + "k_proj", attn + "v_proj"])
        linear(layer.attention.linear[2], weights, attn + "out_proj")
        norm(layer.attention.layer_norm, weights, prefix + "encoder_attn_layer_norm")
    linear(layer.ffn.linear_0, weights, prefix + "fc1")
    linear(layer.ffn.linear_1, weights, prefix + "fc2")
    norm(layer.ffn.layer_norm, weights, prefix + "final_layer_norm")


def build_spec(export_dir):
    with open(os.path.join(export_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    # A POST_LN model exports as MarianMTModel, a PRE_LN one as Pegasus (docs/export.md).
    model_type = config.get("model_type")
    if model_type not in ("marian", "pegasus") or config.get("normalize_before"):
        sys.exit(f"error: {export_dir}: not a psformer export (a post-LN MarianMTModel or a Pegasus config)")
    pre_norm = model_type == "pegasus"
    weights = load_file(os.path.join(export_dir, "model.safetensors"))
    spec = transformer_spec.TransformerSpec.from_config(
        (config["encoder_layers"], config["decoder_layers"]),
        config["encoder_attention_heads"],
        pre_norm=pre_norm,
        activation=common_spec.Activation.RELU,
    )
    shared = weights["model.shared.weight"]
    for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        stack.scale_embeddings = True  # by sqrt(d_model), as scale_embedding says
        stack.position_encodings.encodings = weights[f"model.{side}.embed_positions.weight"]
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = shared
        for i, layer in enumerate(stack.layer):
            set_layer(layer, weights, f"model.{side}.layers.{i}.", cross=side == "decoder")
        if pre_norm:  # each stack's final LayerNorm
            norm(stack.layer_norm, weights, f"model.{side}.layer_norm")
    spec.decoder.projection.weight = shared
    if np.any(weights["final_logits_bias"]):
        spec.decoder.projection.bias = weights["final_logits_bias"].reshape(-1)
    spec.decoder.start_from_zero_embedding = False

    with open(os.path.join(export_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    tokens = [piece for piece, _ in sorted(vocab.items(), key=lambda item: item[1])]
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    ids = {name: tokens[config[name + "_token_id"]] for name in ("bos", "eos", "decoder_start")}
    spec.config.bos_token = ids["bos"]
    spec.config.eos_token = ids["eos"]
    spec.config.decoder_start_token = ids["decoder_start"]
    with open(os.path.join(export_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        spec.config.unk_token = json.load(f)["unk_token"]
    spec.config.layer_norm_epsilon = 1e-5
    return spec


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", help="directory written by psformer export")
    parser.add_argument("out_dir", help="CTranslate2 model directory to write (must not exist)")
    parser.add_argument("--quantization", default=None, help="int8, int8_float32, float16, ... (default: float32)")
    args = parser.parse_args()
    for name in ("config.json", "model.safetensors", "vocab.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(args.export_dir, name)):
            sys.exit(f"error: {args.export_dir} has no {name}: not a directory written by psformer export")
    if os.path.exists(args.out_dir):
        sys.exit(f"error: {args.out_dir} exists; choose a new directory")
    load_packages()
    spec = build_spec(args.export_dir)
    spec.validate()
    spec.optimize(quantization=args.quantization)
    # Written beside the target and renamed, so that a failure leaves no partial model.
    out = os.path.normpath(args.out_dir)
    temp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp-{os.getpid()}")
    os.makedirs(temp)
    try:
        spec.save(temp)
        os.rename(temp, out)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    print(f"wrote {args.out_dir}")


if __name__ == "__main__":
    main()
