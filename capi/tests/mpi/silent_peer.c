/*
 * A busy peer is not a dead one (issue 31): rank 1 stays out of MPI for SECONDS while rank 0
 * waits for it in MPI_Recv; then data flows both ways and is checked.
 *
 * Usage: silent_peer FOLDER SECONDS [sleep|compute], 2 ranks. Each rank writes its lines to
 * FOLDER/rank-R.txt in p2p.c's format ("rank R libucp PATH", "rank R ok NAME",
 * "rank R FAIL NAME: WHY", "rank R time PHASE T s", "rank R done CHECKS FAILED").
 *
 * The sequence:
 *   1. warm-up, both directions, a small (eager) and a 1 MiB (rendezvous) message, so both
 *      endpoints are connected and both protocols have run before the silence;
 *   2. rank 0 starts an MPI_Isend of 4 MiB to rank 1 (a rendezvous the silent rank must answer
 *      later) and then waits in MPI_Recv for a small message from rank 1;
 *      rank 1 is silent for SECONDS: `sleep` sleeps (nanosleep, no CPU), `compute` spins on
 *      arithmetic; either way it makes no MPI call, so no MPI or UCX progress runs in its
 *      application thread. Then it receives the 4 MiB message, sends the small one and a 4 MiB
 *      message back;
 *   3. both directions once more, and a barrier.
 * Every message's bytes are checked. Errors are returned (MPI_ERRORS_RETURN) and reported as
 * FAIL lines. "rank 0 time waited T s" is how long rank 0 was in its MPI_Recv; "rank 1 time
 * silent T s" how long rank 1 stayed out of MPI; run.sh-style scripts compare them with SECONDS.
 */
#include "libucp_path.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank;
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

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Byte i of a message with `tag` from `src`: differs between neighbours, messages and senders. */
static unsigned char pattern(size_t i, int src, int tag)
{
    uint64_t v = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)src << 40) ^
                 ((uint64_t)tag << 48);
    return (unsigned char)(v >> 56 ^ v);
}

static void fill(unsigned char *buf, size_t size, int src, int tag)
{
    for (size_t i = 0; i < size; i++) {
        buf[i] = pattern(i, src, tag);
    }
}

/* Checks a receive: its MPI return code, its count and every byte. */
static void check_recv(const char *name, int rc, const MPI_Status *st, const unsigned char *buf,
                       size_t size, int src, int tag)
{
    int count = -1;
    long bad = -1;
    if (rc == MPI_SUCCESS) {
        MPI_Get_count(st, MPI_BYTE, &count);
        for (size_t i = 0; i < size; i++) {
            if (buf[i] != pattern(i, src, tag)) {
                bad = (long)i;
                break;
            }
        }
    }
    check(rc == MPI_SUCCESS && count == (int)size && bad < 0, name,
          "MPI error %d, count %d of %zu, first bad byte %ld", rc, count, size, bad);
}

/* Both directions at once: `size` bytes with `tag`, checked. */
static void exchange(const char *name, unsigned char *sbuf, unsigned char *rbuf, size_t size,
                     int tag)
{
    int peer = 1 - rank;
    MPI_Status st;
    fill(sbuf, size, rank, tag);
    memset(rbuf, 0, size);
    int rc = MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, peer, tag, rbuf, (int)size, MPI_BYTE, peer,
                          tag, MPI_COMM_WORLD, &st);
    check_recv(name, rc, &st, rbuf, size, peer, tag);
}

/* Stays out of MPI for `seconds`: sleeping, or spinning on arithmetic. Returns the time taken. */
static double stay_silent(double seconds, int compute)
{
    double t0 = now();
    if (compute) {
        volatile uint64_t x = 1;
        while (now() - t0 < seconds) {
            for (int i = 0; i < 1000000; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
            }
        }
    } else {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    return now() - t0;
}

enum { SMALL = 64, BIG = 4 << 20, WARM = 1 << 20 };

int main(int argc, char **argv)
{
    int nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    double seconds = argc >= 3 ? atof(argv[2]) : -1;
    int compute = argc >= 4 && strcmp(argv[3], "compute") == 0;
    if (nranks != 2 || argc < 3 || seconds < 0 ||
        (argc >= 4 && !compute && strcmp(argv[3], "sleep") != 0)) {
        fprintf(stderr, "usage: silent_peer FOLDER SECONDS [sleep|compute], with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank-%d.txt", argv[1], rank);
    if (freopen(path, "w", stdout) == NULL) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    report_libucp(rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    unsigned char *sbuf = malloc(BIG), *rbuf = malloc(BIG), *big_out = malloc(BIG);
    if (sbuf == NULL || rbuf == NULL || big_out == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - rank, rc;
    MPI_Status st;

    exchange("warm-up small", sbuf, rbuf, SMALL, 1);
    exchange("warm-up 1 MiB", sbuf, rbuf, WARM, 2);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        MPI_Request req;
        fill(big_out, BIG, rank, 20);
        rc = MPI_Isend(big_out, BIG, MPI_BYTE, peer, 20, MPI_COMM_WORLD, &req);
        check(rc == MPI_SUCCESS, "isend 4 MiB to the silent rank", "MPI error %d", rc);
        printf("rank 0 waiting\n");
        double t0 = now();
        memset(rbuf, 0, SMALL);
        rc = MPI_Recv(rbuf, SMALL, MPI_BYTE, peer, 21, MPI_COMM_WORLD, &st);
        printf("rank 0 time waited %.2f s\n", now() - t0);
        check_recv("recv from the silent rank", rc, &st, rbuf, SMALL, peer, 21);
        memset(rbuf, 0, BIG);
        rc = MPI_Recv(rbuf, BIG, MPI_BYTE, peer, 22, MPI_COMM_WORLD, &st);
        check_recv("recv 4 MiB after the silence", rc, &st, rbuf, BIG, peer, 22);
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        check(rc == MPI_SUCCESS, "isend 4 MiB completed", "MPI error %d", rc);
    } else {
        printf("rank 1 silent\n");
        double took = stay_silent(seconds, compute);
        printf("rank 1 time silent %.2f s (%s)\n", took, compute ? "compute" : "sleep");
        memset(rbuf, 0, BIG);
        rc = MPI_Recv(rbuf, BIG, MPI_BYTE, peer, 20, MPI_COMM_WORLD, &st);
        check_recv("recv 4 MiB sent during the silence", rc, &st, rbuf, BIG, peer, 20);
        fill(sbuf, SMALL, rank, 21);
        rc = MPI_Send(sbuf, SMALL, MPI_BYTE, peer, 21, MPI_COMM_WORLD);
        check(rc == MPI_SUCCESS, "send after the silence", "MPI error %d", rc);
        fill(big_out, BIG, rank, 22);
        rc = MPI_Send(big_out, BIG, MPI_BYTE, peer, 22, MPI_COMM_WORLD);
        check(rc == MPI_SUCCESS, "send 4 MiB after the silence", "MPI error %d", rc);
    }

    exchange("after small", sbuf, rbuf, SMALL, 30);
    exchange("after 4 MiB", sbuf, rbuf, BIG, 31);
    rc = MPI_Barrier(MPI_COMM_WORLD);
    check(rc == MPI_SUCCESS, "barrier", "MPI error %d", rc);
    printf("rank %d done %d %d\n", rank, checks, failures);
    free(sbuf);
    free(rbuf);
    free(big_out);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
