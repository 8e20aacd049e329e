/*
 * A peer killed under an endpoint, through UCX 1.13's header on rucx's libuct: for each
 * transport given (tl/dev), a child process opens an interface and hands its addresses over a
 * pipe; the parent connects, exchanges a message with it, then the child is killed with
 * SIGKILL. The parent keeps sending: the interface's error handler must run for that endpoint
 * with a failure status (the transports announce UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE), and
 * nothing may abort. Prints "peer_death: <tl>/<dev> passed".
 */
#include <uct/api/uct.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(_cond, ...) \
    do { \
        if (!(_cond)) { \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #_cond); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            ++failures; \
        } \
    } while (0)

typedef struct {
    uct_component_h cmpt;
    uct_md_h        md;
    uct_worker_h    worker;
    uct_iface_h     iface;
    uct_iface_attr_t attr;
} side_t;

static struct {
    int          calls;
    uct_ep_h     ep;
    ucs_status_t status;
} err;

static int received;

static ucs_status_t on_error(void *arg, uct_ep_h ep, ucs_status_t status)
{
    (void)arg;
    err.calls++;
    err.ep     = ep;
    err.status = status;
    return UCS_OK;
}

static ucs_status_t on_am(void *arg, void *data, size_t length, unsigned flags)
{
    (void)arg;
    (void)data;
    (void)length;
    (void)flags;
    received++;
    return UCS_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int open_side(const char *tl, const char *dev, side_t *s)
{
    uct_component_h *cmpts;
    unsigned ncmpt, c, m, r, nres;
    uct_tl_resource_desc_t *res;
    uct_component_attr_t cattr;
    uct_iface_config_t *cfg;
    uct_iface_params_t p;

    if (uct_worker_create(NULL, UCS_THREAD_MODE_SINGLE, &s->worker) != UCS_OK ||
        uct_query_components(&cmpts, &ncmpt) != UCS_OK) {
        return 0;
    }
    for (c = 0; c < ncmpt; ++c) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        uct_component_query(cmpts[c], &cattr);
        cattr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        cattr.md_resources = alloca(sizeof(*cattr.md_resources) * (cattr.md_resource_count + 1));
        uct_component_query(cmpts[c], &cattr);
        for (m = 0; m < cattr.md_resource_count; ++m) {
            if (uct_md_open(cmpts[c], cattr.md_resources[m].md_name, NULL, &s->md) != UCS_OK) {
                continue;
            }
            uct_md_query_tl_resources(s->md, &res, &nres);
            for (r = 0; r < nres; ++r) {
                if (!strcmp(res[r].tl_name, tl) && !strcmp(res[r].dev_name, dev)) {
                    s->cmpt = cmpts[c];
                    goto found;
                }
            }
            uct_release_tl_resource_list(res);
            uct_md_close(s->md);
        }
    }
    uct_release_component_list(cmpts);
    return 0;
found:
    uct_release_tl_resource_list(res);
    uct_release_component_list(cmpts);
    memset(&p, 0, sizeof(p));
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG;
    p.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name  = tl;
    p.mode.device.dev_name = dev;
    p.err_handler          = on_error;
    p.err_handler_arg      = NULL;
    if (uct_md_iface_config_read(s->md, tl, NULL, NULL, &cfg) != UCS_OK) {
        return 0;
    }
    if (uct_iface_open(s->md, s->worker, &p, cfg, &s->iface) != UCS_OK) {
        uct_config_release(cfg);
        return 0;
    }
    uct_config_release(cfg);
    uct_iface_progress_enable(s->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_iface_set_am_handler(s->iface, 1, on_am, NULL, 0);
    return uct_iface_query(s->iface, &s->attr) == UCS_OK;
}

/* The child: opens its side, sends its addresses, progresses until it is killed. */
static void child(const char *tl, const char *dev, int wfd)
{
    side_t s;
    char buf[512];
    size_t dl, il;

    memset(&s, 0, sizeof(s));
    if (!open_side(tl, dev, &s)) {
        _exit(2);
    }
    dl = s.attr.device_addr_len;
    il = s.attr.iface_addr_len;
    uct_iface_get_device_address(s.iface, (uct_device_addr_t*)buf);
    uct_iface_get_address(s.iface, (uct_iface_addr_t*)(buf + dl));
    if (write(wfd, buf, dl + il) != (ssize_t)(dl + il)) {
        _exit(3);
    }
    for (;;) {
        uct_worker_progress(s.worker);
    }
}

static void run(const char *tl, const char *dev)
{
    side_t s;
    int pfd[2], status, before = failures;
    char addr[512];
    pid_t pid;
    uct_ep_params_t ep;
    uct_ep_h e = NULL;
    ucs_status_t st = UCS_ERR_NO_RESOURCE;
    ssize_t n;
    double t;
    int sent_after = 0, send_failed = 0;

    memset(&s, 0, sizeof(s));
    memset(&err, 0, sizeof(err));
    received = 0;
    CHECK(pipe(pfd) == 0, "pipe");
    pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        child(tl, dev, pfd[1]);
    }
    close(pfd[1]);
    CHECK(open_side(tl, dev, &s), "open %s/%s", tl, dev);
    CHECK(s.attr.cap.flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE, "peer failure handling");
    CHECK(s.attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE, "connects to interfaces");
    n = read(pfd[0], addr, sizeof(addr));
    CHECK(n == (ssize_t)(s.attr.device_addr_len + s.attr.iface_addr_len),
          "addresses from the child: %zd bytes", n);

    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                    UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface      = s.iface;
    ep.dev_addr   = (uct_device_addr_t*)addr;
    ep.iface_addr = (uct_iface_addr_t*)(addr + s.attr.device_addr_len);
    CHECK(uct_ep_create(&ep, &e) == UCS_OK, "connect to the child");
    if (e == NULL) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return;
    }
    /* The child is alive: a message and a flush go through. */
    for (t = now(); now() - t < 10;) {
        st = uct_ep_am_short(e, 1, 42, "hi", 3);
        uct_worker_progress(s.worker);
        if (st == UCS_OK) {
            break;
        }
    }
    CHECK(st == UCS_OK, "send to the living child: %s", ucs_status_string(st));
    for (t = now(); now() - t < 10;) {
        st = uct_ep_flush(e, 0, NULL);
        uct_worker_progress(s.worker);
        if (st == UCS_OK) {
            break;
        }
    }
    CHECK(st == UCS_OK, "flush to the living child: %s", ucs_status_string(st));
    CHECK(err.calls == 0, "no error while the child lives");

    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was killed");

    /* Keep sending: the error handler must run for this endpoint. */
    for (t = now(); (err.calls == 0) && (now() - t < 30);) {
        st = uct_ep_am_short(e, 1, 43, "x", 2);
        if (st == UCS_OK) {
            ++sent_after;
        } else if (st != UCS_ERR_NO_RESOURCE) {
            ++send_failed;
        }
        uct_worker_progress(s.worker);
    }
    CHECK(err.calls == 1, "the error handler ran once: %d calls", err.calls);
    CHECK(err.ep == e, "for the endpoint to the dead child");
    CHECK(err.status < 0, "with a failure status: %d", err.status);
    printf("peer_death: %s/%s error '%s' after %.3f s (%d sends accepted, %d refused)\n", tl,
           dev, ucs_status_string(err.status), now() - t, sent_after, send_failed);
    uct_ep_destroy(e);
    uct_iface_close(s.iface);
    uct_md_close(s.md);
    uct_worker_destroy(s.worker);
    close(pfd[0]);
    printf("peer_death: %s/%s %s\n", tl, dev, (failures == before) ? "passed" : "FAILED");
}

int main(int argc, char **argv)
{
    int i;
    setvbuf(stdout, NULL, _IONBF, 0);
    for (i = 1; i < argc; ++i) {
        char tl[64], *dev;
        snprintf(tl, sizeof(tl), "%s", argv[i]);
        dev = strchr(tl, '/');
        if (dev == NULL) {
            fprintf(stderr, "usage: peer_death tl/dev ...\n");
            return 2;
        }
        *dev++ = '\0';
        run(tl, dev);
    }
    return failures ? 1 : 0;
}
