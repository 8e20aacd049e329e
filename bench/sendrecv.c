/*
 * MPI_Sendrecv between 2 ranks: both directions at once, for bench/both-ways-vs-ucx.sh.
 *
 * Usage: sendrecv SIZE ITERS
 * Each iteration both ranks call MPI_Sendrecv with SIZE bytes to and from the other, after
 * ITERS/10 warm-up iterations and a barrier. Rank 0 prints
 *   "libucp PATH"             the libucp.so.0 mapped in rank 0 (see capi/tests/mpi/libucp_path.h)
 *   "sendrecv SIZE MBPS US"   MB/s (10^6 B/s) per direction, and microseconds per iteration
 * The first and last bytes of every received message are checked (each iteration sends new
 * values), and a wrong byte ends the program with status 1. A benchmark, not a test.
 */
#include "../capi/tests/mpi/libucp_path.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc != 3 || nranks != 2) {
        if (rank == 0) {
            fprintf(stderr, "usage: mpirun -np 2 %s SIZE ITERS\n", argv[0]);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long size = atol(argv[1]);
    long iters = atol(argv[2]);
    if (size < 1 || size > (1L << 30) || iters < 10) {
        if (rank == 0) {
            fprintf(stderr, "SIZE must be 1..1 GiB and ITERS at least 10\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0 && report_libucp(rank) != 0) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *sbuf = malloc(size), *rbuf = malloc(size);
    if (sbuf == NULL || rbuf == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sbuf, 0x5a, size);
    memset(rbuf, 0, size);
    int peer = 1 - rank;
    long warm = iters / 10;
    double t0 = 0;
    for (long i = 0; i < warm + iters; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        char mark = (char)(i * 2 + rank);
        sbuf[0] = sbuf[size - 1] = mark;
        MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, peer, 3, rbuf, (int)size, MPI_BYTE, peer, 3,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        char want = (char)(i * 2 + peer);
        if (rbuf[0] != want || rbuf[size - 1] != want) {
            fprintf(stderr, "rank %d: iteration %ld received %d/%d, expected %d\n", rank, i,
                    rbuf[0], rbuf[size - 1], want);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double t = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("sendrecv %ld %.2f %.3f\n", size, (double)size * iters / t / 1e6,
               t / iters * 1e6);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
