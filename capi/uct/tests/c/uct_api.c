/*
 * Drives rucx's libuct.so.0 through UCX 1.13's own header (uct/api/uct.h), so every
 * header-inline call (uct_ep_am_short, uct_worker_progress, uct_iface_release_desc ...) goes
 * through the operations table and progress queue the library lays out.
 *
 * For each transport given on the command line (tl/dev, e.g. posix/memory), in one process:
 * two interfaces on one worker, an endpoint from the first to the second, then active
 * messages (short, with a kept descriptor or over posix and sysv in place; bcopy, kept after
 * an in-place short; zcopy with a completion), put/get (short,
 * bcopy, zcopy) and atomics on memory the second interface allocated, flushes, pending, and
 * bad input that must give an error status. Prints "uct_api: <tl>/<dev> passed" per transport.
 */
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define CHECK_OK(_status, _what) \
    CHECK((_status) == UCS_OK, "%s: %s", _what, ucs_status_string(_status))

typedef struct {
    uct_component_h cmpt;
    uct_md_h        md;
    uct_md_attr_t   md_attr;
    uct_worker_h    worker;
    uct_iface_h     a, b;
    uct_iface_attr_t attr;
    uct_ep_h        ep;      /* a -> b */
    uct_ep_h        back;    /* b -> a, for transports that connect endpoint to endpoint */
    int             short_in_place; /* short messages come without a descriptor (posix, sysv) */
} setup_t;

/* What the active-message handler saw. */
static struct {
    int      count;
    size_t   length;
    unsigned flags;
    char     data[512];
    void    *kept_desc;   /* a descriptor the handler kept (UCS_INPROGRESS) */
    int      keep_next;
} rx;

static ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    (void)arg;
    rx.count++;
    rx.length = length;
    rx.flags  = flags;
    memcpy(rx.data, data, (length < sizeof(rx.data)) ? length : sizeof(rx.data));
    if (rx.keep_next && (flags & UCT_CB_PARAM_FLAG_DESC)) {
        rx.keep_next = 0;
        rx.kept_desc = (char*)data - 16; /* rx_headroom is 16 */
        memset(rx.kept_desc, 0x5a, 16);  /* the headroom is the client's */
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static void wait_rx(setup_t *s, int count)
{
    long i;
    for (i = 0; (rx.count < count) && (i < 100000000L); ++i) {
        uct_worker_progress(s->worker);
    }
    CHECK(rx.count >= count, "timed out waiting for active message %d", count);
}

typedef struct {
    uct_completion_t super;
    int              called;
} comp_t;

static void comp_cb(uct_completion_t *self)
{
    ((comp_t*)self)->called++;
}

static void wait_comp(setup_t *s, ucs_status_t st, comp_t *c)
{
    long i;
    if (st == UCS_OK) {
        return;
    }
    CHECK(st == UCS_INPROGRESS, "operation: %s", ucs_status_string(st));
    for (i = 0; (c->called == 0) && (i < 100000000L); ++i) {
        uct_worker_progress(s->worker);
    }
    CHECK(c->called == 1 && c->super.status == UCS_OK, "completion called %d, status %d",
          c->called, c->super.status);
}

static void flush_all(setup_t *s)
{
    ucs_status_t st;
    long i;
    for (i = 0; i < 100000000L; ++i) {
        st = uct_iface_flush(s->a, 0, NULL);
        uct_worker_progress(s->worker);
        if (st != UCS_INPROGRESS) {
            break;
        }
    }
    CHECK_OK(st, "uct_iface_flush");
}

static size_t pack_text(void *dest, void *arg)
{
    strcpy(dest, arg);
    return strlen(arg) + 1;
}

static void unpack_into(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

static int find_md(const char *tl, const char *dev, setup_t *s)
{
    uct_component_h *cmpts;
    unsigned ncmpt, c, m, r, nres;
    uct_tl_resource_desc_t *res;
    uct_component_attr_t cattr;
    uct_md_config_t *mdc;

    CHECK_OK(uct_query_components(&cmpts, &ncmpt), "uct_query_components");
    for (c = 0; c < ncmpt; ++c) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT |
                           UCT_COMPONENT_ATTR_FIELD_NAME;
        CHECK_OK(uct_component_query(cmpts[c], &cattr), "uct_component_query");
        cattr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        cattr.md_resources = alloca(sizeof(*cattr.md_resources) *
                                    (cattr.md_resource_count + 1));
        CHECK_OK(uct_component_query(cmpts[c], &cattr), "uct_component_query");
        for (m = 0; m < cattr.md_resource_count; ++m) {
            CHECK_OK(uct_md_config_read(cmpts[c], NULL, NULL, &mdc), "uct_md_config_read");
            CHECK(uct_config_modify(mdc, "NO_SUCH_FIELD", "1") == UCS_ERR_NO_ELEM,
                  "modifying an unknown field");
            CHECK_OK(uct_md_open(cmpts[c], cattr.md_resources[m].md_name, mdc, &s->md),
                     "uct_md_open");
            uct_config_release(mdc);
            CHECK_OK(uct_md_query_tl_resources(s->md, &res, &nres), "query_tl_resources");
            for (r = 0; r < nres; ++r) {
                if (!strcmp(res[r].tl_name, tl) && !strcmp(res[r].dev_name, dev)) {
                    s->cmpt = cmpts[c];
                    uct_release_tl_resource_list(res);
                    uct_release_component_list(cmpts);
                    return 1;
                }
            }
            uct_release_tl_resource_list(res);
            uct_md_close(s->md);
        }
    }
    uct_release_component_list(cmpts);
    return 0;
}

static uct_iface_h open_iface(setup_t *s, const char *tl, const char *dev)
{
    uct_iface_config_t *cfg;
    uct_iface_params_t p;
    uct_iface_h iface = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                   UCT_IFACE_PARAM_FIELD_RX_HEADROOM | UCT_IFACE_PARAM_FIELD_CPU_MASK;
    p.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name  = tl;
    p.mode.device.dev_name = dev;
    p.rx_headroom          = 16;
    CHECK_OK(uct_md_iface_config_read(s->md, tl, NULL, NULL, &cfg), "iface_config_read");
    CHECK_OK(uct_iface_open(s->md, s->worker, &p, cfg, &iface), "uct_iface_open");
    uct_config_release(cfg);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return iface;
}

static void connect_eps(setup_t *s)
{
    uct_ep_params_t ep;
    void *dev = calloc(1, s->attr.device_addr_len + 1);
    void *ifa = calloc(1, s->attr.iface_addr_len + 1);
    void *ea  = calloc(1, s->attr.ep_addr_len + 1);
    void *eb  = calloc(1, s->attr.ep_addr_len + 1);

    CHECK_OK(uct_iface_get_device_address(s->b, dev), "get_device_address");
    CHECK_OK(uct_iface_get_address(s->b, ifa), "get_address");
    CHECK(uct_iface_is_reachable(s->a, dev, s->attr.iface_addr_len ? ifa : NULL),
          "b is reachable from a");
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    if (s->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE) {
        ep.field_mask |= UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
        ep.iface      = s->a;
        ep.dev_addr   = dev;
        ep.iface_addr = ifa;
        CHECK_OK(uct_ep_create(&ep, &s->ep), "uct_ep_create (to iface)");
    } else {
        ep.iface = s->a;
        CHECK_OK(uct_ep_create(&ep, &s->ep), "uct_ep_create a");
        ep.iface = s->b;
        CHECK_OK(uct_ep_create(&ep, &s->back), "uct_ep_create b");
        CHECK_OK(uct_ep_get_address(s->ep, ea), "get ep address a");
        CHECK_OK(uct_ep_get_address(s->back, eb), "get ep address b");
        CHECK_OK(uct_iface_get_device_address(s->a, dev), "get_device_address a");
        CHECK_OK(uct_ep_connect_to_ep(s->back, dev, ea), "connect b to a");
        CHECK_OK(uct_iface_get_device_address(s->b, dev), "get_device_address b");
        CHECK_OK(uct_ep_connect_to_ep(s->ep, dev, eb), "connect a to b");
    }
    free(dev);
    free(ifa);
    free(ea);
    free(eb);
}

static void test_am(setup_t *s)
{
    const char *text = "hello from rucx's libuct";
    uint64_t hdr     = 0x1122334455667788ull;
    char big[400];
    uct_iov_t iov;
    uct_mem_h memh;
    comp_t comp = {{comp_cb, 1, UCS_OK}, 0};
    ssize_t len;
    ucs_status_t st;
    int n = rx.count;

    CHECK_OK(uct_iface_set_am_handler(s->b, 7, am_handler, NULL, 0), "set_am_handler");

    /* short: the receiver sees the header then the payload, in a descriptor it keeps; over
     * shared memory in place, without the DESC flag (as UCX's mm transport gives it), so the
     * handler cannot keep it and keeps the bcopy message below instead */
    rx.keep_next = 1;
    do {
        st = uct_ep_am_short(s->ep, 7, hdr, text, strlen(text) + 1);
        uct_worker_progress(s->worker);
    } while (st == UCS_ERR_NO_RESOURCE);
    CHECK_OK(st, "am_short");
    wait_rx(s, ++n);
    CHECK(rx.length == 8 + strlen(text) + 1, "short length %zu", rx.length);
    CHECK(!memcmp(rx.data, &hdr, 8) && !strcmp(rx.data + 8, text), "short data");
    if (s->short_in_place) {
        CHECK(!(rx.flags & UCT_CB_PARAM_FLAG_DESC), "a shared-memory short message is in place");
        CHECK(rx.kept_desc == NULL && rx.keep_next, "nothing kept");
    } else {
        CHECK(rx.flags & UCT_CB_PARAM_FLAG_DESC, "a short message comes in a descriptor");
        CHECK(rx.kept_desc != NULL, "descriptor kept");
        if (rx.kept_desc != NULL) {
            CHECK(!strcmp((char*)rx.kept_desc + 16 + 8, text), "kept descriptor holds the data");
            uct_iface_release_desc(rx.kept_desc);
            rx.kept_desc = NULL;
        }
    }

    /* bcopy (kept after an in-place short) */
    do {
        len = uct_ep_am_bcopy(s->ep, 7, pack_text, (void*)text, 0);
        uct_worker_progress(s->worker);
    } while (len == UCS_ERR_NO_RESOURCE);
    CHECK(len == (ssize_t)strlen(text) + 1, "am_bcopy gives its length: %zd", len);
    wait_rx(s, ++n);
    CHECK(!strcmp(rx.data, text), "bcopy data");
    if (s->short_in_place) {
        CHECK(rx.flags & UCT_CB_PARAM_FLAG_DESC, "a bcopy message comes in a descriptor");
        CHECK(rx.kept_desc != NULL, "bcopy descriptor kept");
        if (rx.kept_desc != NULL) {
            CHECK(!strcmp((char*)rx.kept_desc + 16, text), "kept descriptor holds the data");
            uct_iface_release_desc(rx.kept_desc);
            rx.kept_desc = NULL;
        }
    }

    /* zcopy of a registered buffer longer than what is copied into descriptors: given in
     * place, without the DESC flag */
    if (s->attr.cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) {
        memset(big, 'z', sizeof(big));
        CHECK_OK(uct_md_mem_reg(s->md, big, sizeof(big), UCT_MD_MEM_ACCESS_RMA, &memh),
                 "mem_reg");
        iov.buffer = big;
        iov.length = sizeof(big) - 8;
        iov.memh   = memh;
        iov.stride = 0;
        iov.count  = 1;
        do {
            st = uct_ep_am_zcopy(s->ep, 7, big, 8, &iov, 1, 0, &comp.super);
            uct_worker_progress(s->worker);
        } while (st == UCS_ERR_NO_RESOURCE);
        wait_comp(s, st, &comp);
        wait_rx(s, ++n);
        CHECK(rx.length == sizeof(big), "zcopy length %zu", rx.length);
        CHECK(!(rx.flags & UCT_CB_PARAM_FLAG_DESC), "a long message is given in place");
        CHECK(rx.data[0] == 'z' && rx.data[sizeof(big) - 1] == 'z', "zcopy data");
        CHECK_OK(uct_md_mem_dereg(s->md, memh), "mem_dereg");
    }

    /* bad input: an error status, never a crash */
    CHECK(uct_iface_set_am_handler(s->b, UCT_AM_ID_MAX, am_handler, NULL, 0) ==
          UCS_ERR_INVALID_PARAM, "AM id out of range");
    CHECK(uct_ep_am_short(s->ep, 7, hdr, big, s->attr.cap.am.max_short + 1) < 0,
          "am_short over max_short fails");
}

static void test_rma(setup_t *s)
{
    uct_allocated_memory_t mem;
    uct_rkey_bundle_t rkey, bad;
    void *rkey_buf;
    char src[256], dst[256];
    uint64_t *word, old = 0;
    uct_iov_t iov;
    uct_mem_h memh;
    comp_t comp = {{comp_cb, 1, UCS_OK}, 0};
    ucs_status_t st;
    uint64_t base;
    uint64_t fl = s->attr.cap.flags;

    CHECK_OK(uct_iface_mem_alloc(s->b, 4096, 0, "test", &mem), "iface_mem_alloc");
    rkey_buf = calloc(1, s->md_attr.rkey_packed_size);
    CHECK_OK(uct_md_mkey_pack(s->md, mem.memh, rkey_buf), "mkey_pack");
    CHECK_OK(uct_rkey_unpack(s->cmpt, rkey_buf, &rkey), "rkey_unpack");
    base = (uintptr_t)mem.address;
    memset(mem.address, 0, 4096);

    if (fl & UCT_IFACE_FLAG_PUT_SHORT) {
        CHECK_OK(uct_ep_put_short(s->ep, "short!", 7, base, rkey.rkey), "put_short");
    }
    if (fl & UCT_IFACE_FLAG_PUT_BCOPY) {
        CHECK(uct_ep_put_bcopy(s->ep, pack_text, "bcopy!", base + 64, rkey.rkey) == 7,
              "put_bcopy");
    }
    if (fl & UCT_IFACE_FLAG_PUT_ZCOPY) {
        memset(src, 'p', sizeof(src));
        CHECK_OK(uct_md_mem_reg(s->md, src, sizeof(src), UCT_MD_MEM_ACCESS_RMA, &memh), "reg");
        iov = (uct_iov_t){src, sizeof(src), memh, 0, 1};
        st  = uct_ep_put_zcopy(s->ep, &iov, 1, base + 1024, rkey.rkey, &comp.super);
        wait_comp(s, st, &comp);
        CHECK_OK(uct_md_mem_dereg(s->md, memh), "dereg");
    }
    flush_all(s);
    if (fl & UCT_IFACE_FLAG_PUT_SHORT) {
        CHECK(!strcmp(mem.address, "short!"), "put_short landed");
    }
    if (fl & UCT_IFACE_FLAG_PUT_BCOPY) {
        CHECK(!strcmp((char*)mem.address + 64, "bcopy!"), "put_bcopy landed");
    }
    if (fl & UCT_IFACE_FLAG_PUT_ZCOPY) {
        CHECK(((char*)mem.address)[1024] == 'p' && ((char*)mem.address)[1279] == 'p',
              "put_zcopy landed");
    }

    strcpy((char*)mem.address + 2048, "read me back");
    if (fl & UCT_IFACE_FLAG_GET_BCOPY) {
        memset(dst, 0, sizeof(dst));
        comp.called = 0;
        comp.super.count = 1;
        st = uct_ep_get_bcopy(s->ep, unpack_into, dst, 13, base + 2048, rkey.rkey,
                              &comp.super);
        wait_comp(s, st, &comp);
        CHECK(!strcmp(dst, "read me back"), "get_bcopy data: '%s'", dst);
    }
    if (fl & UCT_IFACE_FLAG_GET_ZCOPY) {
        memset(dst, 0, sizeof(dst));
        CHECK_OK(uct_md_mem_reg(s->md, dst, sizeof(dst), UCT_MD_MEM_ACCESS_RMA, &memh), "reg");
        iov = (uct_iov_t){dst, 13, memh, 0, 1};
        comp.called = 0;
        comp.super.count = 1;
        st = uct_ep_get_zcopy(s->ep, &iov, 1, base + 2048, rkey.rkey, &comp.super);
        wait_comp(s, st, &comp);
        CHECK(!strcmp(dst, "read me back"), "get_zcopy data: '%s'", dst);
        CHECK_OK(uct_md_mem_dereg(s->md, memh), "dereg");
    }

    word = (uint64_t*)((char*)mem.address + 3072);
    *word = 40;
    if (s->attr.cap.atomic64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) {
        st = uct_ep_atomic64_post(s->ep, UCT_ATOMIC_OP_ADD, 2, base + 3072, rkey.rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "atomic64_post: %d", st);
        flush_all(s);
        CHECK(*word == 42, "atomic add: %llu", (unsigned long long)*word);
    }
    if (s->attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) {
        comp.called = 0;
        comp.super.count = 1;
        st = uct_ep_atomic64_fetch(s->ep, UCT_ATOMIC_OP_ADD, 8, &old, base + 3072, rkey.rkey,
                                   &comp.super);
        wait_comp(s, st, &comp);
        CHECK(old == 42 && *word == 50, "fetch-add: old %llu now %llu",
              (unsigned long long)old, (unsigned long long)*word);
        *word = 42;
    }
    if (s->attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP)) {
        comp.called = 0;
        comp.super.count = 1;
        st = uct_ep_atomic_cswap64(s->ep, *word, 7, base + 3072, rkey.rkey, &old, &comp.super);
        wait_comp(s, st, &comp);
        CHECK(old == 42 && *word == 7, "cswap: old %llu now %llu", (unsigned long long)old,
              (unsigned long long)*word);
    }

    /* bad input */
    CHECK(uct_ep_put_short(s->ep, "x", 1, base, UCT_INVALID_RKEY) < 0 ||
          !(fl & UCT_IFACE_FLAG_PUT_SHORT), "put with an invalid key fails");
    ((uint32_t*)rkey_buf)[0] = 1u << 30; /* a length no key has */
    CHECK(uct_rkey_unpack(s->cmpt, rkey_buf, &bad) == UCS_ERR_INVALID_PARAM,
          "a corrupt key is refused");

    CHECK_OK(uct_rkey_release(s->cmpt, &rkey), "rkey_release");
    free(rkey_buf);
    uct_iface_mem_free(&mem);
}

