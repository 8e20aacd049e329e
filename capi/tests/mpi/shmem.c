/*
 * OpenSHMEM checks, run by run.sh under Open MPI's oshrun (spml ucx, atomic ucx, sshmem ucx)
 * against whichever libucp.so.0 the dynamic linker picked.
 *
 * Usage: shmem [FOLDER]; with FOLDER each PE writes its lines to FOLDER/rank-R.txt (R is the PE
 * number), else to stdout. The lines are p2p.c's: "rank R libucp PATH", "rank R ok NAME",
 * "rank R FAIL NAME: WHY", "rank R time PHASE T s" and last "rank R done CHECKS FAILED"
 * (printed after shmem_finalize returned). The exit status is 0 only if every check passed.
 * Works for 2 to 64 PEs.
 *
 * Phases: shmem_putmem/getmem of 1 B to 1 MiB between neighbours; a 64 MiB shmem_malloc written
 * whole by the left neighbour; fetch-add (long and int), compare-swap, swap and the bitwise
 * atomics from every PE onto PE 0 with the fetched values and final values checked; data then a
 * flag ordered by shmem_fence and by shmem_quiet.
 */
#include "libucp_path.h"

#include <shmem.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int me, npes;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int checks, failures;

static void check(int ok, const char *name, const char *fmt, ...)
{
    checks++;
    if (ok) {
        printf("rank %d ok %s\n", me, name);
    } else {
        va_list ap;
        failures++;
        printf("rank %d FAIL %s: ", me, name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

static inline unsigned char pat(size_t i, int src, int round)
{
    return (unsigned char)((i * 131 + (size_t)src * 17 + (size_t)round * 7 + (i >> 9)) ^ 0xa5);
}

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
#define HUGE_LEN ((size_t)64 << 20)
#define PER 100

/* Symmetric data. */
static long ctr_long;
static int ctr_int;
static long lock_word = -1;
static long cas_ctr;
static long swap_slot = -1;
static unsigned long bits_or;
static unsigned int bits_xor;
static unsigned long bits_and = ~0UL;
static long post_sum;
static long fetched[64 * PER];
static long swapped[64];
static long flag_fence, flag_quiet;

static void put_get(void)
{
    static const size_t sizes[] = {1, 8, 100, 4096, 65536 + 5, BIG};
    unsigned char *dst = shmem_malloc(BIG);
    unsigned char *src = malloc(BIG), *back = malloc(BIG);
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        memset(dst, 0, BIG);
        for (size_t i = 0; i < n; i++) {
            src[i] = pat(i, me, (int)s);
        }
        shmem_barrier_all();
        shmem_putmem(dst, src, n, right);
        shmem_barrier_all();
        long bad = first_bad(dst, n, left, (int)s);
        int tail = n == BIG || dst[n] == 0;
        char name[64];
        snprintf(name, sizeof(name), "shmem_putmem %zu B", n);
        check(bad < 0 && tail, name, "byte %ld wrong (tail %s)", bad, tail ? "ok" : "written");
        /* Read back what this PE put into its right neighbour. */
        memset(back, 0, n);
        shmem_getmem(back, dst, n, right);
        snprintf(name, sizeof(name), "shmem_getmem %zu B", n);
        bad = first_bad(back, n, me, (int)s);
        check(bad < 0, name, "byte %ld wrong", bad);
        /* Nobody clears its buffer for the next size before every get has read it. */
        shmem_barrier_all();
    }
    shmem_barrier_all();
    shmem_free(dst);
    free(src);
    free(back);
}

static void huge(void)
{
    unsigned char *h = shmem_malloc(HUGE_LEN);
    check(h != NULL, "shmem_malloc 64 MiB", "NULL");
    if (h == NULL) {
        return;
    }
    unsigned char *src = malloc(HUGE_LEN);
    for (size_t i = 0; i < HUGE_LEN; i++) {
        src[i] = pat(i, me, 9);
    }
    memset(h, 0, HUGE_LEN);
    shmem_barrier_all();
    shmem_putmem(h, src, HUGE_LEN, (me + 1) % npes);
    shmem_quiet();
    shmem_barrier_all();
    long bad = first_bad(h, HUGE_LEN, (me + npes - 1) % npes, 9);
    check(bad < 0, "shmem_putmem 64 MiB into shmem_malloc'd memory", "byte %ld wrong", bad);
    shmem_barrier_all();
    free(src);
    shmem_free(h);
}

static void atomics(void)
{
    long mine[PER];
    int mine_int[PER];
    for (int i = 0; i < PER; i++) {
        mine[i] = shmem_long_atomic_fetch_add(&ctr_long, 2, 0);
        mine_int[i] = shmem_int_atomic_fetch_add(&ctr_int, 1, 0);
        shmem_long_atomic_add(&post_sum, me + 1, 0);
    }
    /* Compare-swap: one winner of -1 -> me, then a counter from CAS loops. */
    long was = shmem_long_atomic_compare_swap(&lock_word, -1, me, 0);
    int tries = 0;
    for (int i = 0; i < PER / 2; i++) {
        long cur = shmem_long_atomic_fetch(&cas_ctr, 0);
        for (;;) {
            long prev = shmem_long_atomic_compare_swap(&cas_ctr, cur, cur + 1, 0);
            tries++;
            if (prev == cur) {
                break;
            }
            cur = prev;
        }
    }
    long old = shmem_long_atomic_swap(&swap_slot, me, 0);
    shmem_ulong_atomic_or(&bits_or, 1UL << me, 0);
    unsigned int x = shmem_uint_atomic_fetch_xor(&bits_xor, 1U << me, 0);
    (void)x;
    shmem_ulong_atomic_and(&bits_and, ~(1UL << me), 0);
    shmem_quiet();
    /* Gather the fetched values and the swap's old values on PE 0. */
    shmem_putmem(&fetched[me * PER], mine, sizeof(mine), 0);
    shmem_putmem(&swapped[me], &old, sizeof(old), 0);
    int won = was == -1;
    int ints_ok = 1;
    for (int i = 1; i < PER; i++) {
        ints_ok &= mine_int[i] > mine_int[i - 1];
    }
    check(ints_ok, "int fetch-add values rise on this PE", "not increasing");
    int *winners = shmem_malloc(sizeof(int));
    *winners = 0;
    shmem_barrier_all();
    if (won) {
        shmem_int_atomic_inc(winners, 0);
    }
    shmem_barrier_all();
    if (me == 0) {
        int n = PER * npes, ok = 1;
        char *seen = calloc(n, 1);
        for (int i = 0; i < n; i++) {
            long k = fetched[i] / 2;
            if (fetched[i] % 2 || k < 0 || k >= n || seen[k]) {
                ok = 0;
            } else {
                seen[k] = 1;
            }
        }
        free(seen);
        check(ok && ctr_long == 2L * n, "long fetch-add from every PE: distinct values and total",
              "total %ld, expected %ld", ctr_long, 2L * n);
        check(ctr_int == n, "int fetch-add total", "%d, expected %d", ctr_int, n);
        long want = (long)PER * npes * (npes + 1) / 2;
        check(post_sum == want, "atomic add (post) total", "%ld, expected %ld", post_sum, want);
        check(*winners == 1 && lock_word >= 0 && lock_word < npes, "compare-swap: one winner",
              "%d winners, value %ld", *winners, lock_word);
        check(cas_ctr == (long)(PER / 2) * npes, "counter from compare-swap loops",
              "%ld, expected %ld", cas_ctr, (long)(PER / 2) * npes);
        /* The swaps form a chain: the old values and the final value are -1 and every PE once. */
        char *hit = calloc(npes + 1, 1);
        ok = 1;
        for (int i = 0; i <= npes; i++) {
            long v = i < npes ? swapped[i] : swap_slot;
            if (v < -1 || v >= npes || hit[v + 1]) {
                ok = 0;
            } else {
                hit[v + 1] = 1;
            }
        }
        free(hit);
        check(ok, "swap from every PE forms one chain", "old values repeat or are unknown");
        unsigned long all = npes == 64 ? ~0UL : (1UL << npes) - 1;
        check(bits_or == all, "atomic or from every PE", "%#lx", bits_or);
        check(bits_xor == (unsigned)all, "atomic fetch-xor from every PE", "%#x", bits_xor);
        check(bits_and == ~all, "atomic and from every PE", "%#lx", bits_and);
    }
    shmem_barrier_all();
    shmem_free(winners);
}

/* Data then a flag, ordered by shmem_fence (and, second round, shmem_quiet): the receiver waits
 * for the flag and must then see the data. */
static void ordering(void)
{
    enum { N = 32768 };
    unsigned char *data = shmem_malloc(N);
    unsigned char *src = malloc(N);
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    for (int round = 0; round < 2; round++) {
        long *flag = round == 0 ? &flag_fence : &flag_quiet;
        long bad = -1;
        int bad_rep = 0;
        for (int rep = 1; rep <= 20; rep++) {
            for (size_t i = 0; i < N; i++) {
                src[i] = pat(i, me, 50 * round + rep);
            }
            shmem_putmem(data, src, N, right);
            if (round == 0) {
                shmem_fence();
            } else {
                shmem_quiet();
            }
            shmem_long_p(flag, rep, right);
            shmem_long_wait_until(flag, SHMEM_CMP_EQ, rep);
            long b = first_bad(data, N, left, 50 * round + rep);
            if (b >= 0 && bad < 0) {
                bad = b;
                bad_rep = rep;
            }
            shmem_barrier_all();
        }
        check(bad < 0,
              round == 0 ? "data before flag with shmem_fence" : "data before flag with shmem_quiet",
              "rep %d byte %ld wrong", bad_rep, bad);
        shmem_barrier_all();
    }
    free(src);
    shmem_free(data);
}

int main(int argc, char **argv)
{
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    if (argc > 1) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/rank-%d.txt", argv[1], me);
        if (freopen(path, "w", stdout) == NULL) {
            fprintf(stderr, "PE %d: cannot write %s\n", me, path);
            shmem_global_exit(2);
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    check(report_libucp(me) == 0, "one libucp.so.0 is mapped", "none or several in /proc/self/maps");
    if (npes < 2 || npes > 64) {
        check(0, "PE count", "needs 2 to 64 PEs, got %d", npes);
        shmem_global_exit(2);
    }
    void (*phases[])(void) = {put_get, huge, atomics, ordering};
    static const char *names[] = {"put_get", "huge", "atomics", "ordering"};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        double t0 = now();
        phases[i]();
        shmem_barrier_all();
        printf("rank %d time %s %.3f s\n", me, names[i], now() - t0);
    }
    shmem_barrier_all();
    shmem_finalize();
    printf("rank %d done %d %d\n", me, checks, failures);
    return failures == 0 ? 0 : 1;
}
