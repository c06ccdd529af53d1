/* mpi_coll.c - times one MPI collective with the protocol of `harp bench` (and of OSU):
 * warm-up repetitions, then per repetition a barrier and K back-to-back calls (--inner K);
 * a repetition's time is the slowest rank's time (MPI_Reduce MAX) divided by K; rank 0 prints
 * the median, min and max over repetitions as one JSON line with the field names of
 * `harp bench --json` plus "impl":"openmpi".
 *
 * Message sizes mean what they mean in `harp bench` (rust/harp-jobs/src/bench.rs), with
 * n = max(bytes / 8, 1) doubles:
 *   bcast, reduce, allreduce     each rank's buffer is n doubles (root 0, MPI_SUM)
 *   reduce_scatter               each rank holds n doubles, gets n/p of the sum
 *                                (MPI_Reduce_scatter_block, n/p = max(n / p, 1))
 *   allgather, gather            n is the total gathered: each rank contributes max(n / p, 1)
 *   scatter                      root 0 holds n doubles, each rank gets max(n / p, 1)
 *
 * Usage: mpi_coll OP --bytes N [--reps R] [--inner K] [--warmup W] [--validate]
 *   OP: bcast reduce gather scatter allreduce allgather reduce_scatter (harp's names
 *   broadcast and reduce-scatter are accepted too and reported as harp's names).
 *   --validate runs one call with known inputs before timing and checks every rank's
 *   result (rank r contributes r + 1); a mismatch prints the first wrong element and
 *   aborts with exit code 3.  The JSON line then has "validated": true.
 *   --corrupt R (self-test of the check): rank R alters the last element of its result
 *   before checking, so the run must end with exit code 3 naming rank R.
 *
 * Built by scripts/bench-mpi-netns.sh with mpicc into a temporary directory. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

enum op { BCAST, REDUCE, GATHER, SCATTER, ALLREDUCE, ALLGATHER, REDUCE_SCATTER };

static const struct {
    const char *mpi, *harp;
    enum op op;
} OPS[] = {
    {"bcast", "broadcast", BCAST},         {"reduce", "reduce", REDUCE},
    {"gather", "gather", GATHER},          {"scatter", "scatter", SCATTER},
    {"allreduce", "allreduce", ALLREDUCE}, {"allgather", "allgather", ALLGATHER},
    {"reduce_scatter", "reduce-scatter", REDUCE_SCATTER},
};
#define NOPS (sizeof OPS / sizeof OPS[0])

static int rank, size;
static long corrupt = -1; /* --corrupt R */

static void fail(const char *fmt, const char *arg) {
    if (rank == 0) {
        fprintf(stderr, "mpi_coll: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
    }
    MPI_Finalize();
    exit(2);
}

static long parse_count(const char *flag, const char *s, long min) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min) {
        if (rank == 0)
            fprintf(stderr, "mpi_coll: %s %s is not an integer >= %ld\n", flag, s, min);
        MPI_Finalize();
        exit(2);
    }
    return v;
}

/* Buffers of one call: send and receive counts in doubles. */
struct bufs {
    double *send, *recv;
    long scount, rcount;
};

