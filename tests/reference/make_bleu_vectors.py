#!/usr/bin/env python3
"""Writes the BLEU test vectors under tests/data/bleu/ with the scores sacreBLEU computes.

Made with sacreBLEU 2.6.0 on Python 3.11.7 (`pip install sacrebleu==2.6.0`), by running, from the
repository root:

    python3 tests/reference/make_bleu_vectors.py tests/data/bleu

For each case DIR/<case>/ holds hyp.txt, ref.1.txt [ref.2.txt ...] (UTF-8, one segment a line,
each line ended by "\\n") and expected.txt with two lines: the score as Python's repr() of
`sacrebleu.corpus_bleu(hyps, refs).score` (defaults: 13a, mixed case, smoothing "exp", order 4),
then `str()` of that result, the score line without signature. DIR/tokenizer/ holds input.txt and
expected.txt, line-aligned: sacreBLEU's Tokenizer13a applied to each line (after rstrip, as BLEU
does). tests/bleu_test.cc checks psformer against these files; Python is not needed at test time.

    python3 tests/reference/make_bleu_vectors.py --bench DIR [--lines 3000]

writes a larger hyp.txt / ref.txt pair for the speed measurement in bench/RESULTS.md (not committed).

The corpora are built from fixed lists and a seeded random.Random, so reruns give the same files.
(Python >= 3.12 sums floats with compensation; scores could then differ in the last bits, far
inside the tests' 0.005 tolerance.)
"""

import argparse
import os
import random
import shutil
import sys

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

