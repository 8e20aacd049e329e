/*
 * rucx libucp: the families beyond the MPI slice, driven from C across two processes (a forked
 * client and this server) over whatever UCX_TLS names: a listener and client/server endpoints
 * (connection handler, reject, socket addresses on both sides), streams (partial and WAITALL
 * receives, IOV, recv_data/data_release, worker_poll), active messages with a header, eager and
 * by rendezvous (received with ucp_am_recv_data_nbx into contiguous and IOV memory, kept data
 * released later, replies on the reply endpoint), wake-up (the server sleeps in poll() on
 * ucp_worker_get_efd after ucp_worker_arm; the client in ucp_worker_wait, woken once by
 * ucp_worker_signal from a thread), the queries, the nbr calls, and at the end the death of
 * the client (SIGKILL), which the server must see through its endpoint's error handler and a
 * failed receive. Bad input gets an error status (and one log line), never an abort.
 *
 * Compiled against UCX's headers, run by run.sh. Exit status 0 = pass.
 */
#include <ucp/api/ucp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;
static const char *side = "server";
#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "FAIL [%s] %s:%d: %s: ", side, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
        }                                                                            \
    } while (0)
#define REQUIRE(cond, ...)                                                           \
    do {                                                                             \
        int ok_ = !!(cond);                                                          \
        CHECK(ok_, __VA_ARGS__);                                                     \
        if (!ok_) {                                                                  \
            fprintf(stderr, "FATAL [%s]: %s\n", side, #cond);                      \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define WATCHDOG_S 60
#define AM_ID 7
#define AM_REPLY_ID 8
#define BIG (4u << 20)
#define MID (64u << 10)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed); }

static void fill(void *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = pattern(i, seed);
}

static int same(const void *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != pattern(i, seed)) return 0;
    return 1;
}

/* Waits for a request by progress (NULL and error pointers are immediate). */
static ucs_status_t wait_req(ucp_worker_h w, void *r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    double end = now() + WATCHDOG_S;
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: request never completed");
    }
    ucp_request_free(r);
    return s;
}

/* ---- state shared with callbacks --------------------------------------------------------- */

static ucp_conn_request_h pending_conn;
static int n_conn;
static ucs_status_t ep_failed = UCS_OK;
static int n_err;

static void on_conn(ucp_conn_request_h r, void *arg)
{
    (void)arg;
    pending_conn = r;
    n_conn++;
}

static void on_err(void *arg, ucp_ep_h ep, ucs_status_t s)
{
    CHECK(arg == (void *)0xfeed, "error handler arg %p", arg);
    (void)ep;
    ep_failed = s;
    n_err++;
}

struct am_msg {
    unsigned char hdr[64];
    size_t hdr_len, len;
    int rndv, data_flag;
    void *data;
    ucp_ep_h reply_ep;
};
struct am_got {
    int n;
    struct am_msg m[8];
};
static struct am_got am_got;

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    struct am_got *all = arg;
    REQUIRE(all->n < 8, "too many active messages");
    struct am_msg *g = &all->m[all->n++];
    g->hdr_len = header_length;
    if (header_length <= sizeof(g->hdr)) memcpy(g->hdr, header, header_length);
    g->len = length;
    g->rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    g->data_flag = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
    g->reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    g->data = data;
    /* Keep every message: rendezvous ones are received later, eager ones released later. */
    return UCS_INPROGRESS;
}

static void wait_am(ucp_worker_h w, int n)
{
    double end = now() + WATCHDOG_S;
    while (am_got.n < n) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: active message %d never came", n);
    }
}

