/*
 * Scale benchmark over UCX 1.13's C API: one hub worker with an endpoint to each of N peer
 * workers, one 8-byte tagged message each way per endpoint pair.
 *
 *   scale [-n N] [-p P] [-t TIMEOUT_S]
 *
 * -n N  peer workers (default 1000).
 * -p P  0 (default): the N peer workers live in the hub's process, in one context; memory and
 *       descriptors are then per endpoint pair, both sides and the peer worker included.
 *       P > 0: P forked processes with about N/P workers each; addresses go through a
 *       socketpair; the hub's numbers are then the hub side only, the peers' are summed apart.
 *
 * The same binary runs over Debian's libucp and over rucx's (LD_LIBRARY_PATH); UCX_TLS picks
 * the transport. The hub creates an endpoint to every peer worker and each peer worker one to
 * the hub; the hub sends 8 bytes to every peer (tag = peer index), each peer replies 8 bytes
 * (tag = 1 << 32 | index), and the run ends when every send and receive has completed.
 *
 * SCALE_SMAPS=FILE saves the hub's /proc/self/smaps after the exchange.
 * SCALE_EXIT_AFTER_EXCHANGE=1 makes the hub exit(0) right after that sample, without closing
 * anything: under `heaptrack`, the "leaked" allocations are then what was live at that point.
 *
 * It prints one line, `RESULT key=value ...`, for capi/bench/scale.sh:
 *   rss_*_kb  VmRSS of the hub process at: base (context + hub worker), workers (peer workers
 *             created), eps (endpoints created and every message exchanged), end (all closed);
 *   anon_*_kb, shm_*_kb  its RssAnon (private memory: heap, stacks) and RssShmem (touched pages
 *             of shared-memory segments) at workers and eps;
 *   fd_*      entries of /proc/self/fd at the same points;
 *   map_*     shared-memory mappings in /proc/self/maps (/dev/shm, memfd:, SYSV);
 *   devshm_*, ipcs_*  entries of /dev/shm and lines of `ipcs -m` (machine-wide, so other
 *             processes add noise);
 *   t_workers_ms, t_create_ms (the ucp_ep_create calls, both directions), t_exchange_ms (from
 *             the first send to the last completion, including any lazy wireup), t_close_ms;
 *   peer_rss_kb, peer_fd  (P > 0) the peers' processes' growth from their base to the end of
 *             the exchange, summed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define REPLY_BIT (1ull << 32)
#define TAG_MASK_ALL ((ucp_tag_t)-1)

static double timeout_s = 120.0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "scale[%d]: %s: %s\n", (int)getpid(), what,
            st == UCS_OK ? strerror(errno) : ucs_status_string(st));
    exit(1);
}

/* One measurement of the process and of the machine's shared-memory segments. */
struct sample {
    long rss_kb;
    long anon_kb; /* RssAnon: private memory (heap, stacks) */
    long shm_kb;  /* RssShmem: pages of shared-memory segments this process touched */
    int fds;
    int maps;
    int devshm;
    int ipcs;
};

/* The kB figure of the /proc/self/status line that starts with `key` (e.g. "VmRSS:"), or -1. */
static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && sscanf(line + k, "%ld", &v) == 1)
            break;
    fclose(f);
    return v;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Mappings of shared-memory objects: each distinct (device, inode) once. */
static int shm_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], seen[4096][40];
    int n = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        char dev[16], path[256] = "";
        unsigned long inode;
        char key[40];
        int i, dup = 0;
        if (sscanf(line, "%*s %*s %*s %15s %lu %255[^\n]", dev, &inode, path) < 2)
            continue;
        if (!strstr(path, "/dev/shm/") && !strstr(path, "memfd:") && !strstr(path, "SYSV"))
            continue;
        snprintf(key, sizeof key, "%s:%lu", dev, inode);
        for (i = 0; i < n && !dup; i++)
            dup = !strcmp(seen[i], key);
        if (!dup && n < 4096)
            strcpy(seen[n++], key);
    }
    fclose(f);
    return n;
}

