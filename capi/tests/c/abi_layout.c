/*
 * rucx libucp C ABI test: compiled against UCX 1.13's installed headers (libucx-dev) and linked
 * against rucx's libucp.so.0. It checks that the struct sizes the headers give are the ones the
 * library is built for, and exercises every struct the library reads or writes through real
 * calls (so a field read at a wrong offset shows up as wrong behaviour): context and worker
 * parameters and attributes, two workers in one process exchanging tagged messages with
 * contiguous, IOV and generic datatypes, probe/msg_recv, cancel, truncation, request_size and
 * request_init/cleanup, caller-supplied requests, callbacks with user_data, immediate
 * completion and its recv_info, sync sends, RMA, active messages, refused input, and (in
 * compat_checks.h) where rucx is as lenient as UCX 1.13.
 *
 * Run through run.sh (or cargo test -p rucx-capi --test c_abi). Exit status 0 = pass.
 */
#include <ucp/api/ucp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)
#define REQUIRE(cond, ...)                                                 \
    do {                                                                   \
        int ok_ = !!(cond);                                                \
        CHECK(ok_, __VA_ARGS__);                                           \
        if (!ok_) {                                                        \
            fprintf(stderr, "FATAL: %s\n", #cond);                        \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#include "layout_checks.h"

/* ---- requests: the client's area --------------------------------------------------------- */

#define REQ_MAGIC 0x5eed5eedu
struct my_req {
    unsigned magic;
    int done;
    ucs_status_t status;
    size_t length;
    ucp_tag_t tag;
    void *user_data;
};
static int n_init, n_cleanup;
static void req_init(void *r)
{
    struct my_req *q = r;
    q->magic = REQ_MAGIC;
    q->done = 0;
    n_init++;
}
static void req_cleanup(void *r)
{
    struct my_req *q = r;
    CHECK(q->magic == REQ_MAGIC, "cleanup on memory that init did not see");
    n_cleanup++;
}

static void send_cb(void *r, ucs_status_t st, void *ud)
{
    struct my_req *q = r;
    CHECK(q->magic == REQ_MAGIC, "send callback on a request init did not see");
    q->done++;
    q->status = st;
    q->user_data = ud;
}
static void recv_cb(void *r, ucs_status_t st, const ucp_tag_recv_info_t *info, void *ud)
{
    struct my_req *q = r;
    CHECK(q->magic == REQ_MAGIC, "recv callback on a request init did not see");
    q->done++;
    q->status = st;
    q->length = info->length;
    q->tag = info->sender_tag;
    q->user_data = ud;
}
static void recv_cb_nb(void *r, ucs_status_t st, ucp_tag_recv_info_t *info)
{
    recv_cb(r, st, info, NULL);
}
static int old_send_done;
static void send_cb_nb(void *r, ucs_status_t st)
{
    (void)r;
    CHECK(st == UCS_OK, "%s", ucs_status_string(st));
    old_send_done++;
}

static ucp_worker_h W[2];
static void progress(void)
{
    ucp_worker_progress(W[0]);
    ucp_worker_progress(W[1]);
}

/* Waits for a request returned by an operation; gives its final status and frees it. */
static ucs_status_t wait_req(void *r)
{
    if (r == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(r)) {
        return UCS_PTR_STATUS(r);
    }
    ucs_status_t st;
    long spins = 0;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        progress();
        REQUIRE(++spins < 100000000L, "request never completed");
    }
    ucp_request_free(r);
    return st;
}

/* As wait_req, progressing one worker. */
static ucs_status_t wait_req_on(ucp_worker_h w, void *r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t st;
    long spins = 0;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        REQUIRE(++spins < 100000000L, "request never completed");
    }
    ucp_request_free(r);
    return st;
}

static void wait_done(struct my_req *q)
{
    long spins = 0;
    while (!q->done) {
        progress();
        REQUIRE(++spins < 100000000L, "callback never came");
    }
}

/* ---- generic datatype: every other int ----------------------------------------------------- */
struct strided { const int *src; int *dst; size_t count; };
static void *g_start_pack(void *ctx, const void *buf, size_t count)
{
    struct strided *s = calloc(1, sizeof(*s));
    (void)ctx;
    s->src = buf;
    s->count = count;
    return s;
}
static void *g_start_unpack(void *ctx, void *buf, size_t count)
{
    struct strided *s = calloc(1, sizeof(*s));
    (void)ctx;
    s->dst = buf;
    s->count = count;
    return s;
}
static size_t g_packed_size(void *state) { return ((struct strided *)state)->count * sizeof(int); }
static size_t g_pack(void *state, size_t offset, void *dest, size_t max)
{
    struct strided *s = state;
    size_t n = 0;
    for (size_t i = offset / sizeof(int); i < s->count && n + sizeof(int) <= max; i++) {
        memcpy((char *)dest + n, &s->src[2 * i], sizeof(int));
        n += sizeof(int);
    }
    return n;
}
static ucs_status_t g_unpack(void *state, size_t offset, const void *src, size_t len)
{
    struct strided *s = state;
    for (size_t k = 0; k + sizeof(int) <= len; k += sizeof(int)) {
        memcpy(&s->dst[2 * ((offset + k) / sizeof(int))], (const char *)src + k, sizeof(int));
    }
    return UCS_OK;
}
static int g_finished;
static void g_finish(void *state) { free(state); g_finished++; }

/* ---- active messages and errors ------------------------------------------------------------ */
static int am_calls;
static char am_data[64];
static ucs_status_t am_handler(void *arg, void *data, size_t length, ucp_ep_h reply_ep, unsigned flags)
{
    (void)reply_ep;
    (void)flags;
    CHECK(arg == (void *)0xabc, "am arg %p", arg);
    CHECK(length <= sizeof(am_data), "am length %zu", length);
    memcpy(am_data, data, length);
    am_calls++;
    return UCS_OK;
}

#include "compat_checks.h"
/* Progresses worker 0 from another thread (the worker is UCS_THREAD_MODE_MULTI) while the main
 * thread blocks in a call on worker 1 that needs its peer to answer (tcp's RMA does). */
static volatile int stop_helper;
static void *helper(void *arg)
{
    (void)arg;
    while (!stop_helper) {
        ucp_worker_progress(W[0]);
    }
    return NULL;
}

static void err_handler(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)arg; (void)ep; (void)st;
}

