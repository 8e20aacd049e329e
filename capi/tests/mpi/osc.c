/*
 * MPI one-sided (RMA window) checks, run by run.sh under Open MPI (osc ucx) and MPICH (ch4:ucx)
 * against whichever libucp.so.0 the dynamic linker picked.
 *
 * Usage: osc [FOLDER]; with FOLDER each rank writes its lines to FOLDER/rank-R.txt, else to
 * stdout. The lines are p2p.c's: "rank R libucp PATH", "rank R ok NAME", "rank R FAIL NAME: WHY",
 * "rank R time PHASE T s" and last "rank R done CHECKS FAILED". The exit status is 0 only if every
 * check of this rank passed. Works for any number of ranks from 2 to 64.
 *
 * Phases: puts of several sizes into MPI_Win_allocate memory under fences; gets from an
 * MPI_Win_create window on malloc'd memory; MPI_Accumulate (SUM, BXOR, REPLACE) from every rank
 * onto one; MPI_Get_accumulate and MPI_Fetch_and_op (32- and 64-bit) from every rank onto one
 * counter, with the fetched values checked to be distinct; MPI_Compare_and_swap (one winner, then
 * a counter built from CAS loops); exclusive and shared MPI_Win_lock epochs with MPI_Win_flush;
 * MPI_Win_lock_all with MPI_Win_flush_all and flush_local.
 */
#include "libucp_path.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static int checks, failures;

static void check(int ok, const char *name, const char *fmt, ...)
{
    checks++;
    if (ok) {
        printf("rank %d ok %s\n", rank, name);
    } else {
        va_list ap;
        failures++;
        printf("rank %d FAIL %s: ", rank, name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

/* Byte i of the data rank `src` writes in round `round`. */
static inline unsigned char pat(size_t i, int src, int round)
{
    return (unsigned char)((i * 131 + (size_t)src * 17 + (size_t)round * 7 + (i >> 9)) ^ 0x5a);
}

/* Offset of the first byte of buf[0..n) that is not pat(., src, round), or -1. */
static long first_bad(const unsigned char *buf, size_t n, int src, int round)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != pat(i, src, round)) {
            return (long)i;
        }
    }
    return -1;
}

#define BIG (1u << 20)

/* Every rank puts into its right neighbour's MPI_Win_allocate window, sizes 1 B to 1 MiB, each
 * size in its own fence epoch, and checks what its left neighbour put. */
