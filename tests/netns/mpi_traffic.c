/*
 * Steady MPI traffic with every message checked, for jobs across hosts whose links are made
 * hostile while it runs (tests/netns/mpi-hosts.sh).
 *
 * Usage: mpi_traffic FOLDER SECONDS, any number of ranks >= 2. Each rank writes its lines to
 * FOLDER/rank-R.txt in capi/tests/mpi/p2p.c's format ("rank R libucp PATH", "rank R ok NAME",
 * "rank R FAIL NAME: WHY", "rank R done CHECKS FAILED") plus "rank R host NAME" and
 * "rank R iterations N".
 *
 * Until SECONDS have passed on rank 0's clock, each iteration sends around the ring (to the right
 * neighbour, from the left one) a message of the next size of 1 B, 100 B, 4 KiB, 64 KiB and
 * 1 MiB (eager and rendezvous), then all ranks agree (MPI_Allreduce) on the number of bad
 * messages and on whether to go on. Every byte of every message is checked. Errors are returned
 * (MPI_ERRORS_RETURN): the first one is reported as a FAIL line naming the peer rank and its host,
 * and the rank then calls MPI_Abort, so a job whose link was cut ends instead of waiting.
 */
#include "../../capi/tests/mpi/libucp_path.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, nranks;
static char hosts[64][MPI_MAX_PROCESSOR_NAME];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned char pattern(size_t i, int src, long iter)
{
    uint64_t v = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)src << 40) ^
                 ((uint64_t)iter << 8);
    return (unsigned char)(v >> 56 ^ v);
}

/* Reports an MPI error of `what` with `peer` and aborts the job. */
static void failed(const char *what, int peer, long iter, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    printf("rank %d FAIL %s rank %d (host %s) in iteration %ld: %s\n", rank, what, peer,
           peer >= 0 && peer < 64 ? hosts[peer] : "?", iter, msg);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 100, 4096, 65536, 1 << 20};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 3 || nranks < 2 || nranks > 64) {
        fprintf(stderr, "usage: mpi_traffic FOLDER SECONDS, with 2 to 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double seconds = atof(argv[2]);
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank-%d.txt", argv[1], rank);
    if (freopen(path, "w", stdout) == NULL) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    report_libucp(rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char me[MPI_MAX_PROCESSOR_NAME];
    int len;
    memset(me, 0, sizeof(me));
    MPI_Get_processor_name(me, &len);
    MPI_Allgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                  MPI_COMM_WORLD);
    printf("rank %d host %s\n", rank, me);

    size_t max = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
    unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
    if (sbuf == NULL || rbuf == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int checks = 0, bad_total = 0;
    double t0 = now();
    long iter;
    for (iter = 0;; iter++) {
        size_t size = sizes[iter % (sizeof(sizes) / sizeof(sizes[0]))];
        MPI_Request req[2];
        MPI_Status st[2];
        int rc, count = -1, bad = 0;
        for (size_t i = 0; i < size; i++) {
            sbuf[i] = pattern(i, rank, iter);
        }
        memset(rbuf, 0, size);
        rc = MPI_Irecv(rbuf, (int)size, MPI_BYTE, left, (int)(iter & 0x7fff), MPI_COMM_WORLD,
                       &req[0]);
        if (rc != MPI_SUCCESS) {
            failed("receive from", left, iter, rc);
        }
        rc = MPI_Isend(sbuf, (int)size, MPI_BYTE, right, (int)(iter & 0x7fff), MPI_COMM_WORLD,
                       &req[1]);
        if (rc != MPI_SUCCESS) {
            failed("send to", right, iter, rc);
        }
        rc = MPI_Waitall(2, req, st);
        if (rc != MPI_SUCCESS) {
            int which = st[0].MPI_ERROR != MPI_SUCCESS ? 0 : 1;
            failed(which == 0 ? "receive from" : "send to", which == 0 ? left : right, iter,
                   st[which].MPI_ERROR != MPI_SUCCESS ? st[which].MPI_ERROR : rc);
        }
        MPI_Get_count(&st[0], MPI_BYTE, &count);
        if (count != (int)size) {
            bad = 1;
            printf("rank %d FAIL ring iteration %ld: %d bytes from rank %d, expected %zu\n", rank,
                   iter, count, left, size);
        }
        for (size_t i = 0; i < size && !bad; i++) {
            if (rbuf[i] != pattern(i, left, iter)) {
                bad = 1;
                printf("rank %d FAIL ring iteration %ld: byte %zu of %zu from rank %d is wrong\n",
                       rank, iter, i, size, left);
            }
        }
        checks++;
        /* [0] messages that were wrong anywhere, [1] rank 0's verdict on going on. */
        int mine[2] = {bad, rank == 0 && now() - t0 < seconds}, all[2];
        rc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            failed("allreduce with", -1, iter, rc);
        }
        bad_total += bad;
        if (all[0] != 0 && !bad) {
            printf("rank %d FAIL iteration %ld: %d other ranks got wrong data\n", rank, iter,
                   all[0]);
            bad_total++;
        }
        if (!all[1]) {
            break;
        }
    }
    printf("rank %d iterations %ld\n", rank, iter + 1);
    printf("rank %d %s ring of %d ranks, %ld iterations\n", rank, bad_total ? "FAIL" : "ok",
           nranks, iter + 1);
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        failed("barrier with", -1, iter, rc);
    }
    printf("rank %d done %d %d\n", rank, checks + 1, bad_total);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return bad_total == 0 ? 0 : 1;
}
