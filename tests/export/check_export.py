#!/usr/bin/env python3
"""The export tests' Python side (tests/export_model_test.cc), run in the venv of make_venv.sh.

  check_export.py logits EXPORT_DIR CASES.json
      Loads the export with AutoModelForSeq2SeqLM (MarianMTModel or PegasusForConditionalGeneration,
      as config.json says) and MarianTokenizer.from_pretrained and, for each case
      {"source", "source_ids", "decoder_ids", "logits"} that psformer wrote, checks that the
      tokenizer gives psformer's source ids and that the model's logits (teacher forcing with
      decoder_ids) equal psformer's within 1e-4. Prints the largest difference.
  check_export.py hf-translate EXPORT_DIR BEAM [--no-length-penalty] < sentences > translations
      generate() with the export's generation_config and num_beams = BEAM; with
      --no-length-penalty, length_penalty 0 and early_stopping True (a sentence is done when BEAM
      hypotheses have finished), which is psformer translate --alpha 0's beam search.
  check_export.py ct2-translate CT2_DIR EXPORT_DIR BEAM < sentences > translations
      A CTranslate2 model (scripts/ctranslate2-from-export.py from EXPORT_DIR) on the CPU.
"""
import json
import os
import sys

TOLERANCE = 1e-4


def check_logits(export_dir, cases_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(export_dir)
    model, info = AutoModelForSeq2SeqLM.from_pretrained(export_dir, output_loading_info=True)
    print(f"loaded as {type(model).__name__}")
    model.eval()
    unexpected = [k for k in info["missing_keys"] if "embed_tokens" not in k and k != "lm_head.weight"]
    if unexpected or info["unexpected_keys"] or info["mismatched_keys"]:
        sys.exit(f"loading the export left keys unmatched: {info}")
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    worst = 0.0
    for case in cases:
        ids = tokenizer(case["source"]).input_ids
        if ids != case["source_ids"]:
            sys.exit(f"tokenizer: {case['source']!r} gives {ids}, psformer {case['source_ids']}")
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([case["decoder_ids"]]))
        got = out.logits[0].double()
        want = torch.tensor(case["logits"], dtype=torch.float64)
        if got.shape != want.shape:
            sys.exit(f"logits of shape {tuple(got.shape)}, psformer's {tuple(want.shape)}")
        worst = max(worst, (got - want).abs().max().item())
    print(f"{len(cases)} sentences: largest logit difference {worst:.3g} (tolerance {TOLERANCE})")
    if worst > TOLERANCE:
        sys.exit(1)


def hf_translate(export_dir, beam, no_length_penalty=False):
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

    torch.set_num_threads(1)
    tokenizer = MarianTokenizer.from_pretrained(export_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(export_dir).eval()
    options = {"length_penalty": 0.0, "early_stopping": True} if no_length_penalty else {}
    for line in sys.stdin.read().splitlines():
        with torch.no_grad():
            out = model.generate(**tokenizer([line], return_tensors="pt"), num_beams=beam, **options)
        print(tokenizer.decode(out[0], skip_special_tokens=True))


def ct2_translate(ct2_dir, export_dir, beam):
    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(export_dir, "source.spm"))
    # CTranslate2 fails on a translation that runs past the position table, so it is capped as
    # psformer caps it: at most max_positions - 1 tokens before eos.
    with open(os.path.join(export_dir, "config.json"), encoding="utf-8") as f:
        max_len = json.load(f)["max_position_embeddings"] - 1
    translator = ctranslate2.Translator(ct2_dir, device="cpu", intra_threads=1)
    lines = sys.stdin.read().splitlines()
    sources = [sp.encode(line, out_type=str) + ["</s>"] for line in lines]
    results = translator.translate_batch(sources, beam_size=beam, max_batch_size=32, max_decoding_length=max_len)
    for result in results:
        print(sp.decode(result.hypotheses[0]))


def main():
    command = sys.argv[1]
    if command == "logits":
        check_logits(sys.argv[2], sys.argv[3])
    elif command == "hf-translate":
        hf_translate(sys.argv[2], int(sys.argv[3]), sys.argv[4:5] == ["--no-length-penalty"])
    elif command == "ct2-translate":
        ct2_translate(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
