#!/bin/bash
# MF-SGD: harp mfsgd (1 worker x 2 threads) against LIBMF (PyPI `libmf`, 2 threads) on the same
# generated ratings, in one run: test RMSE per epoch, time to a fixed test RMSE and its ratio;
# then harp with 1, 2 and 4 workers (1 thread each), the RMSE curves side by side.
#   scripts/bench-mfsgd.sh [RATINGS] [USERS] [ITEMS] [EPOCHS] [TARGET]
# Defaults: 11,200,000 ratings (about 10.1M training, 10 % test), 500,000 users, 100,000 items
# (power-law, skew 2), true rank 16 plus Gaussian noise 0.5; rank 16, lambda 0.05, 12 epochs;
# target test RMSE 0.585. Needs a release build (cargo build --release -p harp-cli); makes a
# venv with libmf and numpy in /tmp/venv-mf. Time to the target: seconds from the end of reading
# the files (harp: building its blocks, the epochs and their tests; LIBMF: from its training call,
# which includes its own set-up) to the end of the first epoch whose test RMSE is at most TARGET.
set -euo pipefail
R=${1:-11200000}
U=${2:-500000}
I=${3:-100000}
E=${4:-12}
TARGET=${5:-0.585}
RANK=${RANK:-16}
LAMBDA=${LAMBDA:-0.05}
H=${HARP:-${CARGO_TARGET_DIR:-target}/release/harp}
D=${DATA:-/tmp/mfb}
PY=/tmp/venv-mf/bin/python
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x $PY ] || ! $PY -c 'import numpy; import libmf' >/dev/null 2>&1; then
  python3 -m venv /tmp/venv-mf
  /tmp/venv-mf/bin/pip install -q libmf numpy
fi
mkdir -p $D
TR=$D/train-$R-$U-$I.txt
TE=$D/test-$R-$U-$I.txt
[ -s $TR ] && [ -s $TE ] || $H gen ratings --ratings $R --users $U --items $I --rank 16 --noise 0.5 --skew 2 \
  --test-fraction 0.1 --seed 7 --output $TR --test $TE
echo "ratings: $TR ($(wc -l < $TR) lines, $(du -h $TR | cut -f1)), test $(wc -l < $TE) lines"
echo "rank $RANK, lambda $LAMBDA, $E epochs, target test RMSE $TARGET"
uptime
$H mfsgd --workers 1 --threads 2 --input $TR --test $TE --rank $RANK --lambda $LAMBDA --epochs $E \
  --output $D/out1 --overwrite > $D/harp-w1.log
cat $D/harp-w1.log
$PY $here/bench_mfsgd.py libmf $TR $TE $RANK $LAMBDA $E 2 > $D/libmf.jsonl
cat $D/libmf.jsonl
for W in 2 4; do
  $H mfsgd --workers $W --threads 1 --input $TR --test $TE --rank $RANK --lambda $LAMBDA --epochs $E \
    --output $D/out$W --overwrite > $D/harp-w$W.log
  tail -2 $D/harp-w$W.log | head -1
done
python3 - "$TARGET" $D/harp-w1.log $D/libmf.jsonl $D/harp-w2.log $D/harp-w4.log <<'PYEOF'
import json, re, sys
target = float(sys.argv[1])
def harp(path):
    return [(int(m[1]), float(m[3]), float(m[2])) for m in
            re.finditer(r"epoch +(\d+)/\d+ .*?test rmse ([\d.]+)  trained ([\d.]+) s", open(path).read())]
h1 = harp(sys.argv[2])
lib = [json.loads(l) for l in open(sys.argv[3])]
lib = [(d["iter"], d["t"], d["rmse"]) for d in lib if "iter" in d]
def reach(curve):
    return next(((e, t) for e, t, r in curve if r <= target), None)
print("\n| epoch | harp 1×2 RMSE | harp s | LIBMF 2 threads RMSE | LIBMF s |")
print("|---|---|---|---|---|")
for i in range(max(len(h1), len(lib))):
    a = h1[i] if i < len(h1) else None
    b = lib[i] if i < len(lib) else None
    print(f"| {i+1} | {a[2]:.6f} | {a[1]:.3f} | " if a else f"| {i+1} | | | ", end="")
    print(f"{b[2]:.4f} | {b[1]:.3f} |" if b else " | |")
rh, rl = reach(h1), reach(lib)
print(f"\ntime to test RMSE {target}: harp {'%.3f s (epoch %d)' % (rh[1], rh[0]) if rh else 'not reached'}, "
      f"LIBMF {'%.3f s (iteration %d)' % (rl[1], rl[0]) if rl else 'not reached'}", end="")
print(f"; harp / LIBMF = {rh[1] / rl[1]:.2f}" if rh and rl else "")
print(f"best test RMSE: harp {min(r for _, _, r in h1):.6f}, LIBMF {min(r for _, _, r in lib):.4f}")
curves = {1: h1, 2: harp(sys.argv[4]), 4: harp(sys.argv[5])}
print("\n| epoch | W=1 (2 threads) | W=2 (1 thread each) | W=4 (1 thread each) | most relative difference |")
print("|---|---|---|---|---|")
worst = 0.0
for i in range(len(h1)):
    rs = [curves[w][i][2] for w in (1, 2, 4)]
    d = max(rs) / min(rs) - 1
    worst = max(worst, d)
    print(f"| {i+1} | {rs[0]:.6f} | {rs[1]:.6f} | {rs[2]:.6f} | {100*d:.3f} % |")
print(f"W = 1, 2, 4: the RMSE curves differ by at most {100*worst:.3f} %")
PYEOF
uptime
