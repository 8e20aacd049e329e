/*
 * Traffic both ways at once through UCX's C API (libucp), so the same program runs on UCX 1.22,
 * Debian's UCX 1.13 and rucx's libucp.so.0 (pick one with LD_LIBRARY_PATH); ucx_perftest has no
 * such test. Two processes (this one and a forked child, pinned to two cores), a worker each,
 * worker addresses exchanged over a socketpair (no port, no network).
 *
 *   ucp_both_ways bibw|exchange SIZE ITERS [WINDOW] [CORE0 CORE1]
 *
 * bibw: both sides stream: WINDOW receives and WINDOW sends in flight on each, the worker
 * progressed once per iteration (as perftest's tag_bibw). exchange: each iteration both sides
 * post a receive, send one message and wait for both (as MPI_Sendrecv, perftest's
 * tag_exchange). Buffers are ordinary heap memory (malloc), as an application's. Prints one
 * line: "<test> <size> <MB/s per direction> <usec per iteration>" from the parent's clock,
 * which starts after ITERS/10 warm-up iterations and a barrier. A benchmark, not a test; the
 * received lengths are checked and a failure exits non-zero.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define TAG 0x77ull
#define MAX_WINDOW 256

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ucp_both_ways: %s: %s\n", what, why);
    exit(1);
}

static void check(ucs_status_t s, const char *what)
{
    if (s != UCS_OK) {
        die(what, ucs_status_string(s));
    }
}

static void xfer(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n <= 0) {
            die("side channel", n == 0 ? "peer closed" : strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

static void barrier(int fd)
{
    char c = 1;
    xfer(fd, &c, 1, 1);
    xfer(fd, &c, 1, 0);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int core)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        die("sched_setaffinity", strerror(errno));
    }
}

static ucp_worker_h worker;

/* Waits for a request of ucp_tag_send_nbx / ucp_tag_recv_nbx (NULL: done at once) and frees
 * it; a failed operation ends the program. */
static void wait_req(void *req, const char *what)
{
    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        die(what, ucs_status_string(UCS_PTR_STATUS(req)));
    }
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(req);
    check(s, what);
}

static size_t recv_len;

static void recv_done(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    (void)user;
    if (status == UCS_OK && info->length != recv_len) {
        fprintf(stderr, "ucp_both_ways: received %zu bytes, expected %zu\n", info->length,
                recv_len);
        exit(1);
    }
}

static void send_done(void *req, ucs_status_t status, void *user)
{
    (void)req;
    (void)status;
    (void)user;
}

static void *post_recv(void *buf, size_t size)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                             .cb.recv = recv_done};
    return ucp_tag_recv_nbx(worker, buf, size, TAG, (ucp_tag_t)-1, &p);
}

static void *post_send(ucp_ep_h ep, void *buf, size_t size)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_done};
    return ucp_tag_send_nbx(ep, buf, size, TAG, &p);
}

/* One side's loop over iterations [from, to). */
static void run(int bibw, ucp_ep_h ep, char **sbuf, char **rbuf, size_t size, long from,
                long to, int window)
{
    static void *sreq[MAX_WINDOW], *rreq[MAX_WINDOW];
    if (!bibw) {
        for (long i = from; i < to; i++) {
            void *r = post_recv(rbuf[0], size);
            wait_req(post_send(ep, sbuf[0], size), "send");
            wait_req(r, "receive");
        }
        return;
    }
    for (long i = from; i < to; i++) {
        int k = (int)(i % window);
        wait_req(rreq[k], "receive");
        rreq[k] = post_recv(rbuf[k], size);
        wait_req(sreq[k], "send");
        sreq[k] = post_send(ep, sbuf[k], size);
        ucp_worker_progress(worker);
    }
    for (int k = 0; k < window; k++) {
        wait_req(rreq[k], "receive");
        wait_req(sreq[k], "send");
        rreq[k] = sreq[k] = NULL;
    }
}

static void side(int fd, int core, int bibw, size_t size, long iters, int window, int parent)
{
    pin(core);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_config_t *config;
    ucp_context_h ctx;
    check(ucp_config_read(NULL, NULL, &config), "ucp_config_read");
    check(ucp_init(&params, config, &ctx), "ucp_init");
    ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    check(ucp_worker_create(ctx, &wp, &worker), "ucp_worker_create");
    ucp_address_t *addr;
    size_t alen;
    check(ucp_worker_get_address(worker, &addr, &alen), "ucp_worker_get_address");
    uint64_t len = alen, plen;
    xfer(fd, &len, sizeof(len), 1);
    xfer(fd, addr, alen, 1);
    xfer(fd, &plen, sizeof(plen), 0);
    if (plen == 0 || plen > (1 << 20)) {
        die("side channel", "bad address length");
    }
    void *peer = malloc(plen);
    xfer(fd, peer, plen, 0);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = peer};
    ucp_ep_h ep;
    check(ucp_ep_create(worker, &ep_params, &ep), "ucp_ep_create");
    int nbuf = bibw ? window : 1;
    char *sbuf[MAX_WINDOW], *rbuf[MAX_WINDOW];
    for (int k = 0; k < nbuf; k++) {
        sbuf[k] = malloc(size ? size : 1);
        rbuf[k] = malloc(size ? size : 1);
        if (sbuf[k] == NULL || rbuf[k] == NULL) {
            die("malloc", "out of memory");
        }
        memset(sbuf[k], 0x5a, size);
        memset(rbuf[k], 0, size);
    }
    recv_len = size;
    long warm = iters / 10;
    run(bibw, ep, sbuf, rbuf, size, 0, warm, window);
    barrier(fd);
    double t0 = now();
    run(bibw, ep, sbuf, rbuf, size, warm, warm + iters, window);
    double t = now() - t0;
    barrier(fd);
    if (parent) {
        printf("%s %zu %.2f %.3f\n", bibw ? "bibw" : "exchange", size,
               (double)size * iters / t / 1e6, t / iters * 1e6);
        fflush(stdout);
    }
    /* Both sides are done with the data; close without waiting for the peer. */
    void *close = ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE);
    if (close != NULL && !UCS_PTR_IS_ERR(close)) {
        while (ucp_request_check_status(close) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
        }
        ucp_request_free(close);
    }
    barrier(fd);
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s bibw|exchange SIZE ITERS [WINDOW] [CORE0 CORE1]\n", argv[0]);
        return 2;
    }
    int bibw = strcmp(argv[1], "bibw") == 0;
    if (!bibw && strcmp(argv[1], "exchange") != 0) {
        die(argv[1], "the test is bibw or exchange");
    }
    size_t size = strtoull(argv[2], NULL, 0);
    long iters = strtol(argv[3], NULL, 0);
    int window = argc > 4 ? atoi(argv[4]) : 16;
    int c0 = argc > 6 ? atoi(argv[5]) : 0, c1 = argc > 6 ? atoi(argv[6]) : 1;
    if (iters < 10 || window < 1 || window > MAX_WINDOW) {
        die("arguments", "ITERS must be at least 10 and WINDOW 1..256");
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        die("socketpair", strerror(errno));
    }
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        die("fork", strerror(errno));
    }
    if (child == 0) {
        close(sv[0]);
        side(sv[1], c1, bibw, size, iters, window, 0);
        _exit(0);
    }
    close(sv[1]);
    side(sv[0], c0, bibw, size, iters, window, 1);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        die("child", "failed");
    }
    return 0;
}
