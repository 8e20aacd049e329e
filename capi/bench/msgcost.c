/*
 * Cost of one tagged message through libucp, both sides in one thread, for instr-per-msg.sh.
 *
 * Usage: msgcost SIZE ITERS [expected|unexpected|idle]
 * Two workers of one context in this process; worker A has an endpoint to worker B (the
 * transport is whatever UCX_TLS allows between two workers of one process, e.g. UCX_TLS=posix
 * or UCX_TLS=tcp). Each iteration posts a receive on B and then sends SIZE bytes from A
 * ("expected"), or sends first and calls ucp_worker_progress on A and B in turn until the send
 * is complete and B's ucp_tag_probe_nb sees the message waiting unexpected, then posts the
 * receive ("unexpected"); then it progresses A and B in turn until both requests are complete. One thread does everything, so the work per message does
 * not depend on timing and an instruction counter (callgrind) sees the same count run after run.
 * Prints "rank 0 libucp PATH" and "ns_per_msg SIZE NS" (wall clock over ITERS, after a warm-up); the
 * first and last byte of every received message are checked, and a wrong one exits with 1.
 * "idle" sends nothing after the warm-up: each iteration is one ucp_worker_progress call on
 * worker A with nothing to do (what a rank waiting for a message spins on).
 */
#include "../tests/mpi/libucp_path.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

static int done_send, done_recv;

static void send_cb(void *req, ucs_status_t st, void *user)
{
    (void)req;
    (void)user;
    if (st != UCS_OK) {
        fprintf(stderr, "send failed: %s\n", ucs_status_string(st));
        exit(1);
    }
    done_send = 1;
}

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    (void)info;
    (void)user;
    if (st != UCS_OK) {
        fprintf(stderr, "recv failed: %s\n", ucs_status_string(st));
        exit(1);
    }
    done_recv = 1;
}

static void check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(st));
        exit(1);
    }
}

/* Returns 1 when the operation completed at once, 0 when a request is pending. */
static int started(void *req, const char *what)
{
    if (req == NULL) {
        return 1;
    }
    if (UCS_PTR_IS_ERR(req)) {
        check(UCS_PTR_STATUS(req), what);
    }
    return 0;
}

static void one_message(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, char *sbuf, char *rbuf,
                        size_t size, int i, int unexpected)
{
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.send = send_cb};
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.recv = recv_cb};
    void *sreq = NULL, *rreq = NULL;
    done_send = done_recv = 0;
    if (size > 0) {
        sbuf[0] = sbuf[size - 1] = (char)i;
    }
    if (unexpected) {
        sreq = ucp_tag_send_nbx(ep, sbuf, size, 7, &sp);
        done_send |= started(sreq, "send");
        ucp_tag_recv_info_t info;
        while (!done_send || ucp_tag_probe_nb(b, 7, (ucp_tag_t)-1, 0, &info) == NULL) {
            ucp_worker_progress(a);
            ucp_worker_progress(b);
        }
    }
    rreq = ucp_tag_recv_nbx(b, rbuf, size, 7, (ucp_tag_t)-1, &rp);
    done_recv |= started(rreq, "recv");
    if (!unexpected) {
        sreq = ucp_tag_send_nbx(ep, sbuf, size, 7, &sp);
        done_send |= started(sreq, "send");
    }
    while (!done_send || !done_recv) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    if (sreq != NULL) {
        ucp_request_free(sreq);
    }
    if (rreq != NULL) {
        ucp_request_free(rreq);
    }
    if (size > 0 && (rbuf[0] != (char)i || rbuf[size - 1] != (char)i)) {
        fprintf(stderr, "message %d arrived wrong\n", i);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: msgcost SIZE ITERS [expected|unexpected]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int iters = atoi(argv[2]);
    int unexpected = argc > 3 && strcmp(argv[3], "unexpected") == 0;
    int idle = argc > 3 && strcmp(argv[3], "idle") == 0;

    ucp_config_t *cfg;
    check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    check(ucp_init(&params, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);

    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h a, b;
    check(ucp_worker_create(ctx, &wp, &a), "worker a");
    check(ucp_worker_create(ctx, &wp, &b), "worker b");
    ucp_address_t *addr;
    size_t addr_len;
    check(ucp_worker_get_address(b, &addr, &addr_len), "get_address");
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = addr};
    ucp_ep_h ep;
    check(ucp_ep_create(a, &ep_params, &ep), "ep_create");
    ucp_worker_release_address(b, addr);

    char *sbuf = calloc(1, size + 1), *rbuf = calloc(1, size + 1);
    if (sbuf == NULL || rbuf == NULL) {
        return 1;
    }
    for (int i = 0; i < 100; i++) {
        one_message(a, b, ep, sbuf, rbuf, size, i, unexpected);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) {
        if (idle) {
            ucp_worker_progress(a);
        } else {
            one_message(a, b, ep, sbuf, rbuf, size, i, unexpected);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    if (report_libucp(0) != 0) {
        return 1;
    }
    printf("ns_per_msg %zu %.1f\n", size, iters > 0 ? ns / iters : 0.0);

    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *creq = ucp_ep_close_nbx(ep, &cp);
    while (creq != NULL && !UCS_PTR_IS_ERR(creq) &&
           ucp_request_check_status(creq) == UCS_INPROGRESS) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    if (creq != NULL && !UCS_PTR_IS_ERR(creq)) {
        ucp_request_free(creq);
    }
    ucp_worker_destroy(a);
    ucp_worker_destroy(b);
    ucp_cleanup(ctx);
    free(sbuf);
    free(rbuf);
    return 0;
}
