/*
 * MPI_THREAD_MULTIPLE: 4 threads per rank send and receive at the same time, each thread with
 * its own tag and its partner rank's thread of the same number (pairs 0-1, 2-3, ...), blocking
 * and non-blocking, sizes from 8 B to 1 MiB (eager and rendezvous), every message checked. One
 * extra round uses MPI_ANY_TAG receives from all threads at once, so a thread may receive another
 * thread's message; the set of messages received must still be exactly the set sent.
 *
 * Usage: threads FOLDER; each rank writes "rank R libucp PATH", "rank R ok NAME" /
 * "rank R FAIL NAME: WHY" lines and "rank R done CHECKS FAILED" to FOLDER/rank-R.txt (the same
 * format as p2p.c). The exit status is 0 only if every check of this rank passed.
 */
#include "libucp_path.h"

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 4, ROUNDS = 40 };

static int rank, nranks;
static int checks, failures;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t tagged_done;

static void check(int ok, const char *name, const char *fmt, ...)
{
    pthread_mutex_lock(&out_lock);
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
    pthread_mutex_unlock(&out_lock);
}

/* Word w of the message of `round` from (rank `src`, thread `t`). */
static unsigned value(int src, int t, int round, size_t w)
{
    return (unsigned)src * 0x1000193u ^ (unsigned)t * 0x9E3779B9u ^ (unsigned)round * 0x85EBCA6Bu ^
           (unsigned)w;
}

static const size_t sizes[4] = {8, 4096, 100000, 1u << 20};

static void *worker(void *arg)
{
    int t = (int)(long)arg, peer = rank ^ 1, bad_round = -1;
    unsigned *out = malloc(1u << 20), *in = malloc(1u << 20);
    char name[64];
    for (int round = 0; round < ROUNDS && bad_round < 0; round++) {
        size_t size = sizes[(round + t) % 4], words = size / sizeof(unsigned);
        MPI_Status st;
        for (size_t w = 0; w < words; w++) {
            out[w] = value(rank, t, round, w);
        }
        memset(in, 0, size);
        if (round % 2 == 0) {
            MPI_Request req[2];
            MPI_Status sts[2];
            MPI_Irecv(in, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD, &req[0]);
            MPI_Isend(out, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD, &req[1]);
            MPI_Waitall(2, req, sts);
        } else if (rank % 2 == 0) {
            MPI_Send(out, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD);
            MPI_Recv(in, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(in, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD, &st);
            MPI_Send(out, (int)size, MPI_BYTE, peer, t, MPI_COMM_WORLD);
        }
        for (size_t w = 0; w < words; w++) {
            if (in[w] != value(peer, t, round, w)) {
                bad_round = round;
                break;
            }
        }
    }
    snprintf(name, sizeof(name), "thread %d: %d rounds 8 B..1 MiB with its own tag", t, ROUNDS);
    check(bad_round < 0, name, "round %d received wrong data", bad_round);

    /* Once every thread here has received all its tagged messages, nothing with tags 0..3 is
     * left to arrive, so the any-tag receives below can only match the any-tag round's. */
    pthread_barrier_wait(&tagged_done);

    /* Any tag: thread t sends (t, k) for k < 8 and receives 8 messages of any tag; the receiving
     * side records what arrived in `got`, checked after all threads join. */
    static int got[THREADS][8];
    int msg[2] = {t, 0}, rmsg[2];
    for (int k = 0; k < 8; k++) {
        msg[1] = k;
        MPI_Send(msg, 2, MPI_INT, peer, 100 + t, MPI_COMM_WORLD);
    }
    for (int k = 0; k < 8; k++) {
        MPI_Status st;
        MPI_Recv(rmsg, 2, MPI_INT, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        if (st.MPI_TAG == 100 + rmsg[0] && rmsg[0] >= 0 && rmsg[0] < THREADS && rmsg[1] >= 0 &&
            rmsg[1] < 8) {
            __atomic_fetch_add(&got[rmsg[0]][rmsg[1]], 1, __ATOMIC_RELAXED);
        }
    }
    free(out);
    free(in);
    return got;
}

int main(int argc, char **argv)
{
    int provided = -1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2 || nranks % 2 != 0) {
        fprintf(stderr, "usage: threads FOLDER, with an even number of ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank-%d.txt", argv[1], rank);
    if (freopen(path, "w", stdout) == NULL) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    check(report_libucp(rank) == 0, "one libucp.so.0 is mapped", "none or several");
    check(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE provided", "provided %d", provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    pthread_t th[THREADS];
    pthread_barrier_init(&tagged_done, NULL, THREADS);
    int (*got)[8] = NULL;
    for (long t = 0; t < THREADS; t++) {
        pthread_create(&th[t], NULL, worker, (void *)t);
    }
    for (int t = 0; t < THREADS; t++) {
        void *r;
        pthread_join(th[t], &r);
        got = r;
    }
    int all_once = 1;
    for (int t = 0; t < THREADS; t++) {
        for (int k = 0; k < 8; k++) {
            all_once &= got[t][k] == 1;
        }
    }
    check(all_once, "any-tag receives from 4 threads got each message once", "some were lost or doubled");

    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d done %d %d\n", rank, checks, failures);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
