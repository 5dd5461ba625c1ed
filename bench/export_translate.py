#!/usr/bin/env python3
"""Times translation of stdin's sentences by an exported model outside psformer (bench/export_bench.sh).

  export_translate.py hf EXPORT_DIR BEAM THREADS BATCH
  export_translate.py ct2 CT2_DIR SPM BEAM THREADS BATCH COMPUTE_TYPE MAX_LEN

Writes the translations to stdout and "seconds S" to stderr: the time from the first sentence
given to the library to the last translation back, with the model loaded and imports done
before the clock starts (psformer's own figure is the whole command's, start-up included).
Sentences go in batches of BATCH in input order. MAX_LEN: CTranslate2's max_decoding_length,
which must stay below the model's max_positions (it has no position beyond).
"""
import sys
import time


def batches(lines, size):
    for i in range(0, len(lines), size):
        yield lines[i : i + size]


def hf(export_dir, beam, threads, batch):
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

    torch.set_num_threads(threads)
    tokenizer = MarianTokenizer.from_pretrained(export_dir)
    # MarianMTModel for a POST_LN model's export, Pegasus for a PRE_LN one's (docs/export.md).
    model = AutoModelForSeq2SeqLM.from_pretrained(export_dir).eval()
    lines = sys.stdin.read().splitlines()
    out = []
    start = time.perf_counter()
    with torch.no_grad():
        for chunk in batches(lines, batch):
            ids = model.generate(**tokenizer(chunk, return_tensors="pt", padding=True), num_beams=beam)
            out += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return out, time.perf_counter() - start


def ct2(ct2_dir, spm, beam, threads, batch, compute_type, max_len):
    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, intra_threads=threads)
    lines = sys.stdin.read().splitlines()
    start = time.perf_counter()
    sources = [sp.encode(line, out_type=str) + ["</s>"] for line in lines]
    results = translator.translate_batch(
        sources, beam_size=beam, max_batch_size=batch, max_decoding_length=max_len
    )
    out = [sp.decode(r.hypotheses[0]) for r in results]
    return out, time.perf_counter() - start


def main():
    if sys.argv[1] == "hf":
        out, seconds = hf(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        args = sys.argv[2:]
        out, seconds = ct2(args[0], args[1], int(args[2]), int(args[3]), int(args[4]), args[5], int(args[6]))
    print("\n".join(out))
    print(f"seconds {seconds:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
