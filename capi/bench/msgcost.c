/*
 * Cost of one tagged message through libucp, both sides in one thread, for instr-per-msg.sh.
 *
 * Usage: msgcost SIZE ITERS [expected|unexpected|idle|pml|am|stream]
 * Two workers of one context in this process; worker A has an endpoint to worker B (the
 * transport is whatever UCX_TLS allows between two workers of one process, e.g. UCX_TLS=posix
 * or UCX_TLS=tcp). Each iteration posts a receive on B and then sends SIZE bytes from A
 * ("expected"), or sends first and calls ucp_worker_progress on A and B in turn until the send
 * is complete and B's ucp_tag_probe_nb sees the message waiting unexpected, then posts the
 * receive ("unexpected"); then it progresses A and B in turn until both requests are complete. One thread does everything, so the work per message does
 * not depend on timing and an instruction counter (callgrind) sees the same count run after run.
 * Prints "rank 0 libucp PATH" and "ns_per_msg SIZE NS" (wall clock over ITERS, after a warm-up); the
 * first and last byte of every received message are checked, and a wrong one exits with 1.
 * MSGCOST_SELF_EP set: each worker also has an endpoint to itself, as MPICH opens one.
 * "idle" sends nothing after the warm-up: each iteration is one ucp_worker_progress call on
 * worker A with nothing to do (what a rank waiting for a message spins on). "pml" is "expected"
 * the way Open MPI's pml ucx does it: caller-supplied request memory (UCP_OP_ATTR_FIELD_REQUEST)
 * and completion found by ucp_request_test / ucp_request_check_status after each progress pair.
 * "am" sends each message with ucp_am_send_nbx (no user header) to a handler set with
 * ucp_worker_set_am_recv_handler on B that reads the data in place and returns UCS_OK.
 * "stream" posts ucp_stream_recv_nbx (WAITALL) on B's endpoint to A, then ucp_stream_send_nbx.
 * Both progress A and B in turn until the send and the arrival are complete.
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

/* What the active-message handler saw: set by am_cb, checked by one_message_am. */
static int am_got;
static char *am_dst;

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)header;
    (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        fprintf(stderr, "active message came by rendezvous\n");
        exit(1);
    }
    if (length > 0) {
        am_dst[0] = ((const char *)data)[0];
        am_dst[length - 1] = ((const char *)data)[length - 1];
    }
    am_got = 1;
    return UCS_OK;
}

static void stream_cb(void *req, ucs_status_t st, size_t length, void *user)
{
    (void)req;
    (void)length;
    (void)user;
    if (st != UCS_OK) {
        fprintf(stderr, "stream recv failed: %s\n", ucs_status_string(st));
        exit(1);
    }
    done_recv = 1;
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

/* One active message from A to B's handler (id 7), data only. */
static void one_message_am(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, char *sbuf, char *rbuf,
                           size_t size, int i)
{
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.send = send_cb};
    done_send = am_got = 0;
    am_dst = rbuf;
    if (size > 0) {
        sbuf[0] = sbuf[size - 1] = (char)i;
    }
    void *sreq = ucp_am_send_nbx(ep, 7, NULL, 0, sbuf, size, &sp);
    done_send |= started(sreq, "am send");
    while (!done_send || !am_got) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    if (sreq != NULL) {
        ucp_request_free(sreq);
    }
    if (size > 0 && (rbuf[0] != (char)i || rbuf[size - 1] != (char)i)) {
        fprintf(stderr, "active message %d arrived wrong\n", i);
        exit(1);
    }
}

/* One stream message from A to B: the receive (WAITALL) posted on B's endpoint first. */
static void one_message_stream(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, ucp_ep_h back,
                               char *sbuf, char *rbuf, size_t size, int i)
{
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.send = send_cb};
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
                              .cb.recv_stream = stream_cb,
                              .flags = UCP_STREAM_RECV_FLAG_WAITALL};
    size_t len = 0;
    done_send = done_recv = 0;
    if (size > 0) {
        sbuf[0] = sbuf[size - 1] = (char)i;
    }
    void *rreq = ucp_stream_recv_nbx(back, rbuf, size, &len, &rp);
    done_recv |= started(rreq, "stream recv");
    void *sreq = ucp_stream_send_nbx(ep, sbuf, size, &sp);
    done_send |= started(sreq, "stream send");
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
        fprintf(stderr, "stream message %d arrived wrong\n", i);
        exit(1);
    }
}

/* request_size of the context, for "pml" mode's caller-supplied request memory. */
static size_t req_size;

/* One message as Open MPI's pml ucx sends and receives it: request memory from the caller
 * (UCP_OP_ATTR_FIELD_REQUEST, request_size bytes before the pointer given), a callback with
 * user data, the receive posted first; then progress on both workers, testing the receive with
 * ucp_request_test and a send that did not finish at once with ucp_request_check_status. */
