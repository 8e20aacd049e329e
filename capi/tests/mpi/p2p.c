/*
 * MPI point-to-point and collective checks, run by run.sh under Open MPI (pml ucx) and MPICH
 * (ch4:ucx) against whichever libucp.so.0 the dynamic linker picked.
 *
 * Usage: p2p [FOLDER]; with FOLDER each rank writes its lines to FOLDER/rank-R.txt (launchers
 * merge the ranks' stdout streams mid-line), else to stdout.
 * Lines, one per check, every line prefixed by the rank:
 *   "rank R libucp PATH"       the libucp.so.0 mapped in this process (from /proc/self/maps),
 *                               or "rank R libucp NONE" if none is mapped
 *   "rank R ok NAME"            a check that passed
 *   "rank R FAIL NAME: WHY"     a check that failed
 *   "rank R time PHASE T s"     how long a phase took (information only)
 *   "rank R done CHECKS FAILED" the totals, printed last
 * The exit status is 0 only if every check of this rank passed. Works for any even number of
 * ranks >= 2 (pairs 0-1, 2-3, ... for the pairwise checks; all ranks for ring and collectives).
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

/* The contents of a message of `size` bytes from `src` with `tag`: 8-byte word w is
 * (w + 1) * an odd constant, xor a seed made of size, source and tag, so every word differs from
 * its neighbours and from the same word of any other message; the last partial word is cut. */
static inline uint64_t pattern_word(size_t w, uint64_t seed)
{
    return (uint64_t)(w + 1) * 0x9E3779B97F4A7C15ull ^ seed;
}

static inline uint64_t pattern_seed(size_t size, int src, int tag)
{
    return ((uint64_t)size << 24) ^ ((uint64_t)(unsigned)src << 16) ^ (uint64_t)(unsigned)tag;
}

static void fill(unsigned char *buf, size_t size, int src, int tag)
{
    uint64_t seed = pattern_seed(size, src, tag);
    size_t words = size / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t v = pattern_word(w, seed);
        memcpy(buf + 8 * w, &v, 8);
    }
    uint64_t v = pattern_word(words, seed);
    memcpy(buf + 8 * words, &v, size % 8);
}

/* Offset of the first wrong byte, or -1 if all `size` bytes match. */
static long verify(const unsigned char *buf, size_t size, int src, int tag)
{
    uint64_t seed = pattern_seed(size, src, tag);
    size_t words = size / 8;
    for (size_t w = 0; w <= words; w++) {
        uint64_t v = pattern_word(w, seed);
        size_t n = w < words ? 8 : size % 8;
        if (memcmp(buf + 8 * w, &v, n) != 0) {
            for (size_t i = 0; i < n; i++) {
                if (buf[8 * w + i] != ((const unsigned char *)&v)[i]) {
                    return (long)(8 * w + i);
                }
            }
        }
    }
    return -1;
}

static int partner(void)
{
    return rank ^ 1;
}

#define MAX_SIZE (64u << 20)

static size_t sizes[128];
static int nsizes;

/* 0, 1, 7, 8, every power of two up to 64 MiB, and odd sizes on both sides of the powers of two
 * from 256 B to 1 MiB, where eager (short, bcopy, zcopy) and rendezvous thresholds of UCX and rucx
 * lie, plus a few sizes that are not near a power of two. */
static void make_sizes(void)
{
    size_t extra[] = {0, 1, 7, 8, 1000, 12345, 100000, 1000003, 5000011, MAX_SIZE - 1};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
        sizes[nsizes++] = extra[i];
    }
    for (size_t s = 16; s <= MAX_SIZE; s *= 2) {
        sizes[nsizes++] = s;
        if (s >= 256 && s <= (1u << 20)) {
            sizes[nsizes++] = s - 1;
            sizes[nsizes++] = s + 1;
        }
    }
}

static unsigned char *sbuf, *rbuf;

