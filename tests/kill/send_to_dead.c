/*
 * A send to a peer that dies before, during or after the endpoint to it is created: does the
 * sender learn that its message was not delivered? Written on UCX 1.13's C API (compiled against
 * Debian's libucx-dev headers), so the same binary runs on rucx's libucp.so.0 and on Debian's
 * UCX. tests/kill-campaign.sh runs it many times per transport and counts silent losses.
 *
 *   send_to_dead recv DIR [hello]
 *       The receiver: writes its pid and worker address to DIR/addr (through a rename, so the
 *       file is whole when it appears), posts a receive for tag 1 (warm-up) and tag 2 (the
 *       payload), and progresses until killed (or 120 s pass). Each completed receive appends
 *       "got TAG LEN STATUS" to DIR/got, written at once, so the line survives a SIGKILL that
 *       follows. With `hello` it first greets the sender as UCX's ucp_hello_world client does
 *       (an endpoint to the address in DIR/saddr, 8 bytes with tag 3) and SIGKILLs itself as
 *       soon as that send completed (that example's `-e recv`), leaving "sent STATUS" in
 *       DIR/greeted.
 *   send_to_dead send DIR WHEN SIZE [GRACE_S]
 *       The sender: creates an endpoint (UCP_ERR_HANDLING_MODE_PEER, with an error handler) to
 *       the receiver of DIR/addr and sends SIZE bytes with tag 2, then flushes the endpoint and
 *       progresses up to GRACE_S seconds (default 5) more for the error handler. WHEN:
 *         before  the campaign killed the receiver before starting the sender;
 *         during  a thread of the sender kills the receiver DELAY_US microseconds (environment,
 *                 default 0) after the sender starts creating the endpoint;
 *         after   the sender first sends 16 B with tag 1 and flushes (the endpoint is wired up),
 *                 prints "ready", and waits, progressing, until DIR/go exists (the campaign
 *                 kills the receiver, waits for its exit, then creates DIR/go);
 *         hello   the sender writes its own address to DIR/saddr and waits for the receiver's
 *                 greeting (receiver started with `hello`), which kills itself right after it;
 *                 then the sender creates its endpoint and sends, as ucp_hello_world's server.
 *                 "result nogreeting" if the greeting did not come within 10 s.
 *       The last line is one of:
 *         "result error STAGE STATUS"  the sender saw an error: STAGE is ep_create, send, flush
 *                                      or handler (the endpoint's error handler ran);
 *         "result ok"                  everything completed with UCS_OK and the handler did not
 *                                      run within GRACE_S: if the receiver did not record
 *                                      "got 2", the message was lost silently;
 *         "result hang STAGE"          a request did not complete within 60 s.
 *       Exit status 0 for error or ok, 1 for hang or bad input.
 */
#include <ucp/api/ucp.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_WARM 1
#define TAG_DATA 2
#define TAG_HELLO 3
#define MAX_SIZE (8u << 20)
#define REQUEST_LIMIT_S 60.0
#define GREETING_LIMIT_S 10.0

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "send_to_dead: %s: %s\n", what, ucs_status_string(st));
    exit(1);
}

static ucp_context_h context;
static ucp_worker_h worker;

static void setup(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        die("ucp_config_read", st);
    }
    st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        die("ucp_init", st);
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    st = ucp_worker_create(context, &wp, &worker);
    if (st != UCS_OK) {
        die("ucp_worker_create", st);
    }
}

/* Writes this process's pid and worker address to DIR/NAME, through a rename. */
static void write_address(const char *dir, const char *name)
{
    char path[4096], tmp[4096];
    ucp_address_t *addr;
    size_t len;
    ucs_status_t st = ucp_worker_get_address(worker, &addr, &len);
    if (st != UCS_OK) {
        die("ucp_worker_get_address", st);
    }
    snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(tmp, "w");
    long pid = (long)getpid();
    uint64_t len64 = len;
    if (f == NULL || fwrite(&pid, sizeof(pid), 1, f) != 1 || fwrite(&len64, 8, 1, f) != 1 ||
        fwrite(addr, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror("send_to_dead: writing the address");
        exit(1);
    }
    ucp_worker_release_address(worker, addr);
}

/* Reads DIR/NAME (write_address's format), waiting up to 60 s for it to appear. Returns the
 * address (malloc'ed) and sets *pid. */
static void *read_address(const char *dir, const char *name, long *pid)
{
    char path[4096];
    uint64_t len;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++) {
        usleep(1000);
    }
    FILE *f = fopen(path, "r");
    if (f == NULL || fread(pid, sizeof(*pid), 1, f) != 1 || fread(&len, 8, 1, f) != 1 ||
        len > 65536) {
        fprintf(stderr, "send_to_dead: cannot read %s\n", path);
        exit(1);
    }
    void *addr = malloc(len);
    if (addr == NULL || fread(addr, 1, len, f) != len) {
        fprintf(stderr, "send_to_dead: %s is truncated\n", path);
        exit(1);
    }
    fclose(f);
    return addr;
}

