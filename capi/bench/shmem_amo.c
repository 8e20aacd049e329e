/*
 * OpenSHMEM atomic fetch-add rate between 2 PEs, for onesided-vs-ucx.sh.
 *
 * Usage: shmem_amo [ITERS]
 * PE 1 runs ITERS shmem_long_atomic_fetch_add(counter, 1, 0) back to back (each waits for its
 * result) on a counter of PE 0, after a warm-up, for two counters: a static variable (symmetric
 * data, registered user memory) and a word of the symmetric heap (shmem_malloc). PE 0 waits in a
 * barrier meanwhile. Prints (PE 1, stdout):
 *   "libucp PATH"        the libucp.so.0 mapped in PE 1 (see ../tests/mpi/libucp_path.h)
 *   "amo static MOPS"    fetch-adds per microsecond (millions per second) on the static counter
 *   "amo heap MOPS"      the same on the heap counter
 *   "cpu static|heap US" PE 1's thread CPU time per fetch-add (CLOCK_THREAD_CPUTIME_ID): on a
 *                        loaded machine, where the wall time includes waiting for a core
 * PE 0 checks both counters' final values; a wrong value ends with status 1.
 */
#include "../tests/mpi/libucp_path.h"

#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long counter;

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    shmem_init();
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    long warm = iters / 10 + 10;
    int me = shmem_my_pe();
    int bad = 0;
    if (shmem_n_pes() != 2) {
        fprintf(stderr, "needs 2 PEs\n");
        shmem_global_exit(2);
    }
    long *heap = shmem_malloc(sizeof(long));
    *heap = 0;
    shmem_barrier_all();
    if (me == 1) {
        if (report_libucp(1) != 0) shmem_global_exit(1);
        long *targets[2] = {&counter, heap};
        static const char *names[2] = {"static", "heap"};
        for (int k = 0; k < 2; k++) {
            long last = -1;
            for (long i = 0; i < warm; i++) last = shmem_long_atomic_fetch_add(targets[k], 1, 0);
            double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
            double t0 = clock_s(CLOCK_MONOTONIC);
            for (long i = 0; i < iters; i++) last = shmem_long_atomic_fetch_add(targets[k], 1, 0);
            double t = clock_s(CLOCK_MONOTONIC) - t0;
            double c = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
            if (last != warm + iters - 1) {
                fprintf(stderr, "PE 1: last fetch gave %ld, expected %ld\n", last, warm + iters - 1);
                bad = 1;
            }
            printf("amo %s %.4f\n", names[k], (double)iters / t / 1e6);
            printf("cpu %s %.4f\n", names[k], c * 1e6 / (double)iters);
            fflush(stdout);
        }
    }
    shmem_barrier_all();
    if (me == 0 && (counter != iters + warm || *heap != iters + warm)) {
        fprintf(stderr, "PE 0: counters %ld %ld, expected %ld\n", counter, *heap, iters + warm);
        bad = 1;
    }
    shmem_barrier_all();
    shmem_free(heap);
    shmem_finalize();
    return bad;
}
