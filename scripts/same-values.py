#!/usr/bin/env python3
"""Compares two files of numbers (whitespace-separated), e.g. K-means centroids:
    scripts/same-values.py WANT GOT [TOLERANCE]        (default 1e-9, relative)
Prints the count and the largest relative difference; exits 1 when the counts differ, a file
holds none, or a difference exceeds the tolerance."""
import sys

want = [float(x) for x in open(sys.argv[1]).read().split()]
got = [float(x) for x in open(sys.argv[2]).read().split()]
tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-9
if len(want) != len(got) or not want:
    sys.exit(f"{len(got)} values in {sys.argv[2]}, {len(want)} in {sys.argv[1]}")
worst = max(abs(g - w) / max(abs(w), 1e-300) for g, w in zip(got, want))
print(f"{len(want)} values, largest relative difference {worst:.3g}")
sys.exit(0 if worst <= tolerance else 1)