/* ---------------------------------------------------------------- receiver */

static char got_path[4096];

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    (void)request;
    (void)user_data;
    char line[128];
    int fd = open(got_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    int n = snprintf(line, sizeof(line), "got %llu %zu %s\n",
                     (unsigned long long)info->sender_tag, info->length,
                     ucs_status_string(status));
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) != n) {
            perror("send_to_dead: writing the got file");
        }
        close(fd);
    }
}

/* Greets the sender (DIR/saddr) with 8 bytes of tag 3, writes "sent STATUS" to DIR/greeted once
 * that send completed, and dies. */
static void greet_and_die(const char *dir)
{
    static unsigned char hello[8] = "hello";
    long pid;
    ucp_ep_h ep;
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = read_address(dir, "saddr", &pid)};
    ucs_status_t st = ucp_ep_create(worker, &ep_params, &ep);
    if (st != UCS_OK) {
        die("greeting: ucp_ep_create", st);
    }
    ucp_request_param_t sp = {.op_attr_mask = 0};
    void *req = ucp_tag_send_nbx(ep, hello, sizeof(hello), TAG_HELLO, &sp);
    if (UCS_PTR_IS_ERR(req)) {
        die("greeting: ucp_tag_send_nbx", UCS_PTR_STATUS(req));
    }
    while (req != NULL && (st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    char path[4096], line[128];
    snprintf(path, sizeof(path), "%s/greeted", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int n = snprintf(line, sizeof(line), "sent %s\n", ucs_status_string(req ? st : UCS_OK));
    if (fd < 0 || write(fd, line, (size_t)n) != n) {
        perror("send_to_dead: writing the greeted file");
    }
    raise(SIGKILL);
}

static int receiver(const char *dir, int hello)
{
    static unsigned char warm[64];
    unsigned char *data = malloc(MAX_SIZE);
    if (data == NULL) {
        return 1;
    }
    setup();
    snprintf(got_path, sizeof(got_path), "%s/got", dir);
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.recv = recv_done};
    void *r1 = ucp_tag_recv_nbx(worker, warm, sizeof(warm), TAG_WARM, UINT64_MAX, &rp);
    void *r2 = ucp_tag_recv_nbx(worker, data, MAX_SIZE, TAG_DATA, UINT64_MAX, &rp);
    if (UCS_PTR_IS_ERR(r1) || UCS_PTR_IS_ERR(r2)) {
        die("ucp_tag_recv_nbx", UCS_PTR_STATUS(UCS_PTR_IS_ERR(r1) ? r1 : r2));
    }
    write_address(dir, "addr");
    if (hello) {
        greet_and_die(dir);
    }
    double end = now() + 120;
    while (now() < end) {
        if (ucp_worker_progress(worker) == 0) {
            usleep(100);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- sender */

static volatile ucs_status_t handler_status = UCS_OK;

static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    if (handler_status == UCS_OK) {
        handler_status = status;
    }
}

static pid_t victim;
static long delay_us;
static pthread_t killer_thread;
static int killer_started;

/* The result is only known once the receiver is dead: waits for the killer thread, if any. */
static void join_killer(void)
{
    if (killer_started) {
        pthread_join(killer_thread, NULL);
        killer_started = 0;
    }
}

static void result_error(const char *stage, ucs_status_t st)
{
    join_killer();
    printf("result error %s %s\n", stage, ucs_status_string(st));
    exit(0);
}

/* Waits for a request of `stage`; exits with the result line if it failed or hung. */
static void wait_request(const char *stage, void *req)
{
    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        result_error(stage, UCS_PTR_STATUS(req));
    }
    double end = now() + REQUEST_LIMIT_S;
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        if (now() > end) {
            join_killer();
            printf("result hang %s\n", stage);
            exit(1);
        }
    }
    ucp_request_free(req);
    if (st != UCS_OK) {
        result_error(stage, st);
    }
}

static void *killer(void *arg)
{
    (void)arg;
    if (delay_us > 0) {
        usleep((useconds_t)delay_us);
    }
    kill(victim, SIGKILL);
    return NULL;
}

static int sender(const char *dir, const char *when, size_t size, double grace)
{
    char path[4096];
    long pid;
    unsigned char *data = malloc(size ? size : 1);
    if (data == NULL) {
        return 1;
    }
    for (size_t i = 0; i < size; i++) {
        data[i] = (unsigned char)(i * 7 + 3);
    }
    setup();
    if (strcmp(when, "hello") == 0) {
        static unsigned char greeting[8];
        ucp_request_param_t rp = {.op_attr_mask = 0};
        void *req = ucp_tag_recv_nbx(worker, greeting, sizeof(greeting), TAG_HELLO, UINT64_MAX,
                                     &rp);
        write_address(dir, "saddr");
        double end = now() + GREETING_LIMIT_S;
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
            if (now() > end) {
                printf("result nogreeting\n");
                return 0;
            }
        }
        wait_request("greeting", req);
        printf("greeted\n");
    }
    void *addr = read_address(dir, "addr", &pid);

    if (strcmp(when, "during") == 0) {
        const char *d = getenv("DELAY_US");
        victim = (pid_t)pid;
        delay_us = d ? atol(d) : 0;
        if (pthread_create(&killer_thread, NULL, killer, NULL) != 0) {
            return 1;
        }
        killer_started = 1;
    }
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_failed, .arg = NULL},
    };
    ucp_ep_h ep;
    ucs_status_t st = ucp_ep_create(worker, &ep_params, &ep);
    if (st != UCS_OK) {
        result_error("ep_create", st);
    }
    ucp_request_param_t sp = {.op_attr_mask = 0};
    if (strcmp(when, "after") == 0) {
        static unsigned char warm[16];
        wait_request("send", ucp_tag_send_nbx(ep, warm, sizeof(warm), TAG_WARM, &sp));
        wait_request("flush", ucp_ep_flush_nbx(ep, &sp));
        printf("ready\n");
        fflush(stdout);
        snprintf(path, sizeof(path), "%s/go", dir);
        double end = now() + REQUEST_LIMIT_S;
        while (access(path, F_OK) != 0) {
            ucp_worker_progress(worker);
            usleep(100);
            if (now() > end) {
                printf("result hang waiting-for-go\n");
                return 1;
            }
        }
    }
    if (handler_status != UCS_OK) {
        result_error("handler", handler_status);
    }
    wait_request("send", ucp_tag_send_nbx(ep, data, size, TAG_DATA, &sp));
    wait_request("flush", ucp_ep_flush_nbx(ep, &sp));
    double end = now() + grace;
    while (handler_status == UCS_OK && now() < end) {
        if (ucp_worker_progress(worker) == 0) {
            usleep(100);
        }
    }
    if (handler_status != UCS_OK) {
        result_error("handler", handler_status);
    }
    join_killer();
    printf("result ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 3 || (argc == 4 && strcmp(argv[3], "hello") == 0)) &&
        strcmp(argv[1], "recv") == 0) {
        return receiver(argv[2], argc == 4);
    }
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "send") == 0 &&
        (strcmp(argv[3], "before") == 0 || strcmp(argv[3], "during") == 0 ||
         strcmp(argv[3], "after") == 0 || strcmp(argv[3], "hello") == 0)) {
        char *end;
        unsigned long size = strtoul(argv[4], &end, 0);
        double grace = argc == 6 ? atof(argv[5]) : 5.0;
        if (*end == '\0' && size <= MAX_SIZE && grace >= 0) {
            return sender(argv[2], argv[3], size, grace);
        }
    }
    fprintf(stderr, "usage: send_to_dead recv DIR [hello]\n"
                    "       send_to_dead send DIR before|during|after|hello SIZE [GRACE_S]\n"
                    "(SIZE at most %u bytes)\n",
            MAX_SIZE);
    return 1;
}
