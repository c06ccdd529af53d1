#!/usr/bin/env python3
"""Deterministic text for scripts/bench-wordcount.sh: FILES files of about MB MB in total, words
drawn from a Zipf-like vocabulary (probability of the word of rank r proportional to 1/r, 200 000
words made of syllables), 1 to 24 words per line, separated by spaces (and a tab now and then).
Usage: gen_text.py OUTDIR MB [FILES] [SEED]"""
import itertools
import os
import random
import sys

out, mb = sys.argv[1], int(sys.argv[2])
files = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
syll = ["ka", "ro", "mi", "tse", "lu", "an", "of", "the", "ing", "pra", "do", "ve", "si", "nu",
        "el", "qua", "zo", "ber", "ty", "gh"]
vocab = []
for n in range(1, 5):
    for combo in itertools.product(syll, repeat=n):
        vocab.append("".join(combo))
        if len(vocab) == 200_000:
            break
    if len(vocab) == 200_000:
        break
rng.shuffle(vocab)
cum = list(itertools.accumulate(1.0 / r for r in range(1, len(vocab) + 1)))
os.makedirs(out, exist_ok=True)
per_file = mb * 1_000_000 // files
for f in range(files):
    with open(os.path.join(out, f"part-{f:03d}.txt"), "w", encoding="ascii", newline="\n") as fh:
        written = 0
        while written < per_file:
            words = rng.choices(vocab, cum_weights=cum, k=200_000)
            lines = []
            i = 0
            while i < len(words):
                n = rng.randint(1, 24)
                sep = "\t" if rng.random() < 0.05 else " "
                lines.append(sep.join(words[i:i + n]))
                i += n
            chunk = "\n".join(lines) + "\n"
            fh.write(chunk)
            written += len(chunk)
