#!/usr/bin/env python3
"""A small synthetic parallel corpus for the export tests: each target sentence is its source
translated word by word through a fixed dictionary and read backwards, so that a model must
learn both a vocabulary and attention, yet a tiny one learns it in a few hundred steps.
Usage: make_corpus.py DIR [TEST_PAIRS]. Writes train.{en,es} (4000), valid.{en,es} (100),
test.{en,es} (TEST_PAIRS, default 200, held out: never trained on). Deterministic; the training
and validation pairs do not depend on TEST_PAIRS."""
import os
import random
import sys

WORDS = {
    "the": "el", "house": "casa", "river": "río", "green": "verde", "small": "pequeño",
    "walks": "camina", "quickly": "rápido", "over": "sobre", "a": "un", "bridge": "puente",
    "song": "canción", "and": "y", "light": "luz", "stone": "piedra", "tree": "árbol",
    "child": "niño", "sings": "canta", "old": "viejo", "water": "agua", "night": "noche",
}


def sentence_pair(rng):
    words = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 10))]
    return " ".join(words), " ".join(WORDS[w] for w in reversed(words))


def main():
    out = sys.argv[1]
    test_pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    os.makedirs(out, exist_ok=True)
    rng = random.Random(33)
    seen = set()
    for split, count in (("train", 4000), ("valid", 100), ("test", test_pairs)):
        src, tgt = [], []
        while len(src) < count:
            s, t = sentence_pair(rng)
            if split != "train" and s in seen:
                continue  # held-out sentences are new to the model
            seen.add(s)
            src.append(s)
            tgt.append(t)
        for lang, lines in (("en", src), ("es", tgt)):
            with open(os.path.join(out, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
