/*
 * Core-to-core latency of one cache line: two threads, pinned to cores A and B, take turns
 * writing a counter the other one waits for. Prints the median one-way time in ns of 5 rounds
 * of ITERS hand-overs.
 *
 * Usage: c2c [A B [ITERS]]      (default cores 0 and 1, 100000 hand-overs a round)
 *
 * compare-ucx.sh runs it before each pair of runs: on a virtual machine the host may move the
 * two vCPUs between cores that share a cache and cores that do not, and a shared-memory
 * transport's latency and rate follow that (on one machine of this workplace the probe read
 * about 50 ns at some times and about 240 ns at others, minutes apart).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 5

static _Alignas(128) _Atomic long turn;
static long iters = 100000;
static int core_a, core_b = 1;

static int pin(int core)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Core B: waits for each odd value and answers with the next even one. */
static void *answer(void *arg)
{
    (void)arg;
    if (pin(core_b) != 0) {
        fprintf(stderr, "c2c: cannot pin to core %d\n", core_b);
        exit(1);
    }
    for (long i = 0; i < iters * ROUNDS; i++) {
        while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&turn, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc >= 3) {
        core_a = atoi(argv[1]);
        core_b = atoi(argv[2]);
    }
    if (argc >= 4) {
        iters = atol(argv[3]);
    }
    if (iters <= 0) {
        fprintf(stderr, "c2c: ITERS must be positive\n");
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, answer, NULL) != 0) {
        fprintf(stderr, "c2c: cannot start a thread\n");
        return 1;
    }
    if (pin(core_a) != 0) {
        fprintf(stderr, "c2c: cannot pin to core %d\n", core_a);
        return 1;
    }
    double one_way[ROUNDS];
    long k = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++, k++) {
            atomic_store_explicit(&turn, 2 * k + 1, memory_order_release);
            while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * k + 2) {
            }
        }
        one_way[r] = (now_ns() - t0) / iters / 2;
    }
    pthread_join(t, NULL);
    qsort(one_way, ROUNDS, sizeof(one_way[0]), cmp_double);
    printf("%.1f\n", one_way[ROUNDS / 2]);
    return 0;
}