static ucp_context_h make_context(void)
{
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
                 UCP_FEATURE_RMA;
    ucp_config_t *cfg;
    REQUIRE(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
    ucp_context_h c;
    REQUIRE(ucp_init(&p, cfg, &c) == UCS_OK, "init");
    ucp_config_release(cfg);
    return c;
}

#define CLIENT_ID 0xc0ffee1234ull
#define AM_ALIGN 64

/* The client's worker has an id it sends with its connection request; the server's aligns
 * active-message data. */
static ucp_worker_h make_worker(ucp_context_h c)
{
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_CLIENT_ID |
                    UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    wp.client_id = CLIENT_ID;
    wp.am_alignment = AM_ALIGN;
    ucp_worker_h w;
    REQUIRE(ucp_worker_create(c, &wp, &w) == UCS_OK, "worker");
    return w;
}

static void set_am_handler(ucp_worker_h w, unsigned id)
{
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = on_am;
    hp.arg = &am_got;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    REQUIRE(ucp_worker_set_am_recv_handler(w, &hp) == UCS_OK, "am handler");
}

static void *am_send(ucp_ep_h ep, unsigned id, const void *hdr, size_t hlen, const void *buf,
                     size_t len, uint32_t flags)
{
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
    return ucp_am_send_nbx(ep, id, hdr, hlen, buf, len, &p);
}

static ucp_ep_h connect_to(ucp_worker_h w, uint16_t port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER | UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID;
    ep.sockaddr.addr = (struct sockaddr *)&sa;
    ep.sockaddr.addrlen = sizeof(sa);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_err;
    ep.err_handler.arg = (void *)0xfeed;
    ucp_ep_h e;
    REQUIRE(ucp_ep_create(w, &ep, &e) == UCS_OK, "client ep");
    return e;
}

static void *signal_later(void *arg)
{
    usleep(200 * 1000);
    CHECK(ucp_worker_signal(arg) == UCS_OK, "signal");
    return NULL;
}

/* ---- the client (forked) ------------------------------------------------------------------ */

static int client(uint16_t port, int to_server, int from_server)
{
    side = "client";
    ucp_context_h c = make_context();
    ucp_worker_h w = make_worker(c);
    set_am_handler(w, AM_REPLY_ID);
    ucp_ep_h ep = connect_to(w, port);

    /* Streams: 1 byte, 64 KiB (two halves), 4 MiB. */
    unsigned char *big = malloc(BIG);
    fill(big, BIG, 1);
    REQUIRE(wait_req(w, ucp_stream_send_nb(ep, big, 1, ucp_dt_make_contig(1), NULL, 0)) == UCS_OK,
            "stream 1 B");
    ucp_request_param_t sp;
    memset(&sp, 0, sizeof(sp));
    REQUIRE(wait_req(w, ucp_stream_send_nbx(ep, big + 1, MID / 2, &sp)) == UCS_OK, "stream a");
    ucp_dt_iov_t iov[2] = {{big + 1 + MID / 2, MID / 4}, {big + 1 + MID / 2 + MID / 4, MID / 4}};
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    sp.datatype = ucp_dt_make_iov();
    REQUIRE(wait_req(w, ucp_stream_send_nbx(ep, iov, 2, &sp)) == UCS_OK, "stream iov");
    memset(&sp, 0, sizeof(sp));
    REQUIRE(wait_req(w, ucp_stream_send_nbx(ep, big, BIG, &sp)) == UCS_OK, "stream 4 MiB");

    /* Active messages: eager with a header, then by rendezvous (forced and by size). */
    char hdr[16] = "header-0123456";
    REQUIRE(wait_req(w, am_send(ep, AM_ID, hdr, sizeof(hdr), big, 100, UCP_AM_SEND_FLAG_REPLY)) ==
                UCS_OK, "am eager");
    REQUIRE(wait_req(w, am_send(ep, AM_ID, hdr, 3, big, BIG, UCP_AM_SEND_FLAG_RNDV)) == UCS_OK,
            "am rndv");
    REQUIRE(wait_req(w, am_send(ep, AM_ID, NULL, 0, big, BIG, 0)) == UCS_OK, "am rndv iov");

    /* The reply on the server's reply endpoint; this side sleeps in ucp_worker_wait. */
    double end = now() + WATCHDOG_S;
    while (am_got.n < 1) {
        if (ucp_worker_progress(w) == 0) {
            CHECK(ucp_worker_wait(w) == UCS_OK, "wait");
        }
        REQUIRE(now() < end, "watchdog: no reply");
    }
    CHECK(am_got.m[0].len == 5 && memcmp(am_got.m[0].data, "reply", 5) == 0, "reply data");
    ucp_am_data_release(w, am_got.m[0].data);

    /* A signal ends a wait with nothing to do. */
    pthread_t t;
    pthread_create(&t, NULL, signal_later, w);
    while (ucp_worker_progress(w) != 0) {
    }
    double t0 = now();
    CHECK(ucp_worker_wait(w) == UCS_OK, "wait for signal");
    CHECK(now() - t0 < 10, "the signal did not end the wait");
    pthread_join(t, NULL);

    /* ucp_ep_query: the socket addresses of a client endpoint. */
    ucp_ep_attr_t ea;
    memset(&ea, 0, sizeof(ea));
    ea.field_mask = UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR | UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR |
                    UCP_EP_ATTR_FIELD_NAME;
    REQUIRE(ucp_ep_query(ep, &ea) == UCS_OK, "ep query");
    struct sockaddr_in *rem = (struct sockaddr_in *)&ea.remote_sockaddr;
    CHECK(rem->sin_family == AF_INET && ntohs(rem->sin_port) == port, "remote port %d",
          ntohs(rem->sin_port));
    struct sockaddr_in *loc = (struct sockaddr_in *)&ea.local_sockaddr;
    uint16_t lport = ntohs(loc->sin_port);
    CHECK(write(to_server, &lport, sizeof(lport)) == sizeof(lport), "pipe");

    /* nbr calls on request_alloc memory. */
    void *req = ucp_request_alloc(w);
    REQUIRE(req != NULL, "request_alloc");
    ucs_status_t s = ucp_tag_send_nbr(ep, big, 1000, ucp_dt_make_contig(1), 0x77, req);
    CHECK(s == UCS_OK || s == UCS_INPROGRESS, "tag_send_nbr %d", s);
    end = now() + WATCHDOG_S;
    ucp_tag_recv_info_t info;
    while (ucp_request_test(req, &info) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: nbr send");
    }
    ucp_request_free(req);

    /* A second connection the server rejects: its endpoint fails with UCS_ERR_REJECTED. */
    ucp_ep_h rej = connect_to(w, port);
    end = now() + WATCHDOG_S;
    while (n_err == 0) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: reject not reported");
    }
    CHECK(ep_failed == UCS_ERR_REJECTED, "rejected with %s", ucs_status_string(ep_failed));
    void *cr = ucp_ep_close_nb(rej, UCP_EP_CLOSE_MODE_FORCE);
    CHECK(!UCS_PTR_IS_ERR(cr), "close rejected ep");

    /* Done: tell the server, then wait to be killed. */
    char go = 1;
    CHECK(write(to_server, &go, 1) == 1, "pipe");
    CHECK(read(from_server, &go, 1) == 1, "pipe");
    for (;;) {
        ucp_worker_progress(w);
        usleep(1000);
    }
    return 0;
}

