/*
 * A peer dies while its partner waits: 2 ranks exchange a small and a large message (so the
 * connection and both protocols are set up), then rank 0 posts receives (a small and a 16 MiB
 * MPI_Irecv, then a blocking MPI_Recv) that only rank 1 could match, and rank 1 kills itself
 * with SIGKILL. The job must end with a non-zero status instead of hanging; run.sh runs it under
 * a watchdog and checks both.
 *
 * Usage: peer_death FOLDER; each rank writes its lines to FOLDER/rank-R.txt: "rank R libucp PATH"
 * (see libucp_path.h), "rank 0 waiting" once rank 0's receives are posted; "rank 1 dying" just before
 * the kill; "rank 0 recv returned RC" if rank 0's MPI_Recv comes back (it must come back with an
 * error, as MPI_ERRORS_RETURN is set; the process then exits 3).
 */
#include "libucp_path.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, nranks;
    size_t big = 16u << 20;
    char *buf = malloc(big), small[64];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2 || buf == NULL || argc < 2) {
        fprintf(stderr, "usage: peer_death FOLDER, with 2 ranks (and 16 MiB)\n");
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
    int peer = 1 - rank;
    memset(buf, rank, big);
    memset(small, rank, sizeof(small));
    /* Warm up: both directions, eager and rendezvous. */
    MPI_Sendrecv(small, sizeof(small), MPI_BYTE, peer, 1, small, sizeof(small), MPI_BYTE, peer, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv_replace(buf, (int)big, MPI_BYTE, peer, 2, peer, 2, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 1) {
        /* Give rank 0 time to post its receives; the test does not depend on it. */
        usleep(200 * 1000);
        printf("rank 1 dying\n");
        raise(SIGKILL);
        return 0; /* not reached */
    }

    MPI_Request req[2];
    MPI_Irecv(small, sizeof(small), MPI_BYTE, peer, 10, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(buf, (int)big, MPI_BYTE, peer, 11, MPI_COMM_WORLD, &req[1]);
    printf("rank 0 waiting\n");
    int rc = MPI_Recv(small, sizeof(small), MPI_BYTE, peer, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank 0 recv returned %d\n", rc);
    /* Whatever the MPI library does after a peer failure, this process must not report success. */
    return 3;
}