/* Blocking MPI_Send / MPI_Recv in pairs, both directions, every size. */
static void blocking_pairs(void)
{
    char name[64];
    for (int k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        int tag = k;
        int peer = partner();
        MPI_Status st;
        int count = -1;
        fill(sbuf, size, rank, tag);
        memset(rbuf, 0xA5, size + 1);
        if (rank % 2 == 0) {
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
            MPI_Send(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        long bad = verify(rbuf, size, peer, tag);
        snprintf(name, sizeof(name), "send-recv %zu B", size);
        check(bad < 0 && count == (int)size && st.MPI_SOURCE == peer && st.MPI_TAG == tag &&
                  rbuf[size] == 0xA5,
              name, "first bad byte %ld, count %d, source %d, tag %d, byte past end 0x%02x", bad,
              count, st.MPI_SOURCE, st.MPI_TAG, rbuf[size]);
    }
}

/* MPI_Irecv / MPI_Isend around a ring (left neighbour to right), every size. */
static void nonblocking_ring(void)
{
    char name[64];
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    for (int k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        int tag = 1000 + k;
        MPI_Request req[2];
        MPI_Status st[2];
        int count = -1;
        fill(sbuf, size, rank, tag);
        memset(rbuf, 0x5A, size + 1);
        MPI_Irecv(rbuf, (int)size, MPI_BYTE, left, tag, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(sbuf, (int)size, MPI_BYTE, right, tag, MPI_COMM_WORLD, &req[1]);
        MPI_Waitall(2, req, st);
        MPI_Get_count(&st[0], MPI_BYTE, &count);
        long bad = verify(rbuf, size, left, tag);
        snprintf(name, sizeof(name), "isend-irecv %zu B", size);
        check(bad < 0 && count == (int)size && st[0].MPI_SOURCE == left && rbuf[size] == 0x5A,
              name, "first bad byte %ld, count %d, source %d", bad, count, st[0].MPI_SOURCE);
    }
}

/* Many small and a few large messages in flight at once to the same peer: ordering per tag and
 * source must hold (MPI's non-overtaking rule), checked by a sequence number in each message. */
static void many_in_flight(void)
{
    enum { N = 64 };
    static MPI_Request req[2 * N];
    static MPI_Status st[2 * N];
    static int out[N][256], in[N][256];
    int peer = partner(), ok = 1;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 256; j++) {
            out[i][j] = rank * 100000 + i * 256 + j;
            in[i][j] = -1;
        }
    }
    /* Same tag for all: messages must match in the order they were sent. Odd ones are large
     * enough (a whole row of 1 KiB vs. a 4-byte prefix) to mix protocols. */
    for (int i = 0; i < N; i++) {
        int n = (i % 2) ? 256 : 1;
        MPI_Irecv(in[i], n, MPI_INT, peer, 7, MPI_COMM_WORLD, &req[i]);
    }
    for (int i = 0; i < N; i++) {
        int n = (i % 2) ? 256 : 1;
        MPI_Isend(out[i], n, MPI_INT, peer, 7, MPI_COMM_WORLD, &req[N + i]);
    }
    MPI_Waitall(2 * N, req, st);
    for (int i = 0; i < N && ok; i++) {
        int n = (i % 2) ? 256 : 1;
        for (int j = 0; j < n; j++) {
            if (in[i][j] != peer * 100000 + i * 256 + j) {
                ok = 0;
                check(0, "64 in flight, non-overtaking order", "message %d int %d is %d", i, j,
                      in[i][j]);
                break;
            }
        }
    }
    if (ok) {
        check(1, "64 in flight, non-overtaking order", "");
    }
}

/* Rank 0 receives one small and one large message from every other rank with MPI_ANY_SOURCE
 * and MPI_ANY_TAG; the status says who sent which. */
static void any_source_any_tag(void)
{
    const size_t sizes2[2] = {24, 3u << 20};
    for (int r = 0; r < 2; r++) {
        size_t size = sizes2[r];
        char name[64];
        snprintf(name, sizeof(name), "any-source any-tag %zu B", size);
        if (rank == 0) {
            int seen[64] = {0}, ok = 1;
            for (int i = 1; i < nranks; i++) {
                MPI_Status st;
                int count = -1;
                memset(rbuf, 0, size);
                MPI_Recv(rbuf, (int)size, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                         &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                int src = st.MPI_SOURCE;
                if (src <= 0 || src >= nranks || seen[src] || st.MPI_TAG != 500 + src ||
                    count != (int)size || verify(rbuf, size, src, st.MPI_TAG) >= 0) {
                    check(0, name, "source %d tag %d count %d", src, st.MPI_TAG, count);
                    ok = 0;
                    break;
                }
                seen[src] = 1;
            }
            if (ok) {
                check(1, name, "");
            }
        } else {
            fill(sbuf, size, rank, 500 + rank);
            MPI_Send(sbuf, (int)size, MPI_BYTE, 0, 500 + rank, MPI_COMM_WORLD);
        }
        /* The large round's messages must not meet the small round's receives. */
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* Odd ranks send; even ranks learn size and tag with MPI_Probe, MPI_Iprobe, MPI_Mprobe and
 * MPI_Improbe before receiving, small (eager) and large (rendezvous) messages. */
static void probes(void)
{
    const size_t psizes[2] = {100, 1u << 20};
    int peer = partner();
    for (int r = 0; r < 2; r++) {
        size_t size = psizes[r];
        char name[64];
        if (rank % 2 == 1) {
            for (int t = 0; t < 4; t++) {
                fill(sbuf, size + t, rank, 600 + t);
                MPI_Send(sbuf, (int)(size + t), MPI_BYTE, peer, 600 + t, MPI_COMM_WORLD);
            }
            continue;
        }
        MPI_Status st;
        int count = -1, flag = 0;

        /* MPI_Probe on a specific tag, then MPI_Recv of exactly the probed count. */
        MPI_Probe(peer, 600, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        snprintf(name, sizeof(name), "probe %zu B", size);
        check(count == (int)size && st.MPI_SOURCE == peer && st.MPI_TAG == 600, name,
              "count %d source %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
        MPI_Recv(rbuf, count, MPI_BYTE, peer, 600, MPI_COMM_WORLD, &st);
        snprintf(name, sizeof(name), "recv after probe %zu B", size);
        check(verify(rbuf, size, peer, 600) < 0, name, "data differs");

        /* MPI_Iprobe with MPI_ANY_TAG until it finds the next message (tag 601). */
        while (!flag) {
            MPI_Iprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        snprintf(name, sizeof(name), "iprobe any-tag %zu B", size + 1);
        check(count == (int)size + 1 && st.MPI_TAG == 601, name, "count %d tag %d", count,
              st.MPI_TAG);
        MPI_Recv(rbuf, count, MPI_BYTE, peer, st.MPI_TAG, MPI_COMM_WORLD, &st);
        snprintf(name, sizeof(name), "recv after iprobe %zu B", size + 1);
        check(verify(rbuf, size + 1, peer, 601) < 0, name, "data differs");

        /* MPI_Mprobe / MPI_Mrecv: the matched message is taken off the queue. */
        MPI_Message msg;
        MPI_Mprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        snprintf(name, sizeof(name), "mprobe %zu B", size + 2);
        check(count == (int)size + 2 && st.MPI_TAG == 602, name, "count %d tag %d", count,
              st.MPI_TAG);
        memset(rbuf, 0, size + 2);
        MPI_Mrecv(rbuf, count, MPI_BYTE, &msg, &st);
        snprintf(name, sizeof(name), "mrecv %zu B", size + 2);
        check(verify(rbuf, size + 2, peer, 602) < 0 && msg == MPI_MESSAGE_NULL, name,
              "data differs or message handle not freed");

        /* MPI_Improbe until found, then MPI_Imrecv + MPI_Wait. */
        flag = 0;
        while (!flag) {
            MPI_Improbe(peer, 603, MPI_COMM_WORLD, &flag, &msg, &st);
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        MPI_Request req;
        memset(rbuf, 0, size + 3);
        MPI_Imrecv(rbuf, count, MPI_BYTE, &msg, &req);
        MPI_Wait(&req, &st);
        snprintf(name, sizeof(name), "improbe-imrecv %zu B", size + 3);
        check(count == (int)size + 3 && verify(rbuf, size + 3, peer, 603) < 0, name,
              "count %d or data differs", count);
    }
    /* Nothing is left over: an Iprobe for any message from the peer finds none. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank % 2 == 0) {
        int flag = 1;
        MPI_Iprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        check(!flag, "iprobe finds no leftover message", "a message is still queued");
    }
}

/* MPI_Ssend completes only once the receive is matched; MPI_Issend stays incomplete while the
 * receiver is held back by a barrier it cannot pass until the sender gets there too. */
static void synchronous(void)
{
    const size_t ssizes[3] = {0, 64, 2u << 20};
    int peer = partner();
    for (int r = 0; r < 3; r++) {
        size_t size = ssizes[r];
        char name[64];
        if (rank % 2 == 1) {
            fill(sbuf, size, rank, 700);
            MPI_Ssend(sbuf, (int)size, MPI_BYTE, peer, 700, MPI_COMM_WORLD);
        } else {
            MPI_Status st;
            int count = -1;
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 700, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            snprintf(name, sizeof(name), "ssend %zu B", size);
            check(count == (int)size && verify(rbuf, size, peer, 700) < 0, name,
                  "count %d or data differs", count);
        }
    }
    for (int r = 0; r < 3; r++) {
        size_t size = ssizes[r];
        char name[64];
        snprintf(name, sizeof(name), "issend waits for the receive %zu B", size);
        if (rank % 2 == 1) {
            MPI_Request req;
            int flag = 0, early = 0;
            fill(sbuf, size, rank, 701);
            MPI_Issend(sbuf, (int)size, MPI_BYTE, peer, 701, MPI_COMM_WORLD, &req);
            for (int i = 0; i < 20000 && !early; i++) {
                MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
                early = flag;
            }
            MPI_Barrier(MPI_COMM_WORLD);
            if (!early) {
                MPI_Wait(&req, MPI_STATUS_IGNORE);
            }
            check(!early, name, "completed before the receiver posted its receive");
        } else {
            MPI_Status st;
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, 701, MPI_COMM_WORLD, &st);
            check(verify(rbuf, size, peer, 701) < 0, name, "data differs");
        }
    }
}

/* An MPI_Irecv that nothing matches is cancelled; a later message with the same tag goes to the
 * next receive, not to the cancelled one. */
static void cancel_recv(void)
{
    int peer = partner();
    MPI_Request req;
    MPI_Status st;
    int flag = 0;
    static unsigned char cancelled[64];
    memset(cancelled, 0x11, sizeof(cancelled));
    MPI_Irecv(cancelled, sizeof(cancelled), MPI_BYTE, peer, 800, MPI_COMM_WORLD, &req);
    MPI_Cancel(&req);
    MPI_Wait(&req, &st);
    MPI_Test_cancelled(&st, &flag);
    check(flag, "cancel of a posted irecv", "MPI_Test_cancelled says not cancelled");
    MPI_Barrier(MPI_COMM_WORLD);
    fill(sbuf, 64, rank, 800);
    MPI_Sendrecv(sbuf, 64, MPI_BYTE, peer, 800, rbuf, 64, MPI_BYTE, peer, 800, MPI_COMM_WORLD,
                 &st);
    int untouched = 1;
    for (size_t i = 0; i < sizeof(cancelled); i++) {
        untouched &= cancelled[i] == 0x11;
    }
    check(untouched && verify(rbuf, 64, peer, 800) < 0, "message after cancel goes to next recv",
          "cancelled buffer touched %d, data ok %d", !untouched, verify(rbuf, 64, peer, 800) < 0);
}

/* A message longer than the receive buffer: MPI_ERR_TRUNCATE under MPI_ERRORS_RETURN, for an
 * eager and a rendezvous message, blocking and non-blocking; the connection keeps working. */
static void truncation(void)
{
    const size_t tsizes[2] = {100, 4u << 20};
    int peer = partner();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int r = 0; r < 2; r++) {
        size_t size = tsizes[r];
        char name[64];
        if (rank % 2 == 1) {
            fill(sbuf, size, rank, 900);
            int rc1 = MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 900, MPI_COMM_WORLD);
            int rc2 = MPI_Send(sbuf, (int)size, MPI_BYTE, peer, 901, MPI_COMM_WORLD);
            snprintf(name, sizeof(name), "send of a truncated message %zu B", size);
            check(rc1 == MPI_SUCCESS && rc2 == MPI_SUCCESS, name, "rc %d %d", rc1, rc2);
        } else {
            MPI_Status st;
            MPI_Request req;
            int cls = -1;
            size_t small = size / 2;
            int rc = MPI_Recv(rbuf, (int)small, MPI_BYTE, peer, 900, MPI_COMM_WORLD, &st);
            MPI_Error_class(rc, &cls);
            snprintf(name, sizeof(name), "recv truncate %zu into %zu B", size, small);
            check(cls == MPI_ERR_TRUNCATE, name, "error class %d, want MPI_ERR_TRUNCATE %d", cls,
                  MPI_ERR_TRUNCATE);
            MPI_Irecv(rbuf, (int)small, MPI_BYTE, peer, 901, MPI_COMM_WORLD, &req);
            rc = MPI_Wait(&req, &st);
            cls = -1;
            MPI_Error_class(rc, &cls);
            snprintf(name, sizeof(name), "irecv truncate %zu into %zu B", size, small);
            check(cls == MPI_ERR_TRUNCATE, name, "error class %d, want MPI_ERR_TRUNCATE %d", cls,
                  MPI_ERR_TRUNCATE);
        }
    }
    /* The pair still talks after the truncations. */
    fill(sbuf, 4096, rank, 902);
    MPI_Status st;
    int rc = MPI_Sendrecv(sbuf, 4096, MPI_BYTE, peer, 902, rbuf, 4096, MPI_BYTE, peer, 902,
                          MPI_COMM_WORLD, &st);
    check(rc == MPI_SUCCESS && verify(rbuf, 4096, peer, 902) < 0, "exchange after truncation",
          "rc %d", rc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* A non-contiguous MPI_Type_vector sent and received three ways: vector to contiguous,
 * contiguous to vector, vector to vector; the gaps of a receiving vector stay untouched. */
static void derived_datatype(void)
{
    const int counts[2] = {50, 200000}; /* 600 B and 2.4 MB of payload */
    int peer = partner();
    for (int r = 0; r < 2; r++) {
        int count = counts[r], blocklen = 3, stride = 7;
        size_t span = (size_t)count * stride;
        int *vec = malloc(span * sizeof(int)), *flat = malloc((size_t)count * blocklen * sizeof(int));
        MPI_Datatype vt;
        char name[80];
        MPI_Type_vector(count, blocklen, stride, MPI_INT, &vt);
        MPI_Type_commit(&vt);
        /* Each element's value names its position in the vector and its sender. */
#define VAL(src, i) ((src) * 10000000 + (int)(i))
        for (int mode = 0; mode < 3; mode++) {
            MPI_Status st;
            if (rank % 2 == 1) {
                if (mode == 1) { /* contiguous out */
                    for (size_t i = 0; i < (size_t)count * blocklen; i++) {
                        flat[i] = VAL(rank, (i / blocklen) * stride + i % blocklen);
                    }
                    MPI_Send(flat, count * blocklen, MPI_INT, peer, 1000 + mode, MPI_COMM_WORLD);
                } else { /* vector out */
                    for (size_t i = 0; i < span; i++) {
                        vec[i] = (i % stride < (size_t)blocklen) ? VAL(rank, i) : -7;
                    }
                    MPI_Send(vec, 1, vt, peer, 1000 + mode, MPI_COMM_WORLD);
                }
                continue;
            }
            int bad = -1;
            if (mode == 0) { /* vector in as contiguous ints */
                for (size_t i = 0; i < (size_t)count * blocklen; i++) {
                    flat[i] = -1;
                }
                MPI_Recv(flat, count * blocklen, MPI_INT, peer, 1000 + mode, MPI_COMM_WORLD, &st);
                for (size_t i = 0; i < (size_t)count * blocklen && bad < 0; i++) {
                    if (flat[i] != VAL(peer, (i / blocklen) * stride + i % blocklen)) {
                        bad = (int)i;
                    }
                }
            } else { /* into a vector: data in the blocks, gaps untouched */
                for (size_t i = 0; i < span; i++) {
                    vec[i] = -2;
                }
                MPI_Recv(vec, 1, vt, peer, 1000 + mode, MPI_COMM_WORLD, &st);
                for (size_t i = 0; i < span && bad < 0; i++) {
                    int want = (i % stride < (size_t)blocklen) ? VAL(peer, i) : -2;
                    if (vec[i] != want) {
                        bad = (int)i;
                    }
                }
            }
            static const char *modes[3] = {"vector to contiguous", "contiguous to vector",
                                           "vector to vector"};
            snprintf(name, sizeof(name), "type_vector %s %zu B", modes[mode],
                     (size_t)count * blocklen * sizeof(int));
            check(bad < 0, name, "first bad int at %d", bad);
        }
#undef VAL
        MPI_Type_free(&vt);
        free(vec);
        free(flat);
    }
}

static void collectives(void)
{
    char name[64];
    int ok;

    /* Barrier: every rank's pre-barrier send is visible after it (message matched by then). */
    MPI_Barrier(MPI_COMM_WORLD);
    check(1, "barrier", "");

    /* Bcast from each root, small and 4 MiB. */
    const size_t bsizes[2] = {13, 4u << 20};
    for (int r = 0; r < 2; r++) {
        for (int root = 0; root < nranks; root++) {
            size_t size = bsizes[r];
            if (rank == root) {
                fill(rbuf, size, root, 1100);
            } else {
                memset(rbuf, 0, size);
            }
            MPI_Bcast(rbuf, (int)size, MPI_BYTE, root, MPI_COMM_WORLD);
            long bad = verify(rbuf, size, root, 1100);
            snprintf(name, sizeof(name), "bcast %zu B root %d", size, root);
            check(bad < 0, name, "first bad byte %ld", bad);
        }
    }

    /* Allreduce: sum of ints (small) and of doubles (1 Mi elements), max of ints. */
    {
        int v[3] = {rank + 1, rank * rank, -rank}, out[3];
        MPI_Allreduce(v, out, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int n = nranks, s1 = n * (n + 1) / 2, s2 = (n - 1) * n * (2 * n - 1) / 6, s3 = -(n - 1) * n / 2;
        check(out[0] == s1 && out[1] == s2 && out[2] == s3, "allreduce sum int", "%d %d %d", out[0],
              out[1], out[2]);
        MPI_Allreduce(v, out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        check(out[0] == n, "allreduce max int", "%d", out[0]);

        size_t m = 1u << 20;
        double *d = malloc(m * sizeof(double)), *dr = malloc(m * sizeof(double));
        for (size_t i = 0; i < m; i++) {
            d[i] = (double)(i % 1000) + rank * 0.5;
        }
        MPI_Allreduce(d, dr, (int)m, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        ok = 1;
        for (size_t i = 0; i < m && ok; i++) {
            double want = (double)(i % 1000) * n + 0.5 * (n - 1) * n / 2;
            ok = dr[i] == want;
        }
        check(ok, "allreduce sum double 8 MiB", "wrong sum");
        free(d);
        free(dr);
    }

    /* Allgather: each rank contributes 1000 ints naming itself. */
    {
        enum { K = 1000 };
        int *mine = malloc(K * sizeof(int)), *all = malloc((size_t)K * nranks * sizeof(int));
        for (int i = 0; i < K; i++) {
            mine[i] = rank * K + i;
        }
        MPI_Allgather(mine, K, MPI_INT, all, K, MPI_INT, MPI_COMM_WORLD);
        ok = 1;
        for (int i = 0; i < K * nranks && ok; i++) {
            ok = all[i] == i;
        }
        check(ok, "allgather", "wrong data");
        free(mine);
        free(all);
    }

    /* Alltoall: block j of rank i's send goes to rank j as block i; small and 256 KiB blocks. */
    const int kblocks[2] = {4, 65536};
    for (int r = 0; r < 2; r++) {
        int K = kblocks[r];
        int *out = malloc((size_t)K * nranks * sizeof(int)), *in = malloc((size_t)K * nranks * sizeof(int));
        for (int j = 0; j < nranks; j++) {
            for (int i = 0; i < K; i++) {
                out[j * K + i] = (rank * 64 + j) * K + i;
                in[j * K + i] = -1;
            }
        }
        MPI_Alltoall(out, K, MPI_INT, in, K, MPI_INT, MPI_COMM_WORLD);
        ok = 1;
        for (int j = 0; j < nranks && ok; j++) {
            for (int i = 0; i < K && ok; i++) {
                ok = in[j * K + i] == (j * 64 + rank) * K + i;
            }
        }
        snprintf(name, sizeof(name), "alltoall %zu B blocks", (size_t)K * sizeof(int));
        check(ok, name, "wrong data");
        free(out);
        free(in);
    }

    /* Scatter from the last rank: 100000 ints per rank. */
    {
        enum { K = 100000 };
        int root = nranks - 1;
        int *all = NULL, *mine = malloc(K * sizeof(int));
        if (rank == root) {
            all = malloc((size_t)K * nranks * sizeof(int));
            for (int i = 0; i < K * nranks; i++) {
                all[i] = 3 * i + 1;
            }
        }
        MPI_Scatter(all, K, MPI_INT, mine, K, MPI_INT, root, MPI_COMM_WORLD);
        ok = 1;
        for (int i = 0; i < K && ok; i++) {
            ok = mine[i] == 3 * (rank * K + i) + 1;
        }
        check(ok, "scatter", "wrong data");
        free(all);
        free(mine);
    }

    /* Reduce to rank 1: sum and min over 300000 longs. */
    {
        enum { K = 300000 };
        long *v = malloc(K * sizeof(long)), *out = malloc(K * sizeof(long));
        for (int i = 0; i < K; i++) {
            v[i] = (long)i * (rank + 1);
        }
        MPI_Reduce(v, out, K, MPI_LONG, MPI_SUM, 1, MPI_COMM_WORLD);
        if (rank == 1) {
            long f = (long)nranks * (nranks + 1) / 2;
            ok = 1;
            for (int i = 0; i < K && ok; i++) {
                ok = out[i] == (long)i * f;
            }
            check(ok, "reduce sum long", "wrong sum");
        }
        MPI_Reduce(v, out, K, MPI_LONG, MPI_MIN, 1, MPI_COMM_WORLD);
        if (rank == 1) {
            ok = 1;
            for (int i = 0; i < K && ok; i++) {
                ok = out[i] == (long)i;
            }
            check(ok, "reduce min long", "wrong min");
        }
        free(v);
        free(out);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    /* With a folder argument each rank writes its lines to FOLDER/rank-R.txt: launchers merge
     * the ranks' stdout streams at arbitrary byte boundaries. */
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
    if (nranks < 2 || nranks % 2 != 0 || nranks > 64) {
        check(0, "rank count", "needs an even number of ranks from 2 to 64, got %d", nranks);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    make_sizes();
    sbuf = malloc(MAX_SIZE + 1);
    rbuf = malloc(MAX_SIZE + 1);
    if (sbuf == NULL || rbuf == NULL) {
        check(0, "buffers", "cannot allocate 2 x 64 MiB");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* A barrier between phases keeps one phase's messages away from the next one's wildcard
     * receives and probes. */
    void (*phases[])(void) = {blocking_pairs, nonblocking_ring, many_in_flight,
                              any_source_any_tag, probes, synchronous, cancel_recv,
                              truncation, derived_datatype, collectives};
    static const char *phase_names[] = {"blocking_pairs", "nonblocking_ring", "many_in_flight",
                                        "any_source_any_tag", "probes", "synchronous",
                                        "cancel_recv", "truncation", "derived_datatype",
                                        "collectives"};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        double t0 = MPI_Wtime();
        phases[i]();
        MPI_Barrier(MPI_COMM_WORLD);
        printf("rank %d time %s %.3f s\n", rank, phase_names[i], MPI_Wtime() - t0);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d done %d %d\n", rank, checks, failures);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
