#!/usr/bin/env python3
"""The Open MPI peer of `harp cg --grid G` (scripts/bench-nbody-cg.sh --apps cg-mpi).

  mpirun ... python3 cg_mpi.py GRID ITERATIONS

The same problem and the same communication pattern as `harp cg --grid G --max-iterations I`:
the 2-D Poisson matrix of a G x G grid (5-point Laplacian, Dirichlet boundaries: 4 on the
diagonal, -1 for each grid neighbour), b = A.1, x0 = 0, rows in contiguous blocks (rank r holds
rows [r*n/p, (r+1)*n/p)). Every iteration allgathers the search direction (MPI_Allgatherv)
for the product with the local rows and allreduces two dot products (MPI_Allreduce, one value
each). ITERATIONS iterations run whatever the residual, like harp's runs with an unreachable
tolerance. Rank 0 prints one JSON line: iteration_s (the mean over the iterations, wall
time between barriers), comm_s (time inside MPI calls, rank 0), the final relative residual,
and the MPI library.
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI


def main():
    g, iters = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    p, r = comm.Get_size(), comm.Get_rank()
    n = g * g
    starts = [k * n // p for k in range(p + 1)]
    lo, hi = starts[r], starts[r + 1]
    counts = [starts[k + 1] - starts[k] for k in range(p)]
    rows = np.arange(lo, hi)
    gi, gj = rows // g, rows % g

    def matvec(full):  # the local rows of A @ full
        y = 4.0 * full[lo:hi]
        y[gi > 0] -= full[rows[gi > 0] - g]
        y[gi < g - 1] -= full[rows[gi < g - 1] + g]
        y[gj > 0] -= full[rows[gj > 0] - 1]
        y[gj < g - 1] -= full[rows[gj < g - 1] + 1]
        return y

    comm_s = 0.0

    def allgather(local):
        nonlocal comm_s
        t = time.perf_counter()
        full = np.empty(n)
        comm.Allgatherv(local, [full, counts, starts[:-1], MPI.DOUBLE])
        comm_s += time.perf_counter() - t
        return full

    def dot(a, b):
        nonlocal comm_s
        t = time.perf_counter()
        s = comm.allreduce(float(a @ b), op=MPI.SUM)
        comm_s += time.perf_counter() - t
        return s

    b = matvec(np.ones(n))
    x = np.zeros(hi - lo)
    res = b.copy()
    d = res.copy()
    rr = dot(res, res)
    r0 = rr ** 0.5
    comm.Barrier()
    comm_s = 0.0
    t0 = time.perf_counter()
    for _ in range(iters):
        ad = matvec(allgather(d))
        alpha = rr / dot(d, ad)
        x += alpha * d
        res -= alpha * ad
        rr_new = dot(res, res)
        d = res + (rr_new / rr) * d
        rr = rr_new
    comm.Barrier()
    wall = time.perf_counter() - t0
    if r == 0:
        print(json.dumps({"impl": "mpi4py", "p": p, "grid": g, "iterations": iters,
                          "iteration_s": wall / iters, "comm_s": comm_s,
                          "residual": rr ** 0.5 / r0,
                          "mpi_library": MPI.Get_library_version().splitlines()[0].rstrip("\x00")}))


if __name__ == "__main__":
    main()