static int ipcs_lines(void)
{
    FILE *p = popen("ipcs -m 2>/dev/null | grep -c '^0x'", "r");
    int n = -1;
    if (!p)
        return -1;
    if (fscanf(p, "%d", &n) != 1)
        n = -1;
    pclose(p);
    return n;
}

static struct sample sample_now(void)
{
    struct sample s;
    s.rss_kb = status_kb("VmRSS:");
    s.anon_kb = status_kb("RssAnon:");
    s.shm_kb = status_kb("RssShmem:");
    s.fds = count_dir("/proc/self/fd") - 1; /* the opendir's own descriptor */
    s.maps = shm_maps();
    s.devshm = count_dir("/dev/shm");
    s.ipcs = ipcs_lines();
    return s;
}

/* With SCALE_SMAPS=FILE, copies the hub's /proc/self/smaps there (after the exchange), to see
 * which mappings the per-endpoint memory is in. */
static void save_smaps(void)
{
    const char *to = getenv("SCALE_SMAPS");
    FILE *in, *out;
    char buf[4096];
    size_t k;
    if (!to)
        return;
    in = fopen("/proc/self/smaps", "r");
    out = fopen(to, "w");
    if (!in || !out)
        die("copying /proc/self/smaps", UCS_OK);
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, k, out);
    fclose(in);
    fclose(out);
}

/* Socketpair helpers: whole writes and reads, or exit. */
static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("write to socketpair", UCS_OK);
        p += k;
        len -= (size_t)k;
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t k = read(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("read from socketpair (peer process gone?)", UCS_OK);
        p += k;
        len -= (size_t)k;
    }
}

static void send_blob(int fd, const void *buf, uint32_t len)
{
    write_all(fd, &len, sizeof len);
    write_all(fd, buf, len);
}

static void *recv_blob(int fd, uint32_t *len)
{
    void *buf;
    read_all(fd, len, sizeof *len);
    buf = malloc(*len ? *len : 1);
    if (!buf)
        die("malloc", UCS_OK);
    read_all(fd, buf, *len);
    return buf;
}

static ucp_context_h make_context(void)
{
    ucp_config_t *cfg;
    ucp_context_h ctx;
    ucp_params_t params;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        die("ucp_config_read", st);
    memset(&params, 0, sizeof params);
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    st = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        die("ucp_init", st);
    return ctx;
}

static ucp_worker_h make_worker(ucp_context_h ctx)
{
    ucp_worker_params_t wp;
    ucp_worker_h w;
    ucs_status_t st;
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(ctx, &wp, &w);
    if (st != UCS_OK)
        die("ucp_worker_create", st);
    return w;
}

static ucp_ep_h make_ep(ucp_worker_h w, const void *addr)
{
    ucp_ep_params_t ep;
    ucp_ep_h h;
    ucs_status_t st;
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = (const ucp_address_t *)addr;
    st = ucp_ep_create(w, &ep, &h);
    if (st != UCS_OK)
        die("ucp_ep_create", st);
    return h;
}

/* A posted operation: NULL when it completed at once. */
static void *post_send(ucp_ep_h ep, const uint64_t *buf, ucp_tag_t tag)
{
    ucp_request_param_t rp;
    ucs_status_ptr_t r;
    memset(&rp, 0, sizeof rp);
    r = ucp_tag_send_nbx(ep, buf, sizeof *buf, tag, &rp);
    if (UCS_PTR_IS_ERR(r))
        die("ucp_tag_send_nbx", UCS_PTR_STATUS(r));
    return r;
}

static void *post_recv(ucp_worker_h w, uint64_t *buf, ucp_tag_t tag)
{
    ucp_request_param_t rp;
    ucs_status_ptr_t r;
    memset(&rp, 0, sizeof rp);
    r = ucp_tag_recv_nbx(w, buf, sizeof *buf, tag, TAG_MASK_ALL, &rp);
    if (UCS_PTR_IS_ERR(r))
        die("ucp_tag_recv_nbx", UCS_PTR_STATUS(r));
    return r;
}

