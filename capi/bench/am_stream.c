/*
 * The active-message and stream paths through UCX's C API, timed the same way on any
 * libucp.so.0 (run it with LD_LIBRARY_PATH pointing at rucx's libraries or not at all): a
 * forked peer, worker addresses through a pipe, busy progress.
 *   am_stream TEST SIZE ITERS     TEST: am_lat | am_bw | stream_lat | stream_bw | tag_lat
 * Prints "TEST SIZE <us per message (lat: half round trip)> <MB/s>". UCX_TLS as usual; pin the
 * process with taskset (the peer is forked onto the next core given).
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static ucp_worker_h w;
static volatile size_t am_count;
static size_t am_bytes;
/* A message that came by rendezvous, received by am_wait into `rbuf`. */
static void *rndv_desc;
static size_t rndv_len;
static char *rbuf;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static ucs_status_t on_am(void *arg, const void *h, size_t hl, void *data, size_t len,
                          const ucp_am_recv_param_t *p)
{
    (void)arg, (void)h, (void)hl;
    if (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        rndv_desc = data;
        rndv_len = len;
        return UCS_INPROGRESS;
    }
    am_count++;
    am_bytes += len;
    return UCS_OK;
}

static void wait_req(void *r)
{
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        if (UCS_PTR_IS_ERR(r)) {
            fprintf(stderr, "request failed: %s\n", ucs_status_string(UCS_PTR_STATUS(r)));
            exit(1);
        }
        return;
    }
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
}

static void am_send(ucp_ep_h ep, void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    wait_req(ucp_am_send_nbx(ep, 1, NULL, 0, buf, len, &p));
}

static void am_wait(size_t n)
{
    while (am_count < n) {
        ucp_worker_progress(w);
        if (rndv_desc != NULL) {
            void *d = rndv_desc;
            size_t len = rndv_len;
            rndv_desc = NULL;
            ucp_request_param_t p = {.op_attr_mask = 0};
            wait_req(ucp_am_recv_data_nbx(w, d, rbuf, len, &p));
            am_count++;
            am_bytes += len;
        }
    }
}

static void stream_send(ucp_ep_h ep, void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    wait_req(ucp_stream_send_nbx(ep, buf, len, &p));
}

static void tag_send(ucp_ep_h ep, void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    wait_req(ucp_tag_send_nbx(ep, buf, len, 7, &p));
}

static void tag_recv(void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    wait_req(ucp_tag_recv_nbx(w, buf, len, 7, ~0ull, &p));
}

static void stream_recv(ucp_ep_h ep, void *buf, size_t len)
{
    size_t got;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_STREAM_RECV_FLAG_WAITALL};
    wait_req(ucp_stream_recv_nbx(ep, buf, len, &got, &p));
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: am_stream am_lat|am_bw|stream_lat|stream_bw SIZE ITERS\n");
        return 2;
    }
    const char *test = argv[1];
    size_t size = strtoull(argv[2], NULL, 0), iters = strtoull(argv[3], NULL, 0);
    int lat = strstr(test, "lat") != NULL, am = strncmp(test, "am", 2) == 0;
    int tag = strncmp(test, "tag", 3) == 0;
    int p2c[2], c2p[2];
    if (pipe(p2c) || pipe(c2p)) return 1;
    pid_t pid = fork();
    int me = pid == 0;
    if (me) {
        /* The peer runs on the next CPU of the process's affinity, if there is one. */
        cpu_set_t s;
        if (sched_getaffinity(0, sizeof(s), &s) == 0 && CPU_COUNT(&s) > 1) {
            int first = -1;
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &s)) {
                    if (first < 0) {
                        first = c;
                        continue;
                    }
                    CPU_ZERO(&s);
                    CPU_SET(c, &s);
                    sched_setaffinity(0, sizeof(s), &s);
                    break;
                }
        }
    }
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_AM | UCP_FEATURE_STREAM | UCP_FEATURE_TAG};
    ucp_context_h c;
    if (ucp_init(&pp, NULL, &c) != UCS_OK) return 1;
    ucp_worker_params_t wp = {.field_mask = 0};
    if (ucp_worker_create(c, &wp, &w) != UCS_OK) return 1;
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = 1, .cb = on_am};
    ucp_worker_set_am_recv_handler(w, &hp);
    ucp_address_t *a;
    size_t al;
    ucp_worker_get_address(w, &a, &al);
    int wr = me ? c2p[1] : p2c[1], rd = me ? p2c[0] : c2p[0];
    char peer[8192];
    size_t pl;
    if (write(wr, &al, sizeof(al)) != sizeof(al) || write(wr, a, al) != (ssize_t)al) return 1;
    if (read(rd, &pl, sizeof(pl)) != sizeof(pl) || pl > sizeof(peer)) return 1;
    for (size_t got = 0; got < pl;) {
        ssize_t n = read(rd, peer + got, pl - got);
        if (n <= 0) return 1;
        got += n;
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = (ucp_address_t *)peer};
    ucp_ep_h e;
    if (ucp_ep_create(w, &ep, &e) != UCS_OK) return 1;
    char *buf = calloc(1, size ? size : 1);
    rbuf = calloc(1, size ? size : 1);
    size_t warm = iters / 10 + 1;
    double t0 = 0;
    for (size_t i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = now();
        if (lat) {
            /* Ping-pong: the parent sends first. */
            if (!me) {
                if (am) { am_send(e, buf, size); am_wait(i + 1); }
                else if (tag) { tag_send(e, buf, size); tag_recv(rbuf, size); }
                else { stream_send(e, buf, size); stream_recv(e, buf, size); }
            } else {
                if (am) { am_wait(i + 1); am_send(e, buf, size); }
                else if (tag) { tag_recv(rbuf, size); tag_send(e, buf, size); }
                else { stream_recv(e, buf, size); stream_send(e, buf, size); }
            }
        } else if (!me) {
            if (am) am_send(e, buf, size);
            else stream_send(e, buf, size);
        } else if (!am) {
            stream_recv(e, buf, size);
        }
    }
    if (!lat) {
        /* The receiver acknowledges the whole stream with one message. */
        if (me) {
            if (am) am_wait(warm + iters);
            am_send(e, buf, 1);
        } else {
            am_wait(1);
        }
    }
    double t = now() - t0;
    if (!me) {
        double per = t / iters * (lat ? 0.5 : 1.0) * 1e6;
        printf("%s %zu %.3f %.1f\n", test, size, per, size / per);
        wait(NULL);
    } else {
        /* Keep the endpoint until the parent has its last message. */
        for (int k = 0; k < 100000; k++) ucp_worker_progress(w);
    }
    return 0;
}
