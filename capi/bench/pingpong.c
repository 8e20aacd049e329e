/*
 * MPI ping-pong latency and streaming bandwidth between 2 ranks, for mpi-vs-ucx.sh.
 *
 * Usage: pingpong [LAT_ITERS [BW_ITERS]]
 * Prints (rank 0, stdout):
 *   "libucp PATH"      the libucp.so.0 mapped in rank 0 (see ../tests/mpi/libucp_path.h)
 *   "lat 8 US"         one-way latency of an 8-byte MPI_Send/MPI_Recv ping-pong, in microseconds
 *   "bw SIZE MBPS"     streaming bandwidth for SIZE-byte messages in MB/s (10^6 B/s): rank 0 sends
 *                      windows of 64 MPI_Isend to rank 1's 64 pre-posted MPI_Irecv, and rank 1
 *                      answers each window with an 8-byte message, as osu_bw does
 * Each measurement follows a warm-up; the first and last bytes of every received message are
 * checked, and a wrong byte ends the program with status 1.
 */
#include "../tests/mpi/libucp_path.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int rank;

static void ping_pong(char *buf, int size, int iters)
{
    int peer = 1 - rank;
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            buf[0] = (char)i;
            MPI_Send(buf, size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
        if (buf[0] != (char)i) {
            fprintf(stderr, "rank %d: ping-pong %d carried %d\n", rank, i, buf[0]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

static void stream(char **bufs, int size, int windows)
{
    MPI_Request req[WINDOW];
    MPI_Status st[WINDOW];
    char ack[8] = {0};
    int peer = 1 - rank;
    for (int w = 0; w < windows; w++) {
        for (int i = 0; i < WINDOW; i++) {
            if (rank == 0) {
                bufs[i][0] = bufs[i][size - 1] = (char)(w + i);
                MPI_Isend(bufs[i], size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
            } else {
                MPI_Irecv(bufs[i], size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
            }
        }
        MPI_Waitall(WINDOW, req, st);
        if (rank == 0) {
            MPI_Recv(ack, sizeof(ack), MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int i = 0; i < WINDOW; i++) {
                if (bufs[i][0] != (char)(w + i) || bufs[i][size - 1] != (char)(w + i)) {
                    fprintf(stderr, "rank 1: window %d message %d is wrong\n", w, i);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            MPI_Send(ack, sizeof(ack), MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv)
{
    int nranks;
    int lat_iters = argc > 1 ? atoi(argv[1]) : 100000;
    int bw_iters = argc > 2 ? atoi(argv[2]) : 20;
    const int bw_sizes[2] = {64 << 10, 1 << 20};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2 || lat_iters < 1 || bw_iters < 1) {
        fprintf(stderr, "usage: pingpong [LAT_ITERS [BW_ITERS]], with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0 && report_libucp(0) != 0) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    char small[8] = {0};
    ping_pong(small, 8, lat_iters / 10 + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    ping_pong(small, 8, lat_iters);
    double t = MPI_Wtime() - t0;
    if (rank == 0) {
        printf("lat 8 %.4f\n", t / lat_iters / 2 * 1e6);
    }

    char *bufs[WINDOW];
    for (int i = 0; i < WINDOW; i++) {
        bufs[i] = malloc(1 << 20);
        if (bufs[i] == NULL) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        memset(bufs[i], 0, 1 << 20);
    }
    for (int s = 0; s < 2; s++) {
        int size = bw_sizes[s];
        /* Fewer windows of the larger size: the same time order for both. */
        int windows = s == 0 ? bw_iters * 8 : bw_iters;
        stream(bufs, size, windows / 4 + 1);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        stream(bufs, size, windows);
        t = MPI_Wtime() - t0;
        if (rank == 0) {
            printf("bw %d %.1f\n", size, (double)size * WINDOW * windows / t / 1e6);
        }
    }
    for (int i = 0; i < WINDOW; i++) {
        free(bufs[i]);
    }
    MPI_Finalize();
    return 0;
}
