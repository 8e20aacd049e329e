/*
 * rucx libucp: a tag receive on a worker without error handling (UCP_ERR_HANDLING_MODE_NONE, no
 * error handler on any endpoint, as Open MPI and MPICH make theirs) whose peer dies must not
 * complete as if a message had come: the process ends with SIGABRT and a line saying why.
 *
 * The test process forks a receiver and a peer. The peer sends its worker address through a
 * pipe, receives one greeting (so the receiver's endpoint is wired up), waits for the receiver
 * to post a tag receive, and kills itself. The receiver must then die of SIGABRT within the
 * time limit, its receive callback never run; the test process checks both.
 *
 * Nor may a tag send to the dead peer be refused at once and the process go on: an MPI library
 * may carry on past it with data that never came (MPICH's allreduce reduced a buffer the failed
 * step never filled and returned MPI_SUCCESS). The same pair runs again with a sender that,
 * after the peer's death, sends until the send fails: it must die of SIGABRT instead of seeing
 * the failure returned.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#define REQUIRE(c, what)                                                                       \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "unhandled_failure: %s failed (line %d)\n", what, __LINE__);       \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

static ucp_context_h ctx;
static ucp_worker_h worker;

static void setup(void)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_config_t *cfg;
    REQUIRE(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
    REQUIRE(ucp_init(&p, cfg, &ctx) == UCS_OK, "init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    REQUIRE(ucp_worker_create(ctx, &wp, &worker) == UCS_OK, "worker");
}

static void wait_req(void *r)
{
    REQUIRE(!UCS_PTR_IS_ERR(r), "operation");
    if (r == NULL) {
        return;
    }
    while (ucp_request_check_status(r) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(r);
}

static void sent(void *r, ucs_status_t s, void *u) { (void)r, (void)s, (void)u; }

static volatile int callback_ran;
static void received(void *r, ucs_status_t s, const ucp_tag_recv_info_t *i, void *u)
{
    (void)r, (void)i, (void)u;
    fprintf(stderr, "unhandled_failure: the receive callback ran with '%s'\n",
            ucs_status_string(s));
    callback_ran = 1;
}

/* The peer: address out, greeting in, then death once the receiver says it posted. */
static void peer(int addr_w, int go_r)
{
    setup();
    ucp_address_t *a;
    size_t len;
    REQUIRE(ucp_worker_get_address(worker, &a, &len) == UCS_OK, "address");
    REQUIRE(write(addr_w, &len, sizeof(len)) == sizeof(len) && write(addr_w, a, len) == (ssize_t)len,
            "address out");
    char buf[8];
    ucp_request_param_t rp = {0};
    wait_req(ucp_tag_recv_nbx(worker, buf, sizeof(buf), 1, ~0ull, &rp));
    char go;
    REQUIRE(read(go_r, &go, 1) == 1, "go");
    kill(getpid(), SIGKILL);
}

/* Sets up, reads the peer's address from addr_r, makes an endpoint to it without error
 * handling and sends it a greeting (waited for). */
static ucp_ep_h greet(int addr_r)
{
    setup();
    size_t len;
    REQUIRE(read(addr_r, &len, sizeof(len)) == sizeof(len) && len < 65536, "address length");
    void *a = malloc(len);
    REQUIRE(read(addr_r, a, len) == (ssize_t)len, "address in");
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = a};
    ucp_ep_h ep;
    REQUIRE(ucp_ep_create(worker, &ep_p, &ep) == UCS_OK, "ep");
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = sent};
    wait_req(ucp_tag_send_nbx(ep, "hello", 6, 1, &sp));
    return ep;
}

/* The receiver: endpoint without error handling, greeting, a receive nobody will answer. */
static void receiver(int addr_r, int go_w)
{
    (void)greet(addr_r);
    char buf[8];
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = received};
    void *r = ucp_tag_recv_nbx(worker, buf, sizeof(buf), 2, ~0ull, &rp);
    REQUIRE(!UCS_PTR_IS_ERR(r) && r != NULL, "receive posted");
    REQUIRE(write(go_w, "g", 1) == 1, "go");
    time_t end = time(NULL) + 60;
    while (time(NULL) < end && !callback_ran) {
        ucp_worker_progress(worker);
    }
    fprintf(stderr, "unhandled_failure: the receiver is still alive (callback ran: %d)\n",
            callback_ran);
    exit(3);
}

/* The sender: endpoint without error handling, greeting, then (the peer dead) tag sends until
 * one is refused. Each send that gives a request is waited for (its failure, if any, comes by
 * its status); the first send refused at once must not return. */
static void sender(int addr_r, int go_w)
{
    ucp_ep_h ep = greet(addr_r);
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = sent};
    REQUIRE(write(go_w, "g", 1) == 1, "go");
    time_t end = time(NULL) + 60;
    while (time(NULL) < end) {
        void *r = ucp_tag_send_nbx(ep, "more", 5, 3, &sp);
        if (UCS_PTR_IS_ERR(r)) {
            fprintf(stderr, "unhandled_failure: the send was refused with '%s' and the sender goes on\n",
                    ucs_status_string(UCS_PTR_STATUS(r)));
            exit(4);
        }
        if (r != NULL) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS && time(NULL) < end) {
                ucp_worker_progress(worker);
            }
            ucp_request_free(r);
        }
        ucp_worker_progress(worker);
    }
    fprintf(stderr, "unhandled_failure: the sender is still alive\n");
    exit(3);
}

/* Runs `survivor` against a peer that dies; gives 0 when the survivor died of SIGABRT. */
static int run(void (*survivor)(int, int), const char *who, const char *what)
{
    /* Children must not inherit (and print again) what is buffered. */
    fflush(stdout);
    int addr[2], go[2];
    REQUIRE(pipe(addr) == 0 && pipe(go) == 0, "pipes");
    pid_t p = fork();
    REQUIRE(p >= 0, "fork");
    if (p == 0) {
        peer(addr[1], go[0]);
    }
    pid_t r = fork();
    REQUIRE(r >= 0, "fork");
    if (r == 0) {
        survivor(addr[0], go[1]);
    }
    int st = 0;
    REQUIRE(waitpid(r, &st, 0) == r, "wait for the survivor");
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    close(addr[0]), close(addr[1]), close(go[0]), close(go[1]);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
        fprintf(stderr, "unhandled_failure: FAIL: the %s ended with status %#x, not SIGABRT\n",
                who, st);
        return 1;
    }
    printf("unhandled_failure: the %s ended by SIGABRT, %s\n", who, what);
    return 0;
}

int main(void)
{
    int bad = run(receiver, "receiver", "its receive never completed");
    bad |= run(sender, "sender", "its failed send never returned");
    return bad;
}