/* 1 when the request is done (and freed), 0 while in progress; exits on an error. */
static int done(void **req, const char *what)
{
    ucs_status_t st;
    if (!*req)
        return 1;
    st = ucp_request_check_status(*req);
    if (st == UCS_INPROGRESS)
        return 0;
    ucp_request_free(*req);
    *req = NULL;
    if (st != UCS_OK)
        die(what, st);
    return 1;
}

static void *close_ep(ucp_ep_h ep)
{
    ucp_request_param_t rp;
    ucs_status_ptr_t r;
    memset(&rp, 0, sizeof rp);
    r = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_ERR(r))
        die("ucp_ep_close_nbx", UCS_PTR_STATUS(r));
    return r;
}

/* The peer side of N workers: each has one endpoint to the hub, one receive and one reply. */
struct peers {
    int n, first; /* workers, index of the first in the whole run */
    ucp_worker_h *w;
    ucp_ep_h *ep;
    uint64_t *rbuf, *sbuf;
    void **rreq, **sreq;
    char *state; /* 0 receiving, 1 replying, 2 done */
    int left;
};

static void peers_alloc(struct peers *p, int n, int first)
{
    p->n = n;
    p->first = first;
    p->w = calloc(n, sizeof *p->w);
    p->ep = calloc(n, sizeof *p->ep);
    p->rbuf = calloc(n, sizeof *p->rbuf);
    p->sbuf = calloc(n, sizeof *p->sbuf);
    p->rreq = calloc(n, sizeof *p->rreq);
    p->sreq = calloc(n, sizeof *p->sreq);
    p->state = calloc(n, 1);
    p->left = n;
    if (!p->w || !p->ep || !p->rbuf || !p->sbuf || !p->rreq || !p->sreq || !p->state)
        die("calloc", UCS_OK);
}

static void peers_post_recvs(struct peers *p)
{
    int i;
    for (i = 0; i < p->n; i++)
        p->rreq[i] = post_recv(p->w[i], &p->rbuf[i], (ucp_tag_t)(p->first + i));
}

/* Progresses every peer worker once and moves each through receive, reply, done. */
static void peers_step(struct peers *p)
{
    int i;
    for (i = 0; i < p->n; i++) {
        ucp_worker_progress(p->w[i]);
        if (p->state[i] == 0 && done(&p->rreq[i], "peer receive")) {
            if (p->rbuf[i] != (uint64_t)(p->first + i) * 3) {
                fprintf(stderr, "scale: peer %d received %llu\n", p->first + i,
                        (unsigned long long)p->rbuf[i]);
                exit(1);
            }
            p->sbuf[i] = p->rbuf[i] + 1;
            p->sreq[i] = post_send(p->ep[i], &p->sbuf[i], REPLY_BIT | (ucp_tag_t)(p->first + i));
            p->state[i] = 1;
        }
        if (p->state[i] == 1 && done(&p->sreq[i], "peer reply")) {
            p->state[i] = 2;
            p->left--;
        }
    }
}

/* Closes every peer endpoint (flush mode) while `also` (the hub, when local) progresses too. */
static void peers_close(struct peers *p, ucp_worker_h also)
{
    void **req = calloc(p->n, sizeof *req);
    int i, left = p->n;
    double deadline = now_s() + timeout_s;
    for (i = 0; i < p->n; i++)
        req[i] = close_ep(p->ep[i]);
    while (left) {
        left = 0;
        if (also)
            ucp_worker_progress(also);
        for (i = 0; i < p->n; i++) {
            ucp_worker_progress(p->w[i]);
            left += !done(&req[i], "peer endpoint close");
        }
        if (now_s() > deadline) {
            fprintf(stderr, "scale: timeout closing peer endpoints (%d left)\n", left);
            exit(1);
        }
    }
    free(req);
}