/* ---- peer failure: a child process killed with SIGKILL ------------------------------------ */
struct failure { int calls; ucs_status_t status; ucp_ep_h ep; };
static void failure_handler(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    struct failure *f = arg;
    f->calls++;
    f->status = st;
    f->ep = ep;
}

static void write_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        REQUIRE(k > 0, "pipe write");
        p = (const char *)p + k;
        n -= (size_t)k;
    }
}
static void read_all(int fd, void *p, size_t n)
{
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        REQUIRE(k > 0, "pipe read");
        p = (char *)p + k;
        n -= (size_t)k;
    }
}

/* The child: its own context and worker, an endpoint to the parent, one message to say it is
 * wired up, then progress until it is killed. */
static void child(int rd, int wr)
{
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    ucp_context_h c;
    ucp_worker_h w;
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    if (ucp_init(&p, NULL, &c) != UCS_OK || ucp_worker_create(c, &wp, &w) != UCS_OK) _exit(3);
    ucp_address_t *a;
    size_t len;
    if (ucp_worker_get_address(w, &a, &len) != UCS_OK) _exit(4);
    write_all(wr, &len, sizeof(len));
    write_all(wr, a, len);
    size_t plen;
    read_all(rd, &plen, sizeof(plen));
    void *pa = malloc(plen);
    read_all(rd, pa, plen);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = pa;
    ucp_ep_h e;
    if (ucp_ep_create(w, &ep, &e) != UCS_OK) _exit(5);
    static const char hello[] = "hello";
    ucp_request_param_t sp;
    memset(&sp, 0, sizeof(sp));
    void *s = ucp_tag_send_nbx(e, hello, sizeof(hello), 0xfeed, &sp);
    if (UCS_PTR_IS_ERR(s)) _exit(6);
    for (;;) ucp_worker_progress(w);
}

static void peer_failure(ucp_context_h ctx)
{
    int p2c[2], c2p[2];
    REQUIRE(pipe(p2c) == 0 && pipe(c2p) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        child(p2c[0], c2p[1]);
    }
    close(p2c[0]);
    close(c2p[1]);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    ucp_worker_h w;
    REQUIRE(ucp_worker_create(ctx, &wp, &w) == UCS_OK, "worker");
    ucp_address_t *a;
    size_t len;
    REQUIRE(ucp_worker_get_address(w, &a, &len) == UCS_OK, "address");
    write_all(p2c[1], &len, sizeof(len));
    write_all(p2c[1], a, len);
    ucp_worker_release_address(w, a);
    size_t clen;
    read_all(c2p[0], &clen, sizeof(clen));
    void *ca = malloc(clen);
    read_all(c2p[0], ca, clen);

    struct failure f = {0, UCS_OK, NULL};
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = ca;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = failure_handler;
    ep.err_handler.arg = &f;
    ucp_ep_h e;
    REQUIRE(ucp_ep_create(w, &ep, &e) == UCS_OK, "ep to the child");
    free(ca);

    char hello[16];
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    CHECK(wait_req_on(w, ucp_tag_recv_nbx(w, hello, sizeof(hello), 0xfeed, ~0ull, &rp)) == UCS_OK, "hello");
    /* A synchronous send the child never matches: it can only end with the child's death. */
    size_t big = 1 << 20;
    char *data = calloc(1, big);
    ucp_request_param_t sp;
    memset(&sp, 0, sizeof(sp));
    void *s = ucp_tag_send_sync_nbx(e, data, big, 0xbad, &sp);
    REQUIRE(s != NULL && !UCS_PTR_IS_ERR(s), "sync send to the child");
    for (int i = 0; i < 100; i++) ucp_worker_progress(w);
    CHECK(ucp_request_check_status(s) == UCS_INPROGRESS, "unmatched sync send completed");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    time_t t0 = time(NULL);
    ucs_status_t st;
    while ((st = ucp_request_check_status(s)) == UCS_INPROGRESS || f.calls == 0) {
        ucp_worker_progress(w);
        REQUIRE(time(NULL) - t0 < 120, "the peer's death was not reported (send %d, handler calls %d)", st, f.calls);
    }
    CHECK(st != UCS_OK, "the send to a dead peer succeeded");
    CHECK(f.calls == 1 && f.status != UCS_OK && f.ep == e, "error handler: %d calls, %s", f.calls, ucs_status_string(f.status));
    printf("peer failure: send ended with '%s', handler with '%s' after %lds\n", ucs_status_string(st),
           ucs_status_string(f.status), (long)(time(NULL) - t0));
    ucp_request_free(s);
    free(data);
    wait_req_on(w, ucp_ep_close_nb(e, UCP_EP_CLOSE_MODE_FORCE));
    ucp_worker_destroy(w);
    close(p2c[1]);
    close(c2p[0]);
}