# Hand-written cases: name -> (hypotheses, [reference stream, ...]).
CASES = {
    "perfect_match": (
        ["The quick brown fox jumps over the lazy dog.", "It was the best of times, it was the worst of times."],
        [["The quick brown fox jumps over the lazy dog.", "It was the best of times, it was the worst of times."]],
    ),
    "punctuation": (
        [
            'He said: "Stop!" (twice) [sic] {really}?',
            "It's John's book; isn't it? #tag @user a/b a\\b x_y ~home `cmd` a|b 50% a*b+c=d <tag>",
            "Well... that's it, folks!!",
            "e-mail me at john.doe@example.com, please.",
        ],
        [
            [
                'He said: "Stop!" (twice) [sic]?',
                "It is John's book ; isn't it? #tag @user a/b a\\b x_y ~home `cmd` a|b 50 % a*b+c=d <tag>",
                "Well... that is it, folks!",
                "Email me at john.doe@example.com please.",
            ]
        ],
    ),
    "numbers": (
        [
            "It costs $3,000.50 in 2019, up 1.5% from 2,999.",
            "Version 2.0.1 was released on 12.05.2020, not 1.9.",
            "Call 555-1234 or 555 - 9876 between 9-5.",
            "Pages 10-20, 30,40 and .5 or 5. or ,5 and 5,",
            "Temperatures of -5 to -10 degrees, 3-4 times.",
        ],
        [
            [
                "It costs $3,000.50 in 2019, up 1.5 % from 2,999.",
                "Version 2.0.1 was released on 12.05.2020 and not 1.9.",
                "Call 555-1234 or 555-9876 between 9 and 5.",
                "Pages 10-20, 30, 40 and 0.5 or 5. or ,5 and 5,",
                "Temperatures of -5 to -10 degrees , 3-4 times.",
            ]
        ],
    ),
    "dashes_and_quotes": (
        [
            "A well-known fact -- or so they say \u2014 is \u201cquoted\u201d here.",
            "The 5-year plan \u2013 a \u2018bold\u2019 idea \u00abnot\u00bb new.",
            "Tom &amp; Jerry &quot;live&quot; &lt;here&gt; &amp;quot; <skipped> today.",
            "co-operate - co - operate -- end-",
        ],
        [
            [
                "A well-known fact \u2014 or so they say \u2014 is \u201cquoted\u201d here.",
                "The five-year plan \u2013 a \u2018bold\u2019 idea, \u00abnot\u00bb new.",
                'Tom & Jerry "live" <here> today.',
                "cooperate - co-operate -- end -",
            ]
        ],
    ),
    "spanish": (
        [
            "\u00bfD\u00f3nde est\u00e1 el ni\u00f1o? \u00a1Qu\u00e9 d\u00eda tan bonito!",
            "El ping\u00fcino comi\u00f3 pa\u00f1uelos, caf\u00e9 y ma\u00f1ana.",
            "ESPA\u00d1A gan\u00f3 3,5 millones de euros... \u00bfverdad?",
            "Se\u00f1or P\u00e9rez, \u00bfest\u00e1 usted aqu\u00ed?",
        ],
        [
            [
                "\u00bfD\u00f3nde est\u00e1 el ni\u00f1o? \u00a1Qu\u00e9 d\u00eda tan hermoso!",
                "El ping\u00fcino comi\u00f3 pa\u00f1uelos, caf\u00e9 y ma\u00f1anas.",
                "Espa\u00f1a gan\u00f3 3,5 millones de euros, \u00bfverdad?",
                "Se\u00f1or P\u00e9rez, \u00bfest\u00e1 aqu\u00ed?",
            ]
        ],
    ),
    "whitespace": (
        [
            "  leading and trailing  \t",
            "non\u00a0breaking\u3000ideographic\u2009thin space",
            "tabs\tand\x1cseparators\x1fhere\r",
            "zero\u200bwidth is not a space",
            "line\u2028separator and next\u0085line",
        ],
        [
            [
                "leading and trailing",
                "non breaking ideographic thin space",
                "tabs and separators here",
                "zero width is not a space",
                "line separator and next line",
            ]
        ],
    ),
    "empty_lines": (
        ["", "a cat on the mat", "", "nothing here", "the end"],
        [["", "a cat on the mat", "something", "", "the end ."]],
    ),
    "short_lines": (
        ["Yes.", "No", "Ok !", "a", ".", "Hi there"],
        [["Yes.", "No.", "OK!", "a", ",", "Hi there"]],
    ),
    # Matches at orders 1..3 but none of order 4: smoothing "exp" gives 100 / (2 * total).
    "no_4gram_match": (
        ["the cat sat down on a red mat today", "one two three and four five six"],
        [["the cat sat up on a red rug today", "one two three or four five six"]],
    ),
    # Unigram matches only: smoothing doubles for each further empty order.
    "unigram_only": (
        ["mat the on sat cat", "six five four three two one"],
        [["the cat sat on the mat", "one two three four five six"]],
    ),
    # Every hypothesis shorter than 4 tokens: sacreBLEU stops at the empty order and scores 0.
    "no_4grams_at_all": (
        ["the cat", "a dog barked", "hello"],
        [["the cat sat", "a dog barked loudly", "hello"]],
    ),
    "no_match": (
        ["completely different words", "nothing matches"],
        [["the cat sat on the mat", "some other sentence here"]],
    ),
    "brevity_penalty": (
        ["the cat sat", "on the mat today"],
        [["the cat sat on the big red mat all day", "on the mat today and tomorrow and later"]],
    ),
    "longer_hypothesis": (
        ["the cat sat on the mat and then it sat on the mat again", "a b c d e f g"],
        [["the cat sat on the mat", "a b c d"]],
    ),
    "two_references": (
        [
            "It is a guide to action which ensures that the military always obeys the commands of the party.",
            "He read the book because he was interested in world history.",
            "The weather is nice today, isn't it?",
        ],
        [
            [
                "It is a guide to action that ensures that the military will forever heed Party commands.",
                "He was interested in world history because he read the book.",
                "Today the weather is nice, is it not?",
            ],
            [
                "It is the guiding principle which guarantees the military forces always being under the command of the Party.",
                "He read the book since he is interested in the history of the world.",
                "The weather is lovely today, isn't it?",
            ],
        ],
    ),
    # Reference lengths 2 and 4 around a hypothesis of 3: the tie goes to the shorter.
    "three_references_tie": (
        ["a b c", "the the the the the the the", "x y z w"],
        [
            ["a b c d", "the cat is on the mat", "x y z w v u"],
            ["a b", "there is a cat on the mat", "x y"],
            ["b c d e f", "the the", "w z y x"],
        ],
    ),
}

WORDS = (
    "the a of to and in is was that for it with as his on be at by i this had not are but from or have an "
    "they which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people mr how too little state good very "
    "niño año señor está así más también después él qué über straße café naïve déjà façade"
).split()
PUNCT = [",", ".", "!", "?", ";", ":", "(", ")", '"', "'", "-", "--", "...", "%", "$", "&", "/", "¿", "¡", "—"]