/* ---- the server --------------------------------------------------------------------------- */

static void stream_recv_all(ucp_worker_h w, ucp_ep_h ep, unsigned char *dst, size_t n)
{
    size_t got = 0;
    double end = now() + WATCHDOG_S;
    while (got < n) {
        size_t len = 0;
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.length = &len;
        void *r = ucp_stream_recv_nbx(ep, dst + got, n - got, &len, &p);
        if (r != NULL && !UCS_PTR_IS_ERR(r)) {
            while (ucp_stream_recv_request_test(r, &len) == UCS_INPROGRESS) {
                ucp_worker_progress(w);
                REQUIRE(now() < end, "watchdog: stream");
            }
            ucp_request_free(r);
        }
        REQUIRE(!UCS_PTR_IS_ERR(r), "stream recv: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        CHECK(len > 0 && len <= n - got, "stream length %zu", len);
        got += len;
    }
}

static void am_recv(ucp_worker_h w, void *desc, void *buf, size_t count, ucp_datatype_t dt,
                    size_t expect)
{
    size_t len = 0;
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO;
    p.datatype = dt;
    p.recv_info.length = &len;
    void *r = ucp_am_recv_data_nbx(w, desc, buf, count, &p);
    if (r != NULL && !UCS_PTR_IS_ERR(r)) {
        ucp_request_attr_t ra;
        char dbg[128];
        ra.field_mask = UCP_REQUEST_ATTR_FIELD_STATUS | UCP_REQUEST_ATTR_FIELD_INFO_STRING |
                        UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE;
        ra.debug_string = dbg;
        ra.debug_string_size = sizeof(dbg);
        CHECK(ucp_request_query(r, &ra) == UCS_OK && strlen(dbg) > 0, "request query");
        len = expect;
    }
    CHECK(wait_req(w, r) == UCS_OK, "am recv data");
    CHECK(len == expect, "am data length %zu", len);
}

/* Waits for the worker's descriptor with poll(), as an event-driven server does. */
static void sleep_on_efd(ucp_worker_h w, int efd)
{
    ucs_status_t s = ucp_worker_arm(w);
    if (s == UCS_ERR_BUSY) return;
    CHECK(s == UCS_OK, "arm: %s", ucs_status_string(s));
    struct pollfd pf = {.fd = efd, .events = POLLIN};
    poll(&pf, 1, 1000);
}

static void queries(ucp_context_h c, ucp_worker_h w, ucp_ep_h ep)
{
    ucp_lib_attr_t la = {.field_mask = UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL};
    CHECK(ucp_lib_query(&la) == UCS_OK && la.max_thread_level == UCS_THREAD_MODE_MULTI, "lib");
    ucp_worker_attr_t wa;
    memset(&wa, 0, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    REQUIRE(ucp_worker_query(w, &wa) == UCS_OK, "worker query");
    CHECK(wa.max_am_header >= 64, "max_am_header %zu", wa.max_am_header);
    ucp_worker_address_attr_t aa = {.field_mask = UCP_WORKER_ADDRESS_ATTR_FIELD_UID};
    CHECK(ucp_worker_address_query(wa.address, &aa) == UCS_OK && aa.worker_uid != 0, "uid");
    ucp_worker_release_address(w, wa.address);
    ucp_ep_evaluate_perf_param_t pp = {.field_mask = UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE,
                                       .message_size = 1 << 20};
    ucp_ep_evaluate_perf_attr_t pa = {.field_mask = UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME};
    CHECK(ucp_ep_evaluate_perf(ep, &pp, &pa) == UCS_OK && pa.estimated_time > 0, "perf");
    FILE *null = fopen("/dev/null", "w");
    ucp_ep_print_info(ep, null);
    ucp_worker_print_info(w, null);
    ucp_mem_print_info("1m", c, null);
    ucp_config_t *cfg;
    REQUIRE(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
    CHECK(ucp_config_modify(cfg, "RNDV_THRESH", "16k") == UCS_OK, "modify");
    ucp_config_print(cfg, null, "rucx", UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HEADER);
    ucp_config_release(cfg);
    fclose(null);
    /* Bad input: an error status, not an abort. */
    CHECK(ucp_lib_query(NULL) == UCS_ERR_INVALID_PARAM, "NULL attr");
    CHECK(ucp_worker_set_am_recv_handler(w, NULL) == UCS_ERR_INVALID_PARAM, "NULL param");
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR;
    ucp_listener_h l;
    CHECK(ucp_listener_create(w, &lp, &l) == UCS_ERR_INVALID_PARAM, "listener without handler");
    CHECK(UCS_PTR_STATUS(ucp_am_recv_data_nbx(w, (void *)0x1234, NULL, 0, &(ucp_request_param_t){0})) ==
              UCS_ERR_INVALID_PARAM, "bogus AM descriptor");
    ucp_stream_poll_ep_t pe[4];
    CHECK(ucp_stream_worker_poll(w, pe, 4, 0) >= 0, "stream poll");
}

static int server(void)
{
    ucp_context_h c = make_context();
    ucp_worker_h w = make_worker(c);
    set_am_handler(w, AM_ID);
    int efd;
    REQUIRE(ucp_worker_get_efd(w, &efd) == UCS_OK, "efd");

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (struct sockaddr *)&sa;
    lp.sockaddr.addrlen = sizeof(sa);
    lp.conn_handler.cb = on_conn;
    ucp_listener_h l;
    REQUIRE(ucp_listener_create(w, &lp, &l) == UCS_OK, "listener");
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    REQUIRE(ucp_listener_query(l, &la) == UCS_OK, "listener query");
    uint16_t port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    REQUIRE(port != 0, "the kernel picked no port");

    int c2s[2], s2c[2];
    REQUIRE(pipe(c2s) == 0 && pipe(s2c) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(c2s[0]);
        close(s2c[1]);
        _exit(client(port, c2s[1], s2c[0]) || failures);
    }
    close(c2s[1]);
    close(s2c[0]);

    /* The connection request, waited for on the descriptor. */
    double end = now() + WATCHDOG_S;
    while (n_conn == 0) {
        if (ucp_worker_progress(w) == 0) sleep_on_efd(w, efd);
        REQUIRE(now() < end, "watchdog: no connection request");
    }
    ucp_conn_request_attr_t ca = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR |
                                                UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID};
    REQUIRE(ucp_conn_request_query(pending_conn, &ca) == UCS_OK, "conn request query");
    CHECK(ca.client_id == CLIENT_ID, "client id %#llx", (unsigned long long)ca.client_id);
    uint16_t client_port = ntohs(((struct sockaddr_in *)&ca.client_address)->sin_port);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_USER_DATA;
    ep.conn_request = pending_conn;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_err;
    ep.user_data = (void *)0xfeed;
    ucp_ep_h e;
    REQUIRE(ucp_ep_create(w, &ep, &e) == UCS_OK, "server ep");
    pending_conn = NULL;

    /* Streams: partial receives until all 1 + 64 KiB arrive; recv_data for the 4 MiB. */
    unsigned char *big = malloc(BIG), *got = malloc(BIG + MID + 1);
    fill(big, BIG, 1);
    stream_recv_all(w, e, got, 1 + MID);
    CHECK(same(got, 1 + MID, 1), "stream data (1 B + 64 KiB)");
    size_t have = 0;
    end = now() + WATCHDOG_S;
    while (have < BIG) {
        size_t len = 0;
        void *d = ucp_stream_recv_data_nb(e, &len);
        REQUIRE(!UCS_PTR_IS_ERR(d), "recv_data");
        if (d == NULL) {
            ucp_worker_progress(w);
            REQUIRE(now() < end, "watchdog: stream 4 MiB");
            continue;
        }
        CHECK(memcmp(d, big + have, len) == 0, "stream data at %zu", have);
        have += len;
        ucp_stream_data_release(e, d);
    }

    /* Active messages: the eager one (kept, released later), two by rendezvous. */
    wait_am(w, 1);
    struct am_msg *m = &am_got.m[0];
    CHECK(!m->rndv && m->data_flag && m->len == 100 && same(m->data, 100, 1), "eager am");
    CHECK((uintptr_t)m->data % AM_ALIGN == 0, "am data at %p, not %d-aligned", m->data, AM_ALIGN);
    CHECK(m->hdr_len == 16 && memcmp(m->hdr, "header-0123456", 15) == 0, "am header");
    REQUIRE(m->reply_ep != NULL, "reply ep");
    wait_am(w, 2);
    m = &am_got.m[1];
    CHECK(m->rndv && m->len == BIG && m->hdr_len == 3, "rndv am");
    memset(got, 0, BIG);
    am_recv(w, m->data, got, BIG, ucp_dt_make_contig(1), BIG);
    CHECK(same(got, BIG, 1), "rndv am data");
    wait_am(w, 3);
    m = &am_got.m[2];
    CHECK(m->rndv && m->len == BIG && m->hdr_len == 0, "rndv am 2");
    memset(got, 0, BIG);
    ucp_dt_iov_t iov[3] = {{got, 1000}, {got + 1000, BIG / 2}, {got + 1000 + BIG / 2, BIG}};
    am_recv(w, m->data, iov, 3, ucp_dt_make_iov(), BIG);
    CHECK(same(got, BIG, 1), "rndv am data (iov)");
    ucp_am_data_release(w, am_got.m[0].data);
    CHECK(wait_req(w, am_send(am_got.m[0].reply_ep, AM_REPLY_ID, NULL, 0, "reply", 5, 0)) ==
              UCS_OK, "reply");

    /* The client's endpoint as seen from both sides. */
    uint16_t lport = 0;
    REQUIRE(read(c2s[0], &lport, sizeof(lport)) == sizeof(lport), "pipe");
    CHECK(lport == client_port, "client port %d vs %d", lport, client_port);
    ucp_ep_attr_t ea;
    memset(&ea, 0, sizeof(ea));
    ea.field_mask = UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR;
    REQUIRE(ucp_ep_query(e, &ea) == UCS_OK, "server ep query");
    CHECK(ntohs(((struct sockaddr_in *)&ea.remote_sockaddr)->sin_port) == client_port, "remote");

    /* The nbr send, received here. */
    void *rr = ucp_request_alloc(w);
    ucs_status_t s = ucp_tag_recv_nbr(w, got, 1000, ucp_dt_make_contig(1), 0x77, ~0ull, rr);
    CHECK(s == UCS_OK || s == UCS_INPROGRESS, "recv_nbr");
    ucp_tag_recv_info_t info;
    end = now() + WATCHDOG_S;
    while (ucp_tag_recv_request_test(rr, &info) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: nbr");
    }
    CHECK(info.length == 1000 && info.sender_tag == 0x77 && same(got, 1000, 1), "nbr data");
    ucp_request_free(rr);

    /* The second connection is rejected. */
    end = now() + WATCHDOG_S;
    while (pending_conn == NULL) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: second request");
    }
    CHECK(ucp_listener_reject(l, pending_conn) == UCS_OK, "reject");
    queries(c, w, e);

    /* The client dies: the endpoint's error handler runs, a pending receive fails. */
    char go;
    REQUIRE(read(c2s[0], &go, 1) == 1, "pipe");
    size_t len;
    void *pending = ucp_stream_recv_nb(e, got, 10, ucp_dt_make_contig(1), NULL, &len,
                                       UCP_STREAM_RECV_FLAG_WAITALL);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st), "the client ended before its kill (status %d)", st);
    end = now() + WATCHDOG_S;
    while (n_err == 0) {
        ucp_worker_progress(w);
        REQUIRE(now() < end, "watchdog: peer death not reported");
    }
    CHECK(ep_failed != UCS_OK, "error handler status");
    if (pending != NULL && !UCS_PTR_IS_ERR(pending)) {
        CHECK(wait_req(w, pending) != UCS_OK, "a receive from a dead peer succeeded");
    }
    void *cr = ucp_ep_close_nb(e, UCP_EP_CLOSE_MODE_FORCE);
    CHECK(!UCS_PTR_IS_ERR(cr) || UCS_PTR_STATUS(cr) != UCS_OK, "close");
    if (cr != NULL && !UCS_PTR_IS_ERR(cr)) wait_req(w, cr);
    ucp_listener_destroy(l);
    ucp_worker_destroy(w);
    ucp_cleanup(c);
    free(big);
    free(got);
    if (failures == 0) printf("full_api: all checks passed (peer death: %s)\n",
                              ucs_status_string(ep_failed));
    return failures != 0;
}

int main(void)
{
    alarm(4 * WATCHDOG_S);
    return server();
}