int main(void)
{
    layout();

    unsigned maj, min, rel;
    ucp_get_version(&maj, &min, &rel);
    CHECK(maj == 1 && min == 22, "version %u.%u", maj, min);
    CHECK(strstr(ucp_get_version_string(), "rucx") != NULL,
          "the loaded libucp is not rucx's: %s", ucp_get_version_string());
    CHECK(strlen(ucs_status_string(UCS_ERR_CANCELED)) > 0, "-");

    /* Configuration: UCX_* names are read; a value naming nothing rucx has is refused. */
    ucp_config_t *cfg;
    const char *tls = getenv("UCX_TLS");
    setenv("UCX_TLS", "cuda_copy", 1);
    CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_ERR_INVALID_PARAM, "UCX_TLS=cuda_copy accepted");
    if (tls) setenv("UCX_TLS", tls, 1); else unsetenv("UCX_TLS");
    CHECK(ucp_config_read(NULL, NULL, NULL) == UCS_ERR_INVALID_PARAM, "NULL config_p");
    REQUIRE(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config_read");
    compat_config();

    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                        UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_REQUEST_CLEANUP |
                        UCP_PARAM_FIELD_NAME | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM;
    params.request_size = sizeof(struct my_req);
    params.request_init = req_init;
    params.request_cleanup = req_cleanup;
    params.name = "abi-test";
    params.estimated_num_eps = 2;
    ucp_context_h ctx;
    ucp_params_t bad = params;
    bad.field_mask |= 1ull << 40;
    CHECK(ucp_init(&bad, cfg, &ctx) == UCS_ERR_INVALID_PARAM, "unknown ucp_params bit");
    CHECK(ucp_init(NULL, cfg, &ctx) == UCS_ERR_INVALID_PARAM, "NULL params");
    REQUIRE(ucp_init(&params, cfg, &ctx) == UCS_OK, "ucp_init");
    ucp_config_release(cfg);

    ucp_context_attr_t cattr;
    memset(&cattr, 0x7f, sizeof(cattr));
    cattr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE | UCP_ATTR_FIELD_NAME;
    REQUIRE(ucp_context_query(ctx, &cattr) == UCS_OK, "context_query");
    size_t hdr = cattr.request_size;
    CHECK(hdr >= 16 && hdr <= 4096, "request_size %zu", hdr);
    CHECK(strcmp(cattr.name, "abi-test") == 0, "name '%s'", cattr.name);
    CHECK(cattr.thread_mode == (ucs_thread_mode_t)0x7f7f7f7f, "a field outside the mask was written");
    cattr.field_mask = 1ull << 20;
    CHECK(ucp_context_query(ctx, &cattr) == UCS_ERR_INVALID_PARAM, "unknown attr bit");

    /* print_info: the lines Open MPI parses. */
    FILE *f = tmpfile();
    ucp_context_print_info(ctx, f);
    fseek(f, 0, SEEK_SET);
    char line[512], tl[128], dev[128];
    int resources = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "# resource %*d : md %*d dev %*d flags -- %127[^/ \n\r]/%127[^/ \n\r]", tl, dev) == 2) {
            resources++;
        }
    }
    fclose(f);
    CHECK(resources > 0, "no '# resource' line in print_info");

    /* Workers. */
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME |
                    UCP_WORKER_PARAM_FIELD_FLAGS;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    wp.flags = UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK;
    wp.name = "w0";
    ucp_worker_params_t wbad = wp;
    wbad.field_mask |= 1ull << 33;
    CHECK(ucp_worker_create(ctx, &wbad, &W[0]) == UCS_ERR_INVALID_PARAM, "unknown worker bit");
    /* Open MPI 4.1 ORs UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK into an uninitialised field: UCX
     * ignores the other bits, and so must rucx. */
    wbad = wp;
    wbad.flags = 0x2020202020202020ull | UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK;
    REQUIRE(ucp_worker_create(ctx, &wbad, &W[0]) == UCS_OK, "stray worker flag bits");
    ucp_worker_destroy(W[0]);
    REQUIRE(ucp_worker_create(ctx, &wp, &W[0]) == UCS_OK, "worker 0");
    wp.name = "w1";
    REQUIRE(ucp_worker_create(ctx, &wp, &W[1]) == UCS_OK, "worker 1");

    ucp_worker_attr_t wa;
    memset(&wa, 0, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE | UCP_WORKER_ATTR_FIELD_NAME |
                    UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    wa.address_flags = 0;
    REQUIRE(ucp_worker_query(W[1], &wa) == UCS_OK, "worker_query");
    CHECK(wa.thread_mode == UCS_THREAD_MODE_MULTI, "thread mode %d", wa.thread_mode);
    CHECK(strcmp(wa.name, "w1") == 0, "worker name '%s'", wa.name);
    CHECK(wa.address != NULL && wa.address_length > 4, "address");
    ucp_address_t *addr1 = wa.address;
    size_t full_len = wa.address_length;
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    wa.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
    REQUIRE(ucp_worker_query(W[1], &wa) == UCS_OK, "worker_query net only");
    CHECK(wa.address_length <= full_len, "net-only address longer than the full one");
    ucp_worker_release_address(W[1], wa.address);

    ucp_address_t *addr0;
    size_t len0;
    REQUIRE(ucp_worker_get_address(W[0], &addr0, &len0) == UCS_OK, "get_address");

    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_USER_DATA;
    ep.address = addr1;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = err_handler;
    ep.user_data = (void *)0x1;
    ucp_ep_h e01, e10;
    ucp_ep_params_t ebad = ep;
    ebad.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR;
    /* Both a worker address and a socket address: which to connect to is ambiguous. */
    CHECK(ucp_ep_create(W[0], &ebad, &e01) == UCS_ERR_INVALID_PARAM, "address and sockaddr");
    REQUIRE(ucp_ep_create(W[0], &ep, &e01) == UCS_OK, "ep 0->1");
    ep.address = addr0;
    REQUIRE(ucp_ep_create(W[1], &ep, &e10) == UCS_OK, "ep 1->0");
    ucp_worker_release_address(W[1], addr1);
    ucp_worker_release_address(W[0], addr0);
    compat_worker(ctx, W[1]);
    compat_ep(W[0], W[1]);
    compat_request(ctx, e01, W[1]);

    /* Contiguous send and receive with callbacks and user_data. */
    char sbuf[4096], rbuf[4096];
    for (int i = 0; i < 4096; i++) sbuf[i] = (char)(i * 7);
    memset(rbuf, 0, sizeof(rbuf));
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    rp.cb.recv = recv_cb;
    rp.user_data = (void *)0x5150;
    rp.datatype = ucp_dt_make_contig(1);
    void *rr = ucp_tag_recv_nbx(W[1], rbuf, sizeof(rbuf), 0x1234, ~0ull, &rp);
    REQUIRE(rr != NULL && !UCS_PTR_IS_ERR(rr), "posted receive returned %p", rr);
    struct my_req *rq = rr;
    CHECK(rq->magic == REQ_MAGIC, "request_init did not run on the returned request");
    CHECK(!rq->done && ucp_request_check_status(rr) == UCS_INPROGRESS, "-");
    ucp_request_param_t sp;
    memset(&sp, 0, sizeof(sp));
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    sp.cb.send = send_cb;
    sp.user_data = (void *)0x6160;
    void *sr = ucp_tag_send_nbx(e01, sbuf, sizeof(sbuf), 0x1234, &sp);
    CHECK(!UCS_PTR_IS_ERR(sr), "send failed");
    wait_done(rq);
    CHECK(rq->status == UCS_OK, "%s", ucs_status_string(rq->status));
    CHECK(rq->length == sizeof(sbuf) && rq->tag == 0x1234, "info %zu %llx", rq->length, (unsigned long long)rq->tag);
    CHECK(rq->user_data == (void *)0x5150, "user_data %p", rq->user_data);
    CHECK(memcmp(sbuf, rbuf, sizeof(sbuf)) == 0, "data");
    CHECK(rq->done == 1, "callback ran %d times", rq->done);
    rq->done = 0;
    ucp_request_free(rr);
    if (sr != NULL) {
        struct my_req *sq = sr;
        wait_done(sq);
        CHECK(sq->status == UCS_OK && sq->user_data == (void *)0x6160, "send callback");
        sq->done = 0;
        ucp_request_free(sr);
    }

    /* Unexpected message, then a receive with recv_info: immediate completion. */
    void *s2 = ucp_tag_send_nbx(e01, sbuf, 100, 0x77, &sp);
    ucp_tag_recv_info_t pinfo;
    long spins = 0;
    while (ucp_tag_probe_nb(W[1], 0x77, ~0ull, 0, &pinfo) == NULL) {
        progress();
        REQUIRE(++spins < 100000000L, "probe never found the message");
    }
    CHECK(pinfo.length == 100 && pinfo.sender_tag == 0x77, "probe info");
    ucp_tag_recv_info_t ri = {0, 0};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FIELD_CALLBACK;
    rp.recv_info.tag_info = &ri;
    memset(rbuf, 0, sizeof(rbuf));
    void *r2 = ucp_tag_recv_nbx(W[1], rbuf, sizeof(rbuf), 0x77, ~0ull, &rp);
    CHECK(r2 == NULL, "an eager unexpected message should complete at once (got %p)", r2);
    CHECK(ri.length == 100 && ri.sender_tag == 0x77, "recv_info %zu", ri.length);
    CHECK(memcmp(sbuf, rbuf, 100) == 0, "data");
    if (r2 != NULL) wait_req(r2);
    if (s2 != NULL && !UCS_PTR_IS_ERR(s2)) {
        wait_done((struct my_req *)s2);
        ((struct my_req *)s2)->done = 0;
        ucp_request_free(s2);
    }

    /* Caller-supplied request memory (Open MPI's blocking receive: alloca(size) + size). */
    {
        char *area = malloc(hdr + 64);
        memset(area, 0xa5, hdr + 64);
        void *mine = area + 32 + hdr - 32; /* = area + hdr: the header fits before it */
        mine = area + hdr;
        ucp_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
        cp.request = mine;
        memset(rbuf, 0, sizeof(rbuf));
        ucp_tag_recv_nbx(W[1], rbuf, 50, 0x99, ~0ull, &cp);
        CHECK(ucp_request_check_status(mine) == UCS_INPROGRESS, "-");
        void *s3 = ucp_tag_send_nbx(e01, sbuf, 50, 0x99, &sp);
        ucp_tag_recv_info_t ci;
        ucs_status_t st;
        spins = 0;
        while ((st = ucp_request_test(mine, &ci)) == UCS_INPROGRESS) {
            progress();
            REQUIRE(++spins < 100000000L, "caller request never completed");
        }
        CHECK(st == UCS_OK && ci.length == 50 && ci.sender_tag == 0x99, "caller request info");
        CHECK(memcmp(sbuf, rbuf, 50) == 0, "data");
        for (size_t i = hdr; i < hdr + 64; i++) {
            CHECK((unsigned char)area[i] == 0xa5, "the library wrote past the request pointer (+%zu)", i - hdr);
            if ((unsigned char)area[i] != 0xa5) break;
        }
        if (s3 != NULL && !UCS_PTR_IS_ERR(s3)) {
            wait_done((struct my_req *)s3);
            ((struct my_req *)s3)->done = 0;
            ucp_request_free(s3);
        }
        free(area);
    }

    /* IOV send -> contiguous receive, and contiguous send -> IOV receive. */
    {
        char a[10], b[20], c[30];
        memset(a, 'a', 10); memset(b, 'b', 20); memset(c, 'c', 30);
        ucp_dt_iov_t iov[3] = {{a, 10}, {b, 20}, {c, 30}};
        ucp_request_param_t ip;
        memset(&ip, 0, sizeof(ip));
        ip.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        ip.datatype = ucp_dt_make_iov();
        void *s = ucp_tag_send_nbx(e01, iov, 3, 0x10, &ip);
        memset(rbuf, 0, sizeof(rbuf));
        void *r = ucp_tag_recv_nb(W[1], rbuf, 60, ucp_dt_make_contig(1), 0x10, ~0ull, recv_cb_nb);
        struct my_req *q = r;
        REQUIRE(r != NULL && !UCS_PTR_IS_ERR(r), "recv_nb always returns a request");
        wait_done(q);
        CHECK(q->status == UCS_OK && q->length == 60, "iov->contig %d %zu", q->status, q->length);
        CHECK(rbuf[0] == 'a' && rbuf[10] == 'b' && rbuf[30] == 'c' && rbuf[59] == 'c', "iov gather");
        q->done = 0;
        ucp_request_free(r);
        CHECK(wait_req(s) == UCS_OK, "iov send");

        char x[25], y[35];
        memset(x, 0, 25); memset(y, 0, 35);
        ucp_dt_iov_t riov[2] = {{x, 25}, {y, 35}};
        s = ucp_tag_send_nb(e01, sbuf, 60, ucp_dt_make_contig(1), 0x11, send_cb_nb);
        ip.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        ip.cb.recv = recv_cb;
        r = ucp_tag_recv_nbx(W[1], riov, 2, 0x11, ~0ull, &ip);
        q = r;
        REQUIRE(r != NULL && !UCS_PTR_IS_ERR(r), "NO_IMM_CMPL returns a request");
        wait_done(q);
        CHECK(q->status == UCS_OK && memcmp(x, sbuf, 25) == 0 && memcmp(y, sbuf + 25, 35) == 0, "iov scatter");
        q->done = 0;
        ucp_request_free(r);
        if (s != NULL) {
            spins = 0;
            while (!old_send_done) { progress(); REQUIRE(++spins < 100000000L, "nb send callback"); }
            ucp_request_free(s);
        }
    }

    /* Generic datatype on both sides: every other int. */
    {
        ucp_generic_dt_ops_t ops = {g_start_pack, g_start_unpack, g_packed_size, g_pack, g_unpack, g_finish};
        ucp_datatype_t gdt;
        REQUIRE(ucp_dt_create_generic(&ops, NULL, &gdt) == UCS_OK, "dt_create_generic");
        CHECK((gdt & UCP_DATATYPE_CLASS_MASK) == UCP_DATATYPE_GENERIC, "class");
        int src[200], dst[200];
        for (int i = 0; i < 200; i++) { src[i] = i * 3 + 1; dst[i] = -1; }
        void *s = ucp_tag_send_nb(e01, src, 100, gdt, 0x20, send_cb_nb);
        void *r = ucp_tag_recv_nb(W[1], dst, 100, gdt, 0x20, ~0ull, recv_cb_nb);
        struct my_req *q = r;
        wait_done(q);
        CHECK(q->status == UCS_OK && q->length == 400, "generic %d %zu", q->status, q->length);
        int ok = 1;
        for (int i = 0; i < 200; i++) ok &= (i % 2 == 0) ? dst[i] == src[i] : dst[i] == -1;
        CHECK(ok, "generic unpack placed the ints");
        CHECK(g_finished == 2, "finish called %d times", g_finished);
        q->done = 0;
        ucp_request_free(r);
        if (s != NULL) wait_req(s);
        ucp_dt_destroy(gdt);
    }

    /* Probe with remove, then msg_recv (old API, with its callback). */
    {
        void *s = ucp_tag_send_nbx(e01, sbuf, 300, 0x30, &sp);
        ucp_tag_recv_info_t pi;
        ucp_tag_message_h msg;
        spins = 0;
        while ((msg = ucp_tag_probe_nb(W[1], 0x30, ~0ull, 1, &pi)) == NULL) {
            progress();
            REQUIRE(++spins < 100000000L, "probe");
        }
        CHECK(pi.length == 300, "probe length");
        CHECK(ucp_tag_probe_nb(W[1], 0x30, ~0ull, 0, &pi) == NULL, "a removed message is still probed");
        memset(rbuf, 0, sizeof(rbuf));
        void *r = ucp_tag_msg_recv_nb(W[1], rbuf, sizeof(rbuf), ucp_dt_make_contig(1), msg, recv_cb_nb);
        struct my_req *q = r;
        REQUIRE(r != NULL && !UCS_PTR_IS_ERR(r), "msg_recv_nb");
        wait_done(q);
        CHECK(q->status == UCS_OK && q->length == 300 && memcmp(rbuf, sbuf, 300) == 0, "msg_recv");
        q->done = 0;
        ucp_request_free(r);
        if (s != NULL && !UCS_PTR_IS_ERR(s)) { wait_done((struct my_req *)s); ((struct my_req *)s)->done = 0; ucp_request_free(s); }

        /* msg_recv_nbx with the nbx callback. */
        s = ucp_tag_send_nbx(e01, sbuf, 40, 0x31, &sp);
        spins = 0;
        while ((msg = ucp_tag_probe_nb(W[1], 0x31, ~0ull, 1, &pi)) == NULL) {
            progress();
            REQUIRE(++spins < 100000000L, "probe");
        }
        ucp_request_param_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        mp.cb.recv = recv_cb;
        mp.user_data = (void *)0x31;
        r = ucp_tag_msg_recv_nbx(W[1], rbuf, sizeof(rbuf), msg, &mp);
        if (r != NULL) {
            q = r;
            wait_done(q);
            CHECK(q->status == UCS_OK && q->length == 40 && q->user_data == (void *)0x31, "msg_recv_nbx");
            q->done = 0;
            ucp_request_free(r);
        }
        if (s != NULL && !UCS_PTR_IS_ERR(s)) { wait_done((struct my_req *)s); ((struct my_req *)s)->done = 0; ucp_request_free(s); }
    }

    /* Cancel a receive that never matches: its callback runs from progress with CANCELED. */
    {
        void *r = ucp_tag_recv_nb(W[1], rbuf, 10, ucp_dt_make_contig(1), 0xdead, ~0ull, recv_cb_nb);
        struct my_req *q = r;
        ucp_request_cancel(W[1], r);
        CHECK(!q->done, "callback ran inside ucp_request_cancel");
        wait_done(q);
        CHECK(q->status == UCS_ERR_CANCELED, "cancel status %s", ucs_status_string(q->status));
        CHECK(ucp_request_check_status(r) == UCS_ERR_CANCELED, "-");
        q->done = 0;
        ucp_request_free(r);
    }

    /* Truncation: 100 bytes into 10; the info carries the real length. */
    {
        void *s = ucp_tag_send_nbx(e01, sbuf, 100, 0x40, &sp);
        void *r = ucp_tag_recv_nb(W[1], rbuf, 10, ucp_dt_make_contig(1), 0x40, ~0ull, recv_cb_nb);
        struct my_req *q = r;
        wait_done(q);
        CHECK(q->status == UCS_ERR_MESSAGE_TRUNCATED, "truncation status %s", ucs_status_string(q->status));
        CHECK(q->length == 100, "truncated info length %zu", q->length);
        q->done = 0;
        ucp_request_free(r);
        if (s != NULL && !UCS_PTR_IS_ERR(s)) { wait_done((struct my_req *)s); ((struct my_req *)s)->done = 0; ucp_request_free(s); }
    }

    /* Sync send: not complete before the receiver matched it. */
    {
        ucp_request_param_t np;
        memset(&np, 0, sizeof(np));
        void *s = ucp_tag_send_sync_nbx(e01, sbuf, 8, 0x50, &np);
        REQUIRE(s != NULL && !UCS_PTR_IS_ERR(s), "sync send completed before any receive");
        for (int i = 0; i < 1000; i++) progress();
        CHECK(ucp_request_check_status(s) == UCS_INPROGRESS, "sync send completed unmatched");
        void *r = ucp_tag_recv_nb(W[1], rbuf, 8, ucp_dt_make_contig(1), 0x50, ~0ull, recv_cb_nb);
        CHECK(wait_req(s) == UCS_OK, "sync send");
        CHECK(wait_req(r) == UCS_OK, "sync recv");
    }

    /* A freed request's callback never runs. */
    {
        void *r = ucp_tag_recv_nbx(W[1], rbuf, 8, 0x60, ~0ull, &rp);
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
        r = ucp_tag_recv_nbx(W[1], rbuf, 8, 0x60, ~0ull, &rp);
        struct my_req *q = r;
        ucp_request_free(r);
        void *s = ucp_tag_send_nbx(e01, sbuf, 8, 0x60, &sp);
        for (int i = 0; i < 2000; i++) progress();
        (void)q;
        if (s != NULL && !UCS_PTR_IS_ERR(s)) { wait_done((struct my_req *)s); ((struct my_req *)s)->done = 0; ucp_request_free(s); }
    }

    /* Refused input: unknown op_attr bit, NULL param, strided datatype. */
    {
        ucp_request_param_t xp;
        memset(&xp, 0, sizeof(xp));
        xp.op_attr_mask = 1u << 12;
        void *x = ucp_tag_send_nbx(e01, sbuf, 1, 1, &xp);
        CHECK(UCS_PTR_IS_ERR(x) && UCS_PTR_STATUS(x) == UCS_ERR_INVALID_PARAM, "unknown op_attr bit");
        x = ucp_tag_send_nbx(e01, sbuf, 1, 1, NULL);
        CHECK(UCS_PTR_IS_ERR(x) && UCS_PTR_STATUS(x) == UCS_ERR_INVALID_PARAM, "NULL param");
        x = ucp_tag_send_nb(e01, sbuf, 1, UCP_DATATYPE_STRIDED, 1, NULL);
        CHECK(UCS_PTR_IS_ERR(x) && UCS_PTR_STATUS(x) == UCS_ERR_UNSUPPORTED, "strided datatype");
        x = ucp_tag_send_nbx(NULL, sbuf, 1, 1, &sp);
        CHECK(UCS_PTR_IS_ERR(x) && UCS_PTR_STATUS(x) == UCS_ERR_INVALID_PARAM, "NULL ep");
    }

    /* RMA: allocated and registered memory, rkeys, put/get. */
    {
        ucp_mem_map_params_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = 4096;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
        ucp_mem_h memh;
        REQUIRE(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "mem_map allocate");
        ucp_mem_attr_t ma;
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        REQUIRE(ucp_mem_query(memh, &ma) == UCS_OK, "mem_query");
        CHECK(ma.length == 4096 && ma.address != NULL, "mem attr");
        void *kb;
        size_t ks;
        REQUIRE(ucp_rkey_pack(ctx, memh, &kb, &ks) == UCS_OK, "rkey_pack");
        ucp_rkey_h rkey;
        REQUIRE(ucp_ep_rkey_unpack(e10, kb, &rkey) == UCS_OK, "rkey_unpack");
        ucp_rkey_buffer_release(kb);
        uint64_t base = (uint64_t)(uintptr_t)ma.address;
        ucs_status_t st = ucp_put_nbi(e10, sbuf, 256, base + 64, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "put_nbi %s", ucs_status_string(st));
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, send_cb_nb)) == UCS_OK, "flush");
        CHECK(memcmp((char *)ma.address + 64, sbuf, 256) == 0, "put landed");
        char got[256];
        memset(got, 0, sizeof(got));
        void *g = ucp_get_nb(e10, got, 256, base + 64, rkey, send_cb_nb);
        CHECK(wait_req(g) == UCS_OK, "get_nb");
        CHECK(memcmp(got, sbuf, 256) == 0, "get data");
        memset(got, 0, sizeof(got));
        st = ucp_get_nbi(e10, got, 128, base + 64, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "get_nbi");
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
        CHECK(memcmp(got, sbuf, 128) == 0, "get_nbi data");
        /* W[0] answers from a helper thread (self connects a worker only to itself, so W[1]
         * reaches W[0] over shared memory or tcp whatever UCX_TLS says). */
        pthread_t th;
        stop_helper = 0;
        REQUIRE(pthread_create(&th, NULL, helper, NULL) == 0, "pthread_create");
        CHECK(ucp_put(e10, sbuf + 1000, 16, base, rkey) == UCS_OK, "blocking put");
        CHECK(ucp_ep_flush(e10) == UCS_OK, "ep_flush");
        CHECK(ucp_worker_fence(W[1]) == UCS_OK, "fence");
        stop_helper = 1;
        pthread_join(th, NULL);
        CHECK(memcmp(ma.address, sbuf + 1000, 16) == 0, "put data");
        /* Atomics on the mapped memory. */
        volatile uint64_t *word = (uint64_t *)((char *)ma.address + 1024);
        *word = 5;
        st = ucp_atomic_post(e10, UCP_ATOMIC_POST_OP_ADD, 3, 8, base + 1024, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "atomic_post %s", ucs_status_string(st));
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
        CHECK(*word == 8, "atomic add: %llu", (unsigned long long)*word);
        uint64_t old = 0;
        CHECK(wait_req(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 2, &old, 8, base + 1024, rkey, send_cb_nb)) == UCS_OK, "fadd");
        CHECK(old == 8 && *word == 10, "fetch-add: old %llu now %llu", (unsigned long long)old, (unsigned long long)*word);
        uint64_t sw = 77;
        CHECK(wait_req(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_CSWAP, 10, &sw, 8, base + 1024, rkey, NULL)) == UCS_OK, "cswap");
        CHECK(sw == 10 && *word == 77, "cswap: old %llu now %llu", (unsigned long long)sw, (unsigned long long)*word);
        volatile uint32_t *w32 = (uint32_t *)((char *)ma.address + 2048);
        *w32 = 1;
        uint32_t operand = 6, reply = 0;
        ucp_request_param_t ap;
        memset(&ap, 0, sizeof(ap));
        ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        ap.datatype = ucp_dt_make_contig(4);
        ap.reply_buffer = &reply;
        CHECK(wait_req(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_OR, &operand, 1, base + 2048, rkey, &ap)) == UCS_OK, "atomic_op_nbx");
        CHECK(reply == 1 && *w32 == 7, "fetch-or 32: old %u now %u", reply, *w32);
        ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        ap.datatype = ucp_dt_make_contig(3);
        void *bad_amo = ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, base + 2048, rkey, &ap);
        CHECK(UCS_PTR_IS_ERR(bad_amo) && UCS_PTR_STATUS(bad_amo) == UCS_ERR_INVALID_PARAM, "3-byte atomic");
        void *rp_ptr;
        /* Over shared memory the peer's segment is mapped here: rkey_ptr gives an address of
         * the same memory; over tcp it is unreachable. */
        st = ucp_rkey_ptr(rkey, base + 8, &rp_ptr);
        const char *tls_now = getenv("UCX_TLS");
        if (tls_now != NULL && strcmp(tls_now, "tcp") == 0) {
            CHECK(st == UCS_ERR_UNREACHABLE, "rkey_ptr over tcp: %s", ucs_status_string(st));
        } else {
            CHECK(st == UCS_OK, "rkey_ptr over shared memory: %s", ucs_status_string(st));
            if (st == UCS_OK) {
                *(volatile char *)rp_ptr = 0x5b;
                CHECK(((volatile char *)ma.address)[8] == 0x5b, "rkey_ptr aliases the mapping");
            }
        }
        ucp_mem_advise_params_t adv;
        adv.field_mask = UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS | UCP_MEM_ADVISE_PARAM_FIELD_LENGTH | UCP_MEM_ADVISE_PARAM_FIELD_ADVICE;
        adv.address = ma.address;
        adv.length = 4096;
        adv.advice = UCP_MADV_WILLNEED;
        CHECK(ucp_mem_advise(ctx, memh, &adv) == UCS_OK, "mem_advise");
        adv.length = 8192;
        CHECK(ucp_mem_advise(ctx, memh, &adv) == UCS_ERR_INVALID_PARAM, "mem_advise beyond the mapping");
        ucp_rkey_destroy(rkey);
        CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");

        /* The client's own memory. */
        static char mine[8192];
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = mine;
        mp.length = sizeof(mine);
        REQUIRE(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "mem_map user memory");
        REQUIRE(ucp_rkey_pack(ctx, memh, &kb, &ks) == UCS_OK, "rkey_pack");
        REQUIRE(ucp_ep_rkey_unpack(e10, kb, &rkey) == UCS_OK, "rkey_unpack");
        ucp_rkey_buffer_release(kb);
        void *p = ucp_put_nb(e10, sbuf, 1000, (uint64_t)(uintptr_t)mine + 8, rkey, send_cb_nb);
        CHECK(wait_req(p) == UCS_OK, "put_nb");
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
        CHECK(memcmp(mine + 8, sbuf, 1000) == 0, "put into user memory");
        ucp_request_param_t xp;
        memset(&xp, 0, sizeof(xp));
        xp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        xp.cb.send = send_cb;
        xp.user_data = (void *)0x77;
        char back[500];
        memset(back, 0, sizeof(back));
        void *gx = ucp_get_nbx(e10, back, sizeof(back), (uint64_t)(uintptr_t)mine + 8, rkey, &xp);
        if (gx != NULL && !UCS_PTR_IS_ERR(gx)) {
            struct my_req *gq = gx;
            wait_done(gq);
            CHECK(gq->status == UCS_OK && gq->user_data == (void *)0x77, "get_nbx callback");
            gq->done = 0;
            ucp_request_free(gx);
        } else {
            CHECK(gx == NULL, "get_nbx failed");
        }
        CHECK(memcmp(back, sbuf, sizeof(back)) == 0, "get_nbx data");
        void *px = ucp_put_nbx(e10, sbuf + 2000, 64, (uint64_t)(uintptr_t)mine + 4000, rkey, &xp);
        if (px != NULL && !UCS_PTR_IS_ERR(px)) {
            wait_done((struct my_req *)px);
            ((struct my_req *)px)->done = 0;
            ucp_request_free(px);
        }
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
        CHECK(memcmp(mine + 4000, sbuf + 2000, 64) == 0, "put_nbx data");
        ucp_rkey_destroy(rkey);
        CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_ERR_INVALID_PARAM, "no address, no ALLOCATE");
    }

    /* Active messages (old API). */
    {
        REQUIRE(ucp_worker_set_am_handler(W[1], 7, am_handler, (void *)0xabc, UCP_AM_FLAG_WHOLE_MSG) == UCS_OK, "set_am_handler");
        void *s = ucp_am_send_nb(e01, 7, "hello-am", 9, ucp_dt_make_contig(1), send_cb_nb, 0);
        CHECK(!UCS_PTR_IS_ERR(s), "am_send_nb");
        spins = 0;
        while (!am_calls) { progress(); REQUIRE(++spins < 100000000L, "am never arrived"); }
        CHECK(am_calls == 1 && strcmp(am_data, "hello-am") == 0, "am data '%s'", am_data);
        if (s != NULL) wait_req(s);
    }

    /* A second client endpoint to the same worker: rucx shares its endpoint between the two;
     * closing the second only flushes, and the first still sends (before and after). */
    {
        ucp_address_t *a1;
        size_t l1;
        REQUIRE(ucp_worker_get_address(W[1], &a1, &l1) == UCS_OK, "address of W[1]");
        ucp_ep_params_t p2;
        memset(&p2, 0, sizeof(p2));
        p2.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p2.address = a1;
        ucp_ep_h e01b;
        REQUIRE(ucp_ep_create(W[0], &p2, &e01b) == UCS_OK, "second ep 0->1");
        ucp_worker_release_address(W[1], a1);
        CHECK(e01b != e01, "the second ucp_ep_create gave the first handle");
        ucp_request_param_t np;
        memset(&np, 0, sizeof(np));
        for (int round = 0; round < 3; round++) {
            ucp_ep_h via = round == 1 ? e01b : e01;
            uint64_t out = 0x5ca1e0 + (uint64_t)round, in = 0;
            void *r = ucp_tag_recv_nbx(W[1], &in, sizeof(in), 0x99, ~0ull, &np);
            void *s = ucp_tag_send_nbx(via, &out, sizeof(out), 0x99, &np);
            CHECK(wait_req(s) == UCS_OK && wait_req(r) == UCS_OK, "round %d", round);
            CHECK(in == out, "round %d received %llx", round, (unsigned long long)in);
            if (round == 1)
                CHECK(wait_req(ucp_ep_close_nb(e01b, UCP_EP_CLOSE_MODE_FLUSH)) == UCS_OK,
                      "closing the second endpoint");
        }
    }

    /* Close and clean up: request_cleanup runs once per request memory init saw. */
    CHECK(wait_req(ucp_disconnect_nb(e01)) == UCS_OK, "disconnect");
    CHECK(wait_req(ucp_ep_close_nb(e10, UCP_EP_CLOSE_MODE_FORCE)) == UCS_OK, "close");
    ucp_worker_destroy(W[0]);
    ucp_worker_destroy(W[1]);

    peer_failure(ctx);
    CHECK(n_init > 0 && n_cleanup == n_init, "init %d cleanup %d", n_init, n_cleanup);
    ucp_cleanup(ctx);

    if (failures) {
        fprintf(stderr, "abi_layout: %d check(s) failed\n", failures);
        return 1;
    }
    printf("abi_layout: all checks passed (request header %zu bytes, %d request memories)\n", hdr, n_init);
    return 0;
}
