/*
 * MPI_Put latency and bandwidth between 2 ranks through an RMA window, for onesided-vs-ucx.sh.
 *
 * Usage: put [LAT_ITERS [BW_ITERS]]
 * Prints (rank 0, stdout):
 *   "libucp PATH"      the libucp.so.0 mapped in rank 0 (see ../tests/mpi/libucp_path.h)
 *   "lat 8 US"         time of one 8-byte MPI_Put followed by MPI_Win_flush, in microseconds
 *                      (passive target, inside one MPI_Win_lock epoch), as osu_put_latency does
 *   "cpu 8 US"         the calling thread's CPU time for the same (CLOCK_THREAD_CPUTIME_ID): on a
 *                      loaded machine, where the wall time includes waiting for a core
 *   "bw SIZE MBPS"     bandwidth of SIZE-byte MPI_Puts in MB/s (10^6 B/s): windows of 64 puts,
 *                      each window ended by MPI_Win_flush, as osu_put_bw does
 *   "cpubw SIZE MBPS"  the same bytes over the calling thread's CPU time instead of the wall
 *                      time (over shared memory a put is a copy the caller makes: this rate
 *                      does not count the time the thread waited for a core)
 *   "bwmed SIZE MBPS"  the median over the windows of one window's bytes over its wall time: a
 *                      window the thread spent partly waiting for a core is an outlier here,
 *                      where it lowers "bw" (windows are 64 puts, 4 MiB or 64 MiB)
 * Each measurement follows a warm-up. Rank 1 checks the window's bytes at the end (the last
 * bandwidth put of each size lands at its own offset); a wrong byte ends with status 1.
 */
#include "../tests/mpi/libucp_path.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define WINDOW 64
#define MAX (1 << 20)

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (rank == 0) fprintf(stderr, "needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long lat_iters = argc > 1 ? atol(argv[1]) : 20000;
    long bw_iters = argc > 2 ? atol(argv[2]) : 20;
    if (rank == 0 && report_libucp(0) != 0) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *base;
    MPI_Win win;
    MPI_Win_allocate(2 * MAX, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, 2 * MAX);
    char *src = malloc(MAX);
    for (int i = 0; i < MAX; i++) src[i] = (char)(i * 7 + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (long i = 0; i < lat_iters / 10 + 10; i++) {
            MPI_Put(src, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
            MPI_Win_flush(1, win);
        }
        double c0 = thread_cpu();
        double t0 = MPI_Wtime();
        for (long i = 0; i < lat_iters; i++) {
            MPI_Put(src, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
            MPI_Win_flush(1, win);
        }
        double t = MPI_Wtime() - t0;
        double c = thread_cpu() - c0;
        printf("lat 8 %.3f\n", t * 1e6 / (double)lat_iters);
        printf("cpu 8 %.3f\n", c * 1e6 / (double)lat_iters);
        static const int sizes[] = {65536, MAX};
        double *wt = malloc(sizeof(double) * (size_t)(bw_iters * 8 + 1));
        for (int s = 0; s < 2; s++) {
            int size = sizes[s];
            long windows = size == MAX ? bw_iters : bw_iters * 8;
            for (int w = 0; w < 2; w++) {
                for (int k = 0; k < WINDOW; k++) MPI_Put(src, size, MPI_BYTE, 1, MAX, size, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            c0 = thread_cpu();
            t0 = MPI_Wtime();
            double tw = t0;
            for (long w = 0; w < windows; w++) {
                for (int k = 0; k < WINDOW; k++) MPI_Put(src, size, MPI_BYTE, 1, MAX, size, MPI_BYTE, win);
                MPI_Win_flush(1, win);
                double now = MPI_Wtime();
                wt[w] = now - tw;
                tw = now;
            }
            t = MPI_Wtime() - t0;
            c = thread_cpu() - c0;
            double bytes = (double)size * WINDOW * (double)windows;
            qsort(wt, (size_t)windows, sizeof(double), cmp_double);
            printf("bw %d %.1f\n", size, bytes / t / 1e6);
            printf("cpubw %d %.1f\n", size, bytes / c / 1e6);
            printf("bwmed %d %.1f\n", size, (double)size * WINDOW / wt[windows / 2] / 1e6);
        }
        free(wt);
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int bad = 0;
    if (rank == 1) {
        bad = memcmp(base, src, 8) != 0 || memcmp(base + MAX, src, MAX) != 0;
        if (bad) fprintf(stderr, "rank 1: the window does not hold what was put\n");
    }
    MPI_Win_free(&win);
    free(src);
    MPI_Finalize();
    return bad;
}
