# Test RMSE after epoch 1 by the item's slice and the user's owner, from harp mfsgd's part files.
import sys, glob, numpy as np
M = (1 << 64) - 1
def sm(z):
    z = (z + 0x9e3779b97f4a7c15) & M
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return z ^ (z >> 31)
ITEM_SALT = 0x6d667367642d6974
USER_SALT = 0x6d667367642d7573
out, test, W = sys.argv[1], sys.argv[2], int(sys.argv[3])
U, I = {}, {}
for f in glob.glob(out + "/part-*"):
    for line in open(f):
        t, i, v = line.split("\t")
        (U if t == "u" else I)[int(i)] = np.array(v.split(), dtype=np.float32)
S = 2 * W
se = {}
for line in open(test):
    u, i, r = line.split()
    u, i, r = int(u), int(i), float(r)
    if u not in U or i not in I:
        continue
    e = (r - float(U[u] @ I[i])) ** 2
    sl = sm(i ^ ITEM_SALT) % S
    ow = sm(u ^ USER_SALT) % W
    k = (sl, ow)
    a = se.setdefault(k, [0.0, 0])
    a[0] += e; a[1] += 1
for k in sorted(se):
    s, n = se[k]
    print(f"W={W} item slice {k[0]} user owner {k[1]}: {n} test ratings, RMSE {np.sqrt(s / n):.4f}")