static double *alloc_doubles(long n) {
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!p) {
        fprintf(stderr, "mpi_coll: rank %d: cannot allocate %ld doubles\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void setup(enum op op, long n, struct bufs *b) {
    long share = n / size > 0 ? n / size : 1;
    switch (op) {
    case BCAST: b->scount = n; b->rcount = 0; break;
    case REDUCE: case ALLREDUCE: b->scount = n; b->rcount = n; break;
    case GATHER: b->scount = share; b->rcount = rank == 0 ? share * size : 0; break;
    case ALLGATHER: b->scount = share; b->rcount = share * size; break;
    case SCATTER: b->scount = rank == 0 ? share * size : 0; b->rcount = share; break;
    case REDUCE_SCATTER: b->scount = share * size; b->rcount = share; break;
    }
    b->send = alloc_doubles(b->scount);
    b->recv = alloc_doubles(b->rcount);
    for (long i = 0; i < b->scount; i++) b->send[i] = rank + 1.0;
    for (long i = 0; i < b->rcount; i++) b->recv[i] = 0.0;
}

static void call(enum op op, long n, struct bufs *b) {
    long share = n / size > 0 ? n / size : 1;
    switch (op) {
    case BCAST: MPI_Bcast(b->send, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case REDUCE:
        MPI_Reduce(b->send, b->recv, (int)n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLREDUCE:
        MPI_Allreduce(b->send, b->recv, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        break;
    case GATHER:
        MPI_Gather(b->send, (int)share, MPI_DOUBLE, b->recv, (int)share, MPI_DOUBLE, 0,
                   MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        MPI_Allgather(b->send, (int)share, MPI_DOUBLE, b->recv, (int)share, MPI_DOUBLE,
                      MPI_COMM_WORLD);
        break;
    case SCATTER:
        MPI_Scatter(b->send, (int)share, MPI_DOUBLE, b->recv, (int)share, MPI_DOUBLE, 0,
                    MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        MPI_Reduce_scatter_block(b->send, b->recv, (int)share, MPI_DOUBLE, MPI_SUM,
                                 MPI_COMM_WORLD);
        break;
    }
}

/* One call with rank r contributing r + 1 (element i of the root's scatter table is
 * 1 + i / share, so rank r gets r + 1); checks what every rank holds afterwards. */
static void validate(enum op op, long n) {
    struct bufs b;
    long share = n / size > 0 ? n / size : 1;
    setup(op, n, &b);
    if (op == BCAST && rank != 0)
        for (long i = 0; i < b.scount; i++) b.send[i] = -1.0;
    if (op == SCATTER && rank == 0)
        for (long i = 0; i < b.scount; i++) b.send[i] = 1.0 + (double)(i / share);
    call(op, n, &b);
    double sum = (double)size * (size + 1) / 2.0;
    double *got = NULL;
    long cnt = 0;
    double want = 0.0;
    int per_block = 0; /* gather/allgather: block j holds j + 1 */
    switch (op) {
    case BCAST: got = b.send; cnt = n; want = 1.0; break;
    case REDUCE: if (rank == 0) { got = b.recv; cnt = n; want = sum; } break;
    case ALLREDUCE: got = b.recv; cnt = n; want = sum; break;
    case REDUCE_SCATTER: got = b.recv; cnt = share; want = sum; break;
    case SCATTER: got = b.recv; cnt = share; want = rank + 1.0; break;
    case GATHER: if (rank == 0) { got = b.recv; cnt = share * size; per_block = 1; } break;
    case ALLGATHER: got = b.recv; cnt = share * size; per_block = 1; break;
    }
    if (corrupt == rank && got && cnt > 0) got[cnt - 1] += 1.0;
    long bad = -1;
    for (long i = 0; i < cnt && bad < 0; i++) {
        double w = per_block ? 1.0 + (double)(i / share) : want;
        if (got[i] != w) bad = i;
    }
    int mine = bad >= 0, any = 0;
    if (mine)
        fprintf(stderr, "mpi_coll: validation of %s failed on rank %d: element %ld is %g, expected %g\n",
                OPS[op].mpi, rank, bad, got[bad],
                per_block ? 1.0 + (double)(bad / share) : want);
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(b.send);
    free(b.recv);
    if (any) {
        MPI_Finalize();
        exit(3);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *opname = NULL;
    long bytes = -1, reps = 10, inner = 1, warmup = 2;
    int check = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--bytes") && has) bytes = parse_count(a, argv[++i], 1);
        else if (!strcmp(a, "--reps") && has) reps = parse_count(a, argv[++i], 1);
        else if (!strcmp(a, "--inner") && has) inner = parse_count(a, argv[++i], 1);
        else if (!strcmp(a, "--warmup") && has) warmup = parse_count(a, argv[++i], 0);
        else if (!strcmp(a, "--validate")) check = 1;
        else if (!strcmp(a, "--corrupt") && has) corrupt = parse_count(a, argv[++i], 0);
        else if (a[0] == '-') fail("unknown or incomplete option %s", a);
        else if (!opname) opname = a;
        else fail("unexpected argument %s", a);
    }
    if (!opname) fail("%s", "usage: mpi_coll OP --bytes N [--reps R] [--inner K] [--warmup W] [--validate]");
    if (bytes < 0) fail("%s", "--bytes is required");
    int opi = -1;
    for (size_t i = 0; i < NOPS; i++)
        if (!strcmp(opname, OPS[i].mpi) || !strcmp(opname, OPS[i].harp)) opi = (int)i;
    if (opi < 0)
        fail("unknown operation %s (bcast reduce gather scatter allreduce allgather reduce_scatter)",
             opname);
    enum op op = OPS[opi].op;
    long n = bytes / 8 > 0 ? bytes / 8 : 1;
    if (n > 2147483647L) fail("%s", "--bytes is more than 2^31 doubles (MPI counts are int)");

    if (check) validate(op, n);

    /* K buffers like harp bench (every call has its own input). */
    struct bufs *b = malloc((size_t)inner * sizeof *b);
    double *times = malloc((size_t)reps * sizeof(double));
    double *slowest = malloc((size_t)reps * sizeof(double));
    if (!b || !times || !slowest) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long k = 0; k < inner; k++) setup(op, n, &b[k]);
    for (long rep = 0; rep < warmup + reps; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long k = 0; k < inner; k++) call(op, n, &b[k]);
        double dt = (MPI_Wtime() - t0) / (double)inner;
        if (rep >= warmup) times[rep - warmup] = dt;
    }
    MPI_Reduce(times, slowest, (int)reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(slowest, (size_t)reps, sizeof(double), cmp);
        double median = reps % 2 ? slowest[reps / 2]
                                 : (slowest[reps / 2 - 1] + slowest[reps / 2]) / 2.0;
        const char *alg = "default";
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        lib[strcspn(lib, ",\n\"\\")] = 0; /* "Open MPI v4.1.4" */
        printf("{\"impl\":\"openmpi\",\"op\":\"%s\",\"mpi_op\":\"%s\",\"algorithm\":\"%s\","
               "\"workers\":%d,\"bytes\":%ld,\"elements\":%ld,\"reps\":%ld,\"inner\":%ld,"
               "\"warmup\":%ld,\"median_s\":%.9g,\"min_s\":%.9g,\"max_s\":%.9g,"
               "\"throughput_mb_s\":%.6g,\"validated\":%s,\"mpi_library\":\"%s\"}\n",
               OPS[opi].harp, OPS[opi].mpi, alg, size, bytes, n, reps, inner, warmup, median,
               slowest[0], slowest[reps - 1], (double)bytes / median / 1e6,
               check ? "true" : "false", lib);
        fflush(stdout);
    }
    for (long k = 0; k < inner; k++) {
        free(b[k].send);
        free(b[k].recv);
    }
    free(b);
    free(times);
    free(slowest);
    MPI_Finalize();
    return 0;
}