/* A pending request: sends one more message when resources return. */
static struct {
    uct_pending_req_t super;
    uct_ep_h          ep;
    int               called;
} pend;

static ucs_status_t pending_send(uct_pending_req_t *self)
{
    (void)self;
    pend.called++;
    return uct_ep_am_short(pend.ep, 7, 0, "p", 1);
}

static int purged;

static void purge_cb(uct_pending_req_t *self, void *arg)
{
    CHECK(self == &pend.super, "the purged request is ours");
    ++*(int*)arg;
}

static void test_pending_and_flush(setup_t *s)
{
    uct_pending_req_t req;
    comp_t comp = {{comp_cb, 1, UCS_OK}, 0};
    ucs_status_t st;
    int sent = 0, base = rx.count;
    long i;

    if (s->attr.cap.flags & UCT_IFACE_FLAG_PENDING) {
        req.func = NULL;
        CHECK(uct_ep_pending_add(s->ep, &req, 0) == UCS_ERR_INVALID_PARAM,
              "pending request without a callback");
        pend.super.func = pending_send;
        pend.ep         = s->ep;
        pend.called     = 0;
        CHECK(uct_ep_pending_add(s->ep, &pend.super, 0) == UCS_ERR_BUSY,
              "resources are available: pending_add says send now");
        /* Fill the transport without progress until it pushes back. */
        for (i = 0; i < 1000000; ++i) {
            st = uct_ep_am_short(s->ep, 7, 0, "f", 1);
            if (st != UCS_OK) {
                break;
            }
            ++sent;
        }
        if (st == UCS_ERR_NO_RESOURCE) {
            /* Purged before it ran: the purge callback gets it, its func is never called. */
            CHECK_OK(uct_ep_pending_add(s->ep, &pend.super, 0), "pending_add when full");
            purged = 0;
            uct_ep_pending_purge(s->ep, purge_cb, &purged);
            CHECK(purged == 1 && pend.called == 0, "purged %d, called %d", purged, pend.called);
            CHECK_OK(uct_ep_pending_add(s->ep, &pend.super, 0), "pending_add again");
            for (i = 0; (pend.called == 0) && (i < 100000000L); ++i) {
                uct_worker_progress(s->worker);
            }
            CHECK(pend.called >= 1, "the pending request ran when resources returned");
            wait_rx(s, base + sent + 1);
            CHECK(rx.count == base + sent + 1, "every message arrived: %d of %d",
                  rx.count - base, sent + 1);
        } else {
            printf("uct_api: note: %d messages never filled this transport\n", sent);
            wait_rx(s, base + sent);
        }
    }
    st = uct_ep_flush(s->ep, 0, &comp.super);
    CHECK(st == UCS_OK || st == UCS_INPROGRESS, "ep_flush: %d", st);
    wait_comp(s, st, &comp);
    CHECK(uct_ep_fence(s->ep, 0) == UCS_OK, "ep_fence");
    flush_all(s);
}

