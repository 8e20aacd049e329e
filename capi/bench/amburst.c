/*
 * Cost of a small active message for a receiver behind its sender (as in ucx_perftest's
 * ucp_am_bw), both sides in one thread, for amburst.sh.
 *
 * Usage: amburst SIZE BURSTS [BURST]
 * Two workers of one context in this process (UCX_TLS=posix, say); worker A sends BURST (32)
 * active messages of SIZE bytes with ucp_am_send_nbx (no user header) to a handler set with
 * ucp_worker_set_am_recv_handler on B, then B calls ucp_worker_progress until its handler has
 * seen all of them (A's sends that return a request, when a BURST larger than the FIFO meets
 * back-pressure, are progressed on both workers until they finish, then freed). One
 * thread does everything, so an instruction counter sees the same count run after run.
 * Prints "rank 0 libucp PATH", "ns_per_msg SIZE NS" (wall clock, after a warm-up) and
 * "progress_per_msg X" (B's ucp_worker_progress calls per message). Every message's first and
 * last bytes are checked, and a wrong one exits with 1.
 */
#include "../tests/mpi/libucp_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

static long got, sent;
static long progress_calls;

static void check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(st));
        exit(1);
    }
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)header;
    (void)header_length;
    (void)param;
    if (length > 0 && (((const char *)data)[0] != (char)got ||
                       ((const char *)data)[length - 1] != (char)got)) {
        fprintf(stderr, "active message %ld arrived wrong\n", got);
        exit(1);
    }
    got++;
    return UCS_OK;
}

static void burst(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, char *sbuf, size_t size, int n)
{
    ucp_request_param_t sp = {.op_attr_mask = 0};
    long want = got + n;
    for (int i = 0; i < n; i++) {
        if (size > 0) {
            sbuf[0] = sbuf[size - 1] = (char)sent;
        }
        sent++;
        void *req = ucp_am_send_nbx(ep, 7, NULL, 0, sbuf, size, &sp);
        if (UCS_PTR_IS_ERR(req)) {
            check(UCS_PTR_STATUS(req), "am send");
        }
        if (req != NULL) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) {
                ucp_worker_progress(a);
                ucp_worker_progress(b);
                progress_calls++;
            }
            ucp_request_free(req);
        }
    }
    while (got < want) {
        ucp_worker_progress(b);
        progress_calls++;
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: amburst SIZE BURSTS [BURST]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int bursts = atoi(argv[2]);
    int n = argc > 3 ? atoi(argv[3]) : 32;

    ucp_config_t *cfg;
    check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
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
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = 7,
                                 .cb = am_cb};
    check(ucp_worker_set_am_recv_handler(b, &hp), "set_am_recv_handler");

    char *sbuf = calloc(1, size + 1);
    if (sbuf == NULL) {
        return 1;
    }
    for (int i = 0; i < 10; i++) {
        burst(a, b, ep, sbuf, size, n);
    }
    progress_calls = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < bursts; i++) {
        burst(a, b, ep, sbuf, size, n);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    if (report_libucp(0) != 0) {
        return 1;
    }
    long msgs = (long)bursts * n;
    printf("ns_per_msg %zu %.1f\n", size, msgs > 0 ? ns / msgs : 0.0);
    printf("progress_per_msg %.3f\n", msgs > 0 ? (double)progress_calls / msgs : 0.0);

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
    return 0;
}