static void put_allocate(void)
{
    static const size_t sizes[] = {1, 8, 100, 4096, 65536 + 3, BIG};
    unsigned char *base;
    MPI_Win win;
    MPI_Win_allocate(BIG, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    unsigned char *src = malloc(BIG);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        memset(base, 0, BIG);
        for (size_t i = 0; i < n; i++) {
            src[i] = pat(i, rank, (int)s);
        }
        MPI_Win_fence(0, win);
        MPI_Put(src, (int)n, MPI_BYTE, right, 0, (int)n, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        long bad = first_bad(base, n, left, (int)s);
        int tail_ok = n == BIG || base[n] == 0;
        char name[64];
        snprintf(name, sizeof(name), "put %zu B into MPI_Win_allocate", n);
        check(bad < 0 && tail_ok, name, "byte %ld wrong (tail %s)", bad, tail_ok ? "ok" : "written");
    }
    free(src);
    MPI_Win_free(&win);
}

/* MPI_Win_create on malloc'd memory: every rank fills its own window, then gets its left
 * neighbour's at several offsets and sizes, and puts at an offset of its right neighbour's. */
static void get_create(void)
{
    unsigned char *mem = malloc(BIG), *dst = malloc(BIG);
    MPI_Win win;
    for (size_t i = 0; i < BIG; i++) {
        mem[i] = pat(i, rank, 100);
    }
    MPI_Win_create(mem, BIG, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    int left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
    static const size_t offs[] = {0, 1, 4093, BIG - 70000};
    static const size_t lens[] = {BIG, 7, 3000, 70000};
    for (size_t k = 0; k < 4; k++) {
        memset(dst, 0, BIG);
        MPI_Win_fence(0, win);
        MPI_Get(dst, (int)lens[k], MPI_BYTE, left, (MPI_Aint)offs[k], (int)lens[k], MPI_BYTE, win);
        MPI_Win_fence(0, win);
        long bad = -1;
        for (size_t i = 0; i < lens[k] && bad < 0; i++) {
            if (dst[i] != pat(offs[k] + i, left, 100)) {
                bad = (long)i;
            }
        }
        char name[80];
        snprintf(name, sizeof(name), "get %zu B at %zu from MPI_Win_create", lens[k], offs[k]);
        check(bad < 0, name, "byte %ld wrong", bad);
    }
    /* A put into user memory at an unaligned offset, between two fences. */
    unsigned char piece[300];
    for (size_t i = 0; i < sizeof(piece); i++) {
        piece[i] = (unsigned char)(rank * 3 + i);
    }
    MPI_Win_fence(0, win);
    MPI_Put(piece, sizeof(piece), MPI_BYTE, right, 12345, sizeof(piece), MPI_BYTE, win);
    MPI_Win_fence(0, win);
    int ok = mem[12344] == pat(12344, rank, 100) && mem[12345 + 300] == pat(12645, rank, 100);
    for (size_t i = 0; i < sizeof(piece); i++) {
        ok &= mem[12345 + i] == (unsigned char)(left * 3 + i);
    }
    check(ok, "put 300 B into MPI_Win_create memory", "window bytes wrong");
    MPI_Win_free(&win);
    free(mem);
    free(dst);
}

/* MPI_Accumulate from every rank onto rank 0: SUM and BXOR on longs, REPLACE on one slot per
 * rank, within fences. */
static void accumulate(void)
{
    long *base;
    MPI_Win win;
    MPI_Win_allocate(64 * 3 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                     &win);
    memset(base, 0, 64 * 3 * sizeof(long));
    MPI_Win_fence(0, win);
    long v[2] = {rank + 1, 1L << rank};
    for (int i = 0; i < 10; i++) {
        MPI_Accumulate(&v[0], 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
    }
    MPI_Accumulate(&v[1], 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_BXOR, win);
    long mine = 1000 + rank;
    MPI_Accumulate(&mine, 1, MPI_LONG, 0, 64 + rank, 1, MPI_LONG, MPI_REPLACE, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        long sum = 10L * nranks * (nranks + 1) / 2;
        long x = (long)((1ULL << nranks) - 1);
        int slots = 1;
        for (int r = 0; r < nranks; r++) {
            slots &= base[64 + r] == 1000 + r;
        }
        check(base[0] == sum, "MPI_Accumulate SUM from every rank", "%ld, expected %ld", base[0],
              sum);
        check(base[1] == x, "MPI_Accumulate BXOR from every rank", "%#lx, expected %#lx", base[1],
              x);
        check(slots, "MPI_Accumulate REPLACE per rank", "a slot is wrong");
    }
    MPI_Win_free(&win);
}

/* Gathers each rank's `per` fetched values to rank 0, which checks that together they are
 * exactly 0, step, ..., (nranks * per - 1) * step. */
static void check_fetched(const long *got, int per, long step, const char *name)
{
    long *all = rank == 0 ? malloc(sizeof(long) * per * nranks) : NULL;
    MPI_Gather(got, per, MPI_LONG, all, per, MPI_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int n = per * nranks;
        char *seen = calloc(n, 1);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            long k = all[i] / step;
            if (all[i] % step != 0 || k < 0 || k >= n || seen[k]) {
                ok = 0;
            } else {
                seen[k] = 1;
            }
        }
        check(ok, name, "fetched values are not a permutation of the counter's history");
        free(seen);
        free(all);
    }
}

/* MPI_Get_accumulate and MPI_Fetch_and_op (long and int) from every rank onto rank 0's
 * counters, in a shared lock_all epoch with flushes: every fetched value must be distinct. */
static void fetch_ops(void)
{
    enum { PER = 50 };
    long *base;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(long), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, 4 * sizeof(long));
    MPI_Barrier(MPI_COMM_WORLD);
    long got[PER], got2[PER], got3[PER];
    int got32[PER];
    long one = 1, three = 3;
    int one32 = 1;
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < PER; i++) {
        MPI_Get_accumulate(&one, 1, MPI_LONG, &got[i], 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM,
                           win);
        MPI_Fetch_and_op(&three, &got2[i], MPI_LONG, 0, sizeof(long), MPI_SUM, win);
        MPI_Fetch_and_op(&one32, &got32[i], MPI_INT, 0, 2 * sizeof(long), MPI_SUM, win);
        MPI_Win_flush(0, win);
        got3[i] = got32[i];
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    check_fetched(got, PER, 1, "MPI_Get_accumulate SUM: distinct old values");
    check_fetched(got2, PER, 3, "MPI_Fetch_and_op SUM long: distinct old values");
    check_fetched(got3, PER, 1, "MPI_Fetch_and_op SUM int: distinct old values");
    if (rank == 0) {
        int c32;
        memcpy(&c32, (char *)base + 2 * sizeof(long), 4);
        long total = (long)PER * nranks;
        check(base[0] == total && base[1] == 3 * total && c32 == total && base[3] == 0,
              "fetch counters' final values", "%ld %ld %d %ld, expected %ld %ld %ld 0", base[0],
              base[1], c32, base[3], total, 3 * total, total);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* MPI_NO_OP reads, MPI_REPLACE swaps. */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    long old = -1, now = -1, repl = 7000 + rank, dummy = 0;
    MPI_Fetch_and_op(&repl, &old, MPI_LONG, 0, 3 * sizeof(long), MPI_REPLACE, win);
    MPI_Win_flush(0, win);
    MPI_Fetch_and_op(&dummy, &now, MPI_LONG, 0, 3 * sizeof(long), MPI_NO_OP, win);
    MPI_Win_unlock(0, win);
    check(now == repl && (old == 0 || (old >= 7000 && old < 7000 + nranks && old != repl)),
          "MPI_Fetch_and_op REPLACE then NO_OP under an exclusive lock", "old %ld now %ld", old,
          now);
    MPI_Win_free(&win);
}

/* MPI_Compare_and_swap: exactly one rank swaps -1 for its rank; then a counter incremented with
 * CAS loops by every rank reaches its total. */
static void cswap(void)
{
    enum { PER = 30 };
    long *base;
    MPI_Win win;
    MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    base[0] = -1;
    base[1] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    long cmp = -1, me = rank, old = 0;
    MPI_Win_lock_all(0, win);
    MPI_Compare_and_swap(&me, &cmp, &old, MPI_LONG, 0, 0, win);
    MPI_Win_flush(0, win);
    int won = old == -1;
    int tries = 0;
    for (int i = 0; i < PER; i++) {
        long cur = 0, nul = 0;
        MPI_Fetch_and_op(&nul, &cur, MPI_LONG, 0, 1, MPI_NO_OP, win);
        MPI_Win_flush(0, win);
        for (;;) {
            long next = cur + 1, prev = 0;
            MPI_Compare_and_swap(&next, &cur, &prev, MPI_LONG, 0, 1, win);
            MPI_Win_flush(0, win);
            tries++;
            if (prev == cur) {
                break;
            }
            cur = prev;
        }
    }
    MPI_Win_unlock_all(win);
    int winners = 0;
    MPI_Reduce(&won, &winners, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        check(winners == 1 && base[0] >= 0 && base[0] < nranks,
              "MPI_Compare_and_swap: one winner", "%d winners, value %ld", winners, base[0]);
        check(base[1] == (long)PER * nranks, "counter built from MPI_Compare_and_swap loops",
              "%ld, expected %ld", base[1], (long)PER * nranks);
    }
    MPI_Win_free(&win);
}

/* Passive target: every rank writes its slot of every other rank's window under an exclusive
 * lock (put, flush, get back, unlock) and a block of rank 0's window under a shared lock. */
static void locks(void)
{
    enum { SLOT = 512 };
    unsigned char *base;
    MPI_Win win;
    size_t size = (size_t)SLOT * nranks;
    MPI_Win_allocate(size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, size);
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char src[SLOT], back[SLOT];
    int ok = 1;
    for (int t = 0; t < nranks; t++) {
        for (int i = 0; i < SLOT; i++) {
            src[i] = pat(i, rank, 200 + t);
        }
        memset(back, 0, SLOT);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
        MPI_Put(src, SLOT, MPI_BYTE, t, (MPI_Aint)SLOT * rank, SLOT, MPI_BYTE, win);
        MPI_Win_flush(t, win);
        MPI_Get(back, SLOT, MPI_BYTE, t, (MPI_Aint)SLOT * rank, SLOT, MPI_BYTE, win);
        MPI_Win_unlock(t, win);
        ok &= memcmp(src, back, SLOT) == 0;
    }
    check(ok, "exclusive lock: put, flush, get back", "read back differs");
    MPI_Barrier(MPI_COMM_WORLD);
    int bad_slot = -1;
    long bad_at = -1;
    for (int r = 0; r < nranks && bad_slot < 0; r++) {
        bad_at = first_bad(base + (size_t)SLOT * r, SLOT, r, 200 + rank);
        bad_slot = bad_at < 0 ? -1 : r;
    }
    check(bad_slot < 0, "every rank's slot in this rank's window", "slot %d byte %ld wrong",
          bad_slot, bad_at);
    /* Nobody writes the windows again before every rank has checked its own. */
    MPI_Barrier(MPI_COMM_WORLD);

    /* lock_all: puts to every rank, flush_local_all then flush_all, then a barrier. */
    MPI_Win_lock_all(0, win);
    for (int t = 0; t < nranks; t++) {
        for (int i = 0; i < SLOT; i++) {
            src[i] = pat(i, rank, 300 + t);
        }
        MPI_Put(src, SLOT, MPI_BYTE, t, (MPI_Aint)SLOT * rank, SLOT, MPI_BYTE, win);
        MPI_Win_flush_local(t, win);
    }
    MPI_Win_flush_all(win);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    bad_slot = -1;
    for (int r = 0; r < nranks && bad_slot < 0; r++) {
        bad_at = first_bad(base + (size_t)SLOT * r, SLOT, r, 300 + rank);
        bad_slot = bad_at < 0 ? -1 : r;
    }
    check(bad_slot < 0, "lock_all puts with flush_local and flush_all", "slot %d byte %ld wrong",
          bad_slot, bad_at);
    MPI_Win_free(&win);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc > 1) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/rank-%d.txt", argv[1], rank);
        if (freopen(path, "w", stdout) == NULL) {
            fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    check(report_libucp(rank) == 0, "one libucp.so.0 is mapped", "none or several in /proc/self/maps");
    if (nranks < 2 || nranks > 64) {
        check(0, "rank count", "needs 2 to 64 ranks, got %d", nranks);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    void (*phases[])(void) = {put_allocate, get_create, accumulate, fetch_ops, cswap, locks};
    static const char *names[] = {"put_allocate", "get_create", "accumulate",
                                  "fetch_ops",    "cswap",      "locks"};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        double t0 = MPI_Wtime();
        phases[i]();
        MPI_Barrier(MPI_COMM_WORLD);
        printf("rank %d time %s %.3f s\n", rank, names[i], MPI_Wtime() - t0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d done %d %d\n", rank, checks, failures);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