def random_sentence(rng):
    parts = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.78:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        elif r < 0.9:
            p = rng.choice(PUNCT)
            # Glue punctuation to the previous word half of the time, as detokenized text does.
            if parts and rng.random() < 0.5:
                parts[-1] += p
            else:
                parts.append(p)
        else:
            parts.append(rng.choice(["3,000", "1.5", "2019", "10-20", "0.25", "7", "1,234.56", "5-year"]))
    return " ".join(parts)


def perturb(rng, sentence):
    """A plausible system output: the reference with some words dropped, replaced or swapped."""
    words = sentence.split()
    out = []
    for w in words:
        r = rng.random()
        if r < 0.1:
            continue
        if r < 0.25:
            out.append(rng.choice(WORDS))
        else:
            out.append(w)
        if rng.random() < 0.05:
            out.append(rng.choice(WORDS))
    if len(out) > 3 and rng.random() < 0.3:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


def random_corpus(seed, lines, streams):
    rng = random.Random(seed)
    refs = [[] for _ in range(streams)]
    hyps = []
    for _ in range(lines):
        base = random_sentence(rng)
        for k in range(streams):
            refs[k].append(base if k == 0 else perturb(rng, base))
        hyps.append(perturb(rng, base) if rng.random() < 0.95 else "")
    return hyps, refs


def write_lines(path, lines):
    for line in lines:
        assert "\n" not in line, f"{path}: a segment may not contain a newline"
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(line + "\n" for line in lines))


def write_case(directory, name, hyps, refs):
    case_dir = os.path.join(directory, name)
    os.makedirs(case_dir)
    write_lines(os.path.join(case_dir, "hyp.txt"), hyps)
    for k, stream in enumerate(refs, 1):
        assert len(stream) == len(hyps), f"{name}: reference stream {k} has {len(stream)} lines, not {len(hyps)}"
        write_lines(os.path.join(case_dir, f"ref.{k}.txt"), stream)
    bleu = sacrebleu.corpus_bleu(hyps, refs)
    with open(os.path.join(case_dir, "expected.txt"), "w", encoding="utf-8") as f:
        f.write(f"{bleu.score!r}\n{bleu}\n")
    print(f"{name}: {bleu}")


def write_tokenizer_vectors(directory):
    lines = []
    for hyps, refs in CASES.values():
        lines.extend(hyps)
        for stream in refs:
            lines.extend(stream)
    lines += [
        "a.b,c 1.2,3 a1.b2 .a ,a a. a, 1. 1, .1 ,1",
        "x--y 1--2 1-a a-1 -1- 1-2-3",
        "&amp;amp; &amp;lt; &quot&quot; & ; <skipped><skipped> <skip ped>",
        "mix\u00e9. caf\u00e9, na\u00efve.\u00e9 \u00e9,5 5,\u00e9",
    ]
    hyps, _ = random_corpus(seed=7, lines=200, streams=1)
    lines += hyps
    tokenizer = Tokenizer13a()
    tok_dir = os.path.join(directory, "tokenizer")
    os.makedirs(tok_dir)
    write_lines(os.path.join(tok_dir, "input.txt"), lines)
    write_lines(os.path.join(tok_dir, "expected.txt"), [tokenizer(line.rstrip()) for line in lines])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="output directory (replaced)")
    parser.add_argument("--bench", action="store_true", help="write one large hyp/ref pair instead")
    parser.add_argument("--lines", type=int, default=3000)
    args = parser.parse_args()

    if args.bench:
        os.makedirs(args.directory, exist_ok=True)
        hyps, refs = random_corpus(seed=2017, lines=args.lines, streams=1)
        write_lines(os.path.join(args.directory, "hyp.txt"), hyps)
        write_lines(os.path.join(args.directory, "ref.txt"), refs[0])
        print(sacrebleu.corpus_bleu(hyps, refs))
        return 0

    if os.path.exists(args.directory):
        shutil.rmtree(args.directory)
    os.makedirs(args.directory)
    for name, (hyps, refs) in CASES.items():
        write_case(args.directory, name, hyps, refs)
    for name, seed, lines, streams in [("random_1ref", 1, 300, 1), ("random_3ref", 2, 200, 3)]:
        hyps, refs = random_corpus(seed, lines, streams)
        write_case(args.directory, name, hyps, refs)
    write_tokenizer_vectors(args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