static void one_message_pml(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep, char *sbuf, char *rbuf,
                            size_t size, int i, char *smem, char *rmem)
{
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA |
                                              UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REQUEST,
                              .cb.send = send_cb,
                              .datatype = ucp_dt_make_contig(1),
                              .request = smem + req_size};
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA |
                                              UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REQUEST,
                              .cb.recv = recv_cb,
                              .datatype = ucp_dt_make_contig(1),
                              .request = rmem + req_size};
    if (size > 0) {
        sbuf[0] = sbuf[size - 1] = (char)i;
    }
    void *rreq = ucp_tag_recv_nbx(b, rbuf, size, 7, (ucp_tag_t)-1, &rp);
    void *sreq = ucp_tag_send_nbx(ep, sbuf, size, 7, &sp);
    int send_done = started(sreq, "send");
    ucp_tag_recv_info_t info;
    for (;;) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
        if (!send_done) {
            ucs_status_t st = ucp_request_check_status(sreq);
            send_done = st != UCS_INPROGRESS;
            check(send_done ? st : UCS_OK, "send");
        }
        ucs_status_t st = UCS_PTR_IS_PTR(rreq) ? ucp_request_test(rreq, &info) : UCS_PTR_STATUS(rreq);
        if (st != UCS_INPROGRESS && send_done) {
            check(st, "recv");
            break;
        }
    }
    if (size > 0 && (rbuf[0] != (char)i || rbuf[size - 1] != (char)i)) {
        fprintf(stderr, "message %d arrived wrong\n", i);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: msgcost SIZE ITERS [expected|unexpected|idle|pml|am|stream]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    int iters = atoi(argv[2]);
    int unexpected = argc > 3 && strcmp(argv[3], "unexpected") == 0;
    int idle = argc > 3 && strcmp(argv[3], "idle") == 0;
    int pml = argc > 3 && strcmp(argv[3], "pml") == 0;
    int am = argc > 3 && strcmp(argv[3], "am") == 0;
    int stream = argc > 3 && strcmp(argv[3], "stream") == 0;

    ucp_config_t *cfg;
    check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    /* The tag modes ask for the tag feature alone, as before the am and stream modes came. */
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = am ? UCP_FEATURE_AM
                                          : stream ? UCP_FEATURE_STREAM : UCP_FEATURE_TAG};
    ucp_context_h ctx;
    check(ucp_init(&params, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_context_attr_t cattr = {.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE};
    check(ucp_context_query(ctx, &cattr), "ucp_context_query");
    req_size = cattr.request_size;

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
    ucp_ep_h back = NULL;
    if (stream) {
        check(ucp_worker_get_address(a, &addr, &addr_len), "get_address a");
        ep_params.address = addr;
        check(ucp_ep_create(b, &ep_params, &back), "ep_create back");
        ucp_worker_release_address(a, addr);
    }
    if (getenv("MSGCOST_SELF_EP") != NULL) {
        /* An endpoint from each worker to itself, as MPICH opens one (UCX_TLS=posix,self: both
         * interfaces are then polled on every call). */
        ucp_worker_h ws[2] = {a, b};
        for (int w = 0; w < 2; w++) {
            ucp_ep_h self_ep;
            check(ucp_worker_get_address(ws[w], &addr, &addr_len), "get_address self");
            ep_params.address = addr;
            check(ucp_ep_create(ws[w], &ep_params, &self_ep), "ep_create self");
            ucp_worker_release_address(ws[w], addr);
        }
    }
    if (am) {
        ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                   UCP_AM_HANDLER_PARAM_FIELD_CB,
                                     .id = 7,
                                     .cb = am_cb};
        check(ucp_worker_set_am_recv_handler(b, &hp), "set_am_recv_handler");
    }

    char *sbuf = calloc(1, size + 1), *rbuf = calloc(1, size + 1);
    char *smem = aligned_alloc(64, (req_size + 64) / 64 * 64);
    char *rmem = aligned_alloc(64, (req_size + 64) / 64 * 64);
    if (sbuf == NULL || rbuf == NULL || smem == NULL || rmem == NULL) {
        return 1;
    }
    for (int i = 0; i < 100; i++) {
        if (am) {
            one_message_am(a, b, ep, sbuf, rbuf, size, i);
        } else if (stream) {
            one_message_stream(a, b, ep, back, sbuf, rbuf, size, i);
        } else if (pml) {
            one_message_pml(a, b, ep, sbuf, rbuf, size, i, smem, rmem);
        } else {
            one_message(a, b, ep, sbuf, rbuf, size, i, unexpected);
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) {
        if (idle) {
            ucp_worker_progress(a);
        } else if (am) {
            one_message_am(a, b, ep, sbuf, rbuf, size, i);
        } else if (stream) {
            one_message_stream(a, b, ep, back, sbuf, rbuf, size, i);
        } else if (pml) {
            one_message_pml(a, b, ep, sbuf, rbuf, size, i, smem, rmem);
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
    if (back != NULL) {
        creq = ucp_ep_close_nbx(back, &cp);
        while (creq != NULL && !UCS_PTR_IS_ERR(creq) &&
               ucp_request_check_status(creq) == UCS_INPROGRESS) {
            ucp_worker_progress(a);
            ucp_worker_progress(b);
        }
        if (creq != NULL && !UCS_PTR_IS_ERR(creq)) {
            ucp_request_free(creq);
        }
    }
    ucp_worker_destroy(a);
    ucp_worker_destroy(b);
    ucp_cleanup(ctx);
    free(sbuf);
    free(rbuf);
    free(smem);
    free(rmem);
    return 0;
}