/* A forked peer process: k workers, addresses to the hub, the exchange, stats back. */
static void child_main(int sock, int k, int first)
{
    ucp_context_h ctx;
    struct peers p;
    struct sample s0, s1;
    ucp_address_t *addr;
    size_t alen;
    void *hub_addr;
    uint32_t hlen;
    char cmd;
    char stats[128];
    int i;
    double deadline;

    read_all(sock, &cmd, 1); /* the hub's go: its own base is measured */
    ctx = make_context();
    s0 = sample_now();
    peers_alloc(&p, k, first);
    for (i = 0; i < k; i++) {
        ucs_status_t st;
        p.w[i] = make_worker(ctx);
        st = ucp_worker_get_address(p.w[i], &addr, &alen);
        if (st != UCS_OK)
            die("ucp_worker_get_address", st);
        send_blob(sock, addr, (uint32_t)alen);
        ucp_worker_release_address(p.w[i], addr);
    }
    hub_addr = recv_blob(sock, &hlen);
    for (i = 0; i < k; i++)
        p.ep[i] = make_ep(p.w[i], hub_addr);
    peers_post_recvs(&p);
    cmd = 'r';
    write_all(sock, &cmd, 1);
    fcntl(sock, F_SETFL, O_NONBLOCK);
    /* Progress until every reply left and the hub says it has them all. */
    deadline = now_s() + timeout_s;
    for (int told = 0; !told || p.left;) {
        ssize_t got;
        peers_step(&p);
        got = told ? 0 : read(sock, &cmd, 1);
        if (got == 1 || told) {
            told = 1;
            continue;
        }
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            die("hub went away", UCS_OK);
        if (now_s() > deadline) {
            fprintf(stderr, "scale: peer process timeout (%d of %d pending)\n", p.left, k);
            exit(1);
        }
    }
    s1 = sample_now();
    fcntl(sock, F_SETFL, 0);
    snprintf(stats, sizeof stats, "%ld %d", s1.rss_kb - s0.rss_kb, s1.fds - s0.fds);
    send_blob(sock, stats, (uint32_t)strlen(stats) + 1);
    /* Wait for the hub's go before closing, so the hub measures a full mesh. */
    fcntl(sock, F_SETFL, O_NONBLOCK);
    for (;;) {
        ssize_t got;
        for (i = 0; i < k; i++)
            ucp_worker_progress(p.w[i]);
        got = read(sock, &cmd, 1);
        if (got == 1)
            break;
        if (got == 0)
            break;
    }
    peers_close(&p, NULL);
    for (i = 0; i < k; i++)
        ucp_worker_destroy(p.w[i]);
    ucp_cleanup(ctx);
    free(hub_addr);
    _exit(0);
}