/* Sleeping on the receiver's event descriptor: armed, a message makes it readable. */
static void test_wakeup(setup_t *s)
{
    struct pollfd pfd = {.events = POLLIN};
    ucs_status_t st;
    long i;
    int n = rx.count;

    if (!(s->attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_FD) ||
        !(s->attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT)) {
        return;
    }
    CHECK_OK(uct_iface_event_fd_get(s->b, &pfd.fd), "event_fd_get");
    for (i = 0; i < 1000; ++i) {
        st = uct_iface_event_arm(s->b, UCT_EVENT_RECV);
        if (st != UCS_ERR_BUSY) {
            break;
        }
        uct_worker_progress(s->worker); /* events were waiting: progress, then arm again */
    }
    CHECK_OK(st, "event_arm");
    CHECK(poll(&pfd, 1, 0) == 0, "nothing to do: the descriptor is not readable");
    CHECK_OK(uct_ep_am_short(s->ep, 7, 0, "wake", 5), "am_short");
    CHECK(poll(&pfd, 1, 10000) == 1, "the message made the descriptor readable");
    wait_rx(s, n + 1);
    CHECK(!strcmp(rx.data + 8, "wake"), "the message after the wake-up");
}

static void run(const char *tl, const char *dev)
{
    setup_t s;
    ucs_async_context_t *async;
    int before = failures;

    memset(&s, 0, sizeof(s));
    memset(&rx, 0, sizeof(rx));
    s.short_in_place = !strcmp(tl, "posix") || !strcmp(tl, "sysv");
    CHECK_OK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), "async");
    CHECK_OK(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &s.worker), "worker");
    if (!find_md(tl, dev, &s)) {
        CHECK(0, "no %s/%s", tl, dev);
        return;
    }
    CHECK_OK(uct_md_query(s.md, &s.md_attr), "md_query");
    CHECK(s.md_attr.cap.flags & UCT_MD_FLAG_NEED_MEMH, "zero-copy needs a memory handle");
    CHECK(s.md_attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_HOST), "host registration");
    s.a = open_iface(&s, tl, dev);
    s.b = open_iface(&s, tl, dev);
    CHECK_OK(uct_iface_query(s.a, &s.attr), "iface_query");
    CHECK(s.attr.cap.flags & UCT_IFACE_FLAG_CB_SYNC, "callbacks from progress");
    connect_eps(&s);
    if (s.attr.cap.flags & (UCT_IFACE_FLAG_AM_SHORT)) {
        test_am(&s);
    }
    test_rma(&s);
    test_pending_and_flush(&s);
    test_wakeup(&s);

    if (s.back != NULL) {
        uct_ep_destroy(s.back);
    }
    /* Closing an interface before its endpoint (a client bug): the endpoint is detached, and
     * its late destroy frees it without touching the closed interface. */
    uct_iface_close(s.a);
    uct_ep_destroy(s.ep);
    uct_iface_close(s.b);
    uct_md_close(s.md);
    uct_worker_destroy(s.worker);
    ucs_async_context_destroy(async);
    printf("uct_api: %s/%s %s\n", tl, dev, (failures == before) ? "passed" : "FAILED");
}