int main(int argc, char **argv)
{
    int n = 1000, nproc = 0, opt, i, c;
    ucp_context_h ctx;
    ucp_worker_h hub;
    struct peers local = {0};
    void **peer_addr;
    uint32_t *peer_alen;
    ucp_address_t *hub_addr;
    size_t hub_alen;
    ucp_ep_h *hub_ep;
    uint64_t *sbuf, *rbuf;
    void **sreq, **rreq;
    int *sock = NULL;
    pid_t *pid = NULL;
    struct sample s0, s1, s2, s3;
    double t0, t_workers, t_create, t_exchange, t_close, deadline;
    long peer_rss = 0;
    int peer_fd = 0, left;
    ucs_status_t st;

    while ((opt = getopt(argc, argv, "n:p:t:")) != -1) {
        switch (opt) {
        case 'n': n = atoi(optarg); break;
        case 'p': nproc = atoi(optarg); break;
        case 't': timeout_s = atof(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n PEER_WORKERS] [-p PROCESSES] [-t TIMEOUT_S]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || nproc < 0 || nproc > n || timeout_s <= 0) {
        fprintf(stderr, "scale: need -n >= 1, 0 <= -p <= n, -t > 0\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    /* Peer processes are forked before any UCX state exists, so they inherit none. */
    if (nproc > 0) {
        int first = 0;
        sock = calloc(nproc, sizeof *sock);
        pid = calloc(nproc, sizeof *pid);
        fflush(NULL);
        for (c = 0; c < nproc; c++) {
            int sv[2], k = n / nproc + (c < n % nproc);
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
                die("socketpair", UCS_OK);
            pid[c] = fork();
            if (pid[c] < 0)
                die("fork", UCS_OK);
            if (pid[c] == 0) {
                int j;
                for (j = 0; j < c; j++)
                    close(sock[j]);
                close(sv[0]);
                child_main(sv[1], k, first);
            }
            close(sv[1]);
            sock[c] = sv[0];
            first += k;
        }
    }

    ctx = make_context();
    hub = make_worker(ctx);
    st = ucp_worker_get_address(hub, &hub_addr, &hub_alen);
    if (st != UCS_OK)
        die("ucp_worker_get_address", st);
    peer_addr = calloc(n, sizeof *peer_addr);
    peer_alen = calloc(n, sizeof *peer_alen);
    hub_ep = calloc(n, sizeof *hub_ep);
    sbuf = calloc(n, sizeof *sbuf);
    rbuf = calloc(n, sizeof *rbuf);
    sreq = calloc(n, sizeof *sreq);
    rreq = calloc(n, sizeof *rreq);
    if (!peer_addr || !peer_alen || !hub_ep || !sbuf || !rbuf || !sreq || !rreq)
        die("calloc", UCS_OK);
    s0 = sample_now();

    /* Peer workers: here, or in forked processes. */
    t0 = now_s();
    if (nproc == 0) {
        peers_alloc(&local, n, 0);
        for (i = 0; i < n; i++) {
            size_t alen;
            ucp_address_t *a;
            local.w[i] = make_worker(ctx);
            st = ucp_worker_get_address(local.w[i], &a, &alen);
            if (st != UCS_OK)
                die("ucp_worker_get_address", st);
            peer_addr[i] = malloc(alen);
            memcpy(peer_addr[i], a, alen);
            peer_alen[i] = (uint32_t)alen;
            ucp_worker_release_address(local.w[i], a);
        }
    } else {
        char go = 'g';
        int first = 0;
        for (c = 0; c < nproc; c++)
            write_all(sock[c], &go, 1);
        for (c = 0; c < nproc; c++) {
            int k = n / nproc + (c < n % nproc);
            for (i = first; i < first + k; i++)
                peer_addr[i] = recv_blob(sock[c], &peer_alen[i]);
            first += k;
        }
    }
    t_workers = now_s() - t0;
    s1 = sample_now();

    /* Endpoints both ways. */
    t0 = now_s();
    for (i = 0; i < n; i++)
        hub_ep[i] = make_ep(hub, peer_addr[i]);
    if (nproc == 0) {
        for (i = 0; i < n; i++)
            local.ep[i] = make_ep(local.w[i], hub_addr);
    } else {
        for (c = 0; c < nproc; c++)
            send_blob(sock[c], hub_addr, (uint32_t)hub_alen);
    }
    t_create = now_s() - t0;
    if (nproc == 0) {
        peers_post_recvs(&local);
    } else {
        char cmd;
        for (c = 0; c < nproc; c++)
            read_all(sock[c], &cmd, 1);
    }

    /* The exchange: 8 bytes to every peer, 8 bytes back from each. */
    t0 = now_s();
    for (i = 0; i < n; i++)
        rreq[i] = post_recv(hub, &rbuf[i], REPLY_BIT | (ucp_tag_t)i);
    for (i = 0; i < n; i++) {
        sbuf[i] = (uint64_t)i * 3;
        sreq[i] = post_send(hub_ep[i], &sbuf[i], (ucp_tag_t)i);
    }
    deadline = now_s() + timeout_s;
    do {
        ucp_worker_progress(hub);
        if (nproc == 0)
            peers_step(&local);
        left = 0;
        for (i = 0; i < n; i++) {
            left += !done(&sreq[i], "hub send");
            left += !done(&rreq[i], "hub receive");
        }
        if (nproc == 0)
            left += local.left;
        if (now_s() > deadline) {
            fprintf(stderr, "scale: exchange timeout (%d operations pending)\n", left);
            return 1;
        }
    } while (left);
    t_exchange = now_s() - t0;
    for (i = 0; i < n; i++)
        if (rbuf[i] != (uint64_t)i * 3 + 1) {
            fprintf(stderr, "scale: hub received %llu from peer %d\n",
                    (unsigned long long)rbuf[i], i);
            return 1;
        }
    s2 = sample_now();
    save_smaps();
    if (getenv("SCALE_EXIT_AFTER_EXCHANGE"))
        exit(0);

    /* Peers' own growth (processes), then closing everything. */
    if (nproc > 0) {
        char cmd = 'd';
        for (c = 0; c < nproc; c++) {
            uint32_t len;
            char *stats;
            long r = 0;
            int f = 0;
            write_all(sock[c], &cmd, 1);
            /* Keep the hub progressing while the peer samples itself. */
            fcntl(sock[c], F_SETFL, O_NONBLOCK);
            for (;;) {
                struct pollfd pf = {sock[c], POLLIN, 0};
                ucp_worker_progress(hub);
                if (poll(&pf, 1, 0) == 1)
                    break;
            }
            fcntl(sock[c], F_SETFL, 0);
            stats = recv_blob(sock[c], &len);
            if (sscanf(stats, "%ld %d", &r, &f) != 2)
                die("bad stats from a peer process", UCS_OK);
            peer_rss += r;
            peer_fd += f;
            free(stats);
        }
    }
    t0 = now_s();
    if (nproc == 0) {
        peers_close(&local, hub);
    } else {
        char cmd = 'c';
        for (c = 0; c < nproc; c++)
            write_all(sock[c], &cmd, 1);
    }
    {
        void **creq = calloc(n, sizeof *creq);
        for (i = 0; i < n; i++)
            creq[i] = close_ep(hub_ep[i]);
        deadline = now_s() + timeout_s;
        do {
            ucp_worker_progress(hub);
            if (nproc == 0)
                for (i = 0; i < n; i++)
                    ucp_worker_progress(local.w[i]);
            left = 0;
            for (i = 0; i < n; i++)
                left += !done(&creq[i], "hub endpoint close");
            if (now_s() > deadline) {
                fprintf(stderr, "scale: timeout closing hub endpoints (%d left)\n", left);
                return 1;
            }
        } while (left);
        free(creq);
    }
    t_close = now_s() - t0;
    if (nproc == 0) {
        for (i = 0; i < n; i++)
            ucp_worker_destroy(local.w[i]);
    } else {
        for (c = 0; c < nproc; c++) {
            int status;
            if (waitpid(pid[c], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
                fprintf(stderr, "scale: peer process %d failed (status %d)\n", (int)pid[c], status);
                return 1;
            }
        }
    }
    s3 = sample_now();
    for (c = 0; c < nproc; c++)
        close(sock[c]);
    ucp_worker_release_address(hub, hub_addr);
    ucp_worker_destroy(hub);
    ucp_cleanup(ctx);

    printf("RESULT lib=\"%s\" n=%d procs=%d"
           " rss_base_kb=%ld rss_workers_kb=%ld rss_eps_kb=%ld rss_end_kb=%ld"
           " anon_workers_kb=%ld anon_eps_kb=%ld shm_workers_kb=%ld shm_eps_kb=%ld"
           " fd_base=%d fd_workers=%d fd_eps=%d fd_end=%d"
           " map_base=%d map_workers=%d map_eps=%d map_end=%d"
           " devshm_base=%d devshm_eps=%d ipcs_base=%d ipcs_eps=%d"
           " t_workers_ms=%.1f t_create_ms=%.1f t_exchange_ms=%.1f t_close_ms=%.1f"
           " peer_rss_kb=%ld peer_fd=%d\n",
           ucp_get_version_string(), n, nproc, s0.rss_kb, s1.rss_kb, s2.rss_kb, s3.rss_kb,
           s1.anon_kb, s2.anon_kb, s1.shm_kb, s2.shm_kb,
           s0.fds, s1.fds, s2.fds, s3.fds, s0.maps, s1.maps, s2.maps, s3.maps, s0.devshm,
           s2.devshm, s0.ipcs, s2.ipcs, t_workers * 1e3, t_create * 1e3, t_exchange * 1e3,
           t_close * 1e3, peer_rss, peer_fd);
    for (i = 0; i < n; i++)
        free(peer_addr[i]);
    return 0;
}