int main(int argc, char **argv)
{
    int i;
    uct_component_h bogus = (uct_component_h)&failures;
    uct_md_h md;
    uct_component_attr_t cattr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};

    setvbuf(stdout, NULL, _IONBF, 0);
    /* bad handles, names and modes */
    {
        uct_worker_h w;
        CHECK(uct_worker_create(NULL, UCS_THREAD_MODE_MULTI, &w) == UCS_ERR_UNSUPPORTED,
              "a multi-thread worker is refused");
        CHECK(uct_worker_create(NULL, (ucs_thread_mode_t)7, &w) == UCS_ERR_INVALID_PARAM,
              "an unknown thread mode is refused");
    }
    CHECK(uct_component_query(bogus, &cattr) == UCS_ERR_INVALID_PARAM, "bogus component");
    CHECK(uct_md_open(bogus, "posix", NULL, &md) == UCS_ERR_INVALID_PARAM, "bogus md open");

    for (i = 1; i < argc; ++i) {
        char tl[64], *dev;
        snprintf(tl, sizeof(tl), "%s", argv[i]);
        dev = strchr(tl, '/');
        if (dev == NULL) {
            fprintf(stderr, "usage: uct_api tl/dev ...\n");
            return 2;
        }
        *dev++ = '\0';
        run(tl, dev);
    }
    printf("uct_api: %d failures\n", failures);
    return failures ? 1 : 0;
}
