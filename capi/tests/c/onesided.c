/*
 * One-sided calls of UCX 1.13's C API on rucx's libucp.so.0, compiled against the installed UCX
 * headers and run by run.sh over shared memory and over tcp. One process, two workers of one
 * context (W[1] reaches W[0]'s memory through an endpoint) and a second context for keys that
 * belong elsewhere.
 *
 * Checks: put/get of 1 B to 1 MiB in the nb, nbi and nbx forms into UCP_MEM_MAP_ALLOCATE memory,
 * user memory and a UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED mapping, completed by endpoint and
 * worker flushes (nb, nbx, blocking) and fences; every atomic op and size (post and fetch, through
 * ucp_atomic_post / ucp_atomic_fetch_nb / ucp_atomic_op_nbx / the blocking ucp_compat.h calls);
 * remote fetch-adds racing CPU atomics of the owner on the same words; ordering by
 * ucp_worker_fence (which does not wait); ucp_rkey_ptr (a pointer into allocated memory over
 * shared memory, UCS_ERR_UNREACHABLE over tcp and for user memory).
 * Bad input, each giving its error status, exactly one log line naming the call, and no write:
 * a key used on another worker's or another context's endpoint, a key of an unmapped mapping,
 * ranges outside the mapping (of user memory and of allocated memory mapped here), unsupported
 * atomic sizes and opcodes, a misaligned atomic; a flush with nothing outstanding needs no request.
 * The workers are UCS_THREAD_MODE_MULTI (locking), or UCS_THREAD_MODE_SINGLE when
 * ONESIDED_THREAD_MODE=single (run.sh runs both: MPI libraries create single-thread workers, whose
 * puts and gets on memory mapped here take a path of their own).
 * Prints "onesided: all checks passed" when every check passed.
 */
#include <ucp/api/ucp.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

static ucp_worker_h W[2];
static int over_tcp;

static void progress(void)
{
    ucp_worker_progress(W[0]);
    ucp_worker_progress(W[1]);
}

static ucs_status_t wait_req(void *r)
{
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    ucs_status_t st;
    long spins = 0;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
        progress();
        REQUIRE(++spins < 100000000L, "request never completed");
    }
    ucp_request_free(r);
    return st;
}

/* A thread that progresses W[0] (the target) while the main thread blocks in a call on W[1]. */
static volatile int stop_helper;
static void *helper(void *arg)
{
    (void)arg;
    while (!stop_helper) ucp_worker_progress(W[0]);
    return NULL;
}

/* W[0] is progressed by a helper thread whatever UCX_TLS says: as in UCX, self connects a worker
 * only to itself, so W[1] reaches W[0] over shared memory or tcp, and each worker is driven by one
 * thread at a time. */
static pthread_t helper_th;
static void helper_start(void)
{
    stop_helper = 0;
    REQUIRE(pthread_create(&helper_th, NULL, helper, NULL) == 0, "pthread_create");
}
static void helper_stop(void)
{
    stop_helper = 1;
    pthread_join(helper_th, NULL);
}

/* ---- capturing the library's log lines (stderr) around one bad call ---------------------- */
static int saved_err = -1;
static char cap_path[] = "/tmp/rucx-onesided-log.XXXXXX";
static int cap_fd = -1;

static void capture_start(void)
{
    fflush(stderr);
    saved_err = dup(2);
    cap_fd = mkstemp(cap_path);
    REQUIRE(cap_fd >= 0, "mkstemp");
    dup2(cap_fd, 2);
}

/* Stops capturing; gives how many lines of the capture contain `name`. */
static int capture_stop(const char *name)
{
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    char buf[8192];
    ssize_t n = pread(cap_fd, buf, sizeof(buf) - 1, 0);
    close(cap_fd);
    unlink(cap_path);
    strcpy(cap_path, "/tmp/rucx-onesided-log.XXXXXX");
    buf[n > 0 ? n : 0] = '\0';
    int lines = 0;
    for (char *l = strtok(buf, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        lines += strstr(l, name) != NULL;
    }
    return lines;
}

/* BAD_STATUS / BAD_PTR(call, function name, expected status): the call (one returning a status,
 * or a status pointer whose request is waited for) gives `expected` (any error when `expected` is
 * UCS_OK) and the library logs exactly one line naming the function meanwhile. */
#define EXPECTED(st, expected) ((expected) == UCS_OK ? (st) < 0 : (st) == (expected))
#define BAD_STATUS(expr, name, expected)                                             \
    do {                                                                             \
        capture_start();                                                             \
        ucs_status_t st_ = (expr);                                                   \
        int lines_ = capture_stop(name);                                             \
        CHECK(EXPECTED(st_, expected), "%s gave %s", name, ucs_status_string(st_));  \
        CHECK(lines_ == 1, "%s logged %d lines naming it", name, lines_);            \
    } while (0)
#define BAD_PTR(expr, name, expected)                                                \
    do {                                                                             \
        capture_start();                                                             \
        void *p_ = (expr);                                                           \
        ucs_status_t st_ = wait_req(p_);                                             \
        int lines_ = capture_stop(name);                                             \
        CHECK(EXPECTED(st_, expected), "%s gave %s", name, ucs_status_string(st_));  \
        CHECK(lines_ == 1, "%s logged %d lines naming it", name, lines_);            \
    } while (0)

/* ---- helpers ------------------------------------------------------------------------------- */
static ucp_mem_h map(ucp_context_h ctx, void *addr, size_t len, unsigned flags, void **base)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = addr;
    mp.length = len;
    mp.flags = flags;
    ucp_mem_h memh;
    ucs_status_t st = ucp_mem_map(ctx, &mp, &memh);
    REQUIRE(st == UCS_OK, "mem_map %zu flags %#x: %s", len, flags, ucs_status_string(st));
    ucp_mem_attr_t ma;
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    REQUIRE(ucp_mem_query(memh, &ma) == UCS_OK, "mem_query");
    CHECK(ma.length >= len, "mapped length %zu", ma.length);
    *base = ma.address;
    return memh;
}

static ucp_rkey_h unpack(ucp_context_h ctx, ucp_mem_h memh, ucp_ep_h ep)
{
    void *kb;
    size_t ks;
    REQUIRE(ucp_rkey_pack(ctx, memh, &kb, &ks) == UCS_OK, "rkey_pack");
    ucp_rkey_h rkey;
    ucs_status_t st = ucp_ep_rkey_unpack(ep, kb, &rkey);
    REQUIRE(st == UCS_OK, "rkey_unpack: %s", ucs_status_string(st));
    ucp_rkey_buffer_release(kb);
    return rkey;
}

static unsigned char pat(size_t i, int round)
{
    return (unsigned char)(i * 29 + (size_t)round * 13 + (i >> 11));
}

/* Puts and gets of several sizes into `base` (mapped by W[0]) through `ep` with `rkey`, in
 * every form; the memory is checked directly. */
static void put_get(ucp_ep_h ep, ucp_rkey_h rkey, unsigned char *base, size_t len,
                    const char *what)
{
    static const size_t sizes[] = {1, 8, 100, 4096, 70000, 1 << 20};
    unsigned char *src = malloc(1 << 20), *dst = malloc(1 << 20);
    uint64_t raddr = (uint64_t)(uintptr_t)base;
    int round = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        if (n + 3 > len) continue;
        for (int form = 0; form < 3; form++, round++) {
            for (size_t i = 0; i < n; i++) src[i] = pat(i, round);
            memset(base, 0, n + 6);
            ucs_status_t st;
            ucp_request_param_t xp;
            memset(&xp, 0, sizeof(xp));
            if (form == 0) {
                st = ucp_put_nbi(ep, src, n, raddr + 3, rkey);
                CHECK(st == UCS_OK || st == UCS_INPROGRESS, "put_nbi %s", ucs_status_string(st));
                CHECK(wait_req(ucp_ep_flush_nb(ep, 0, NULL)) == UCS_OK, "ep_flush_nb");
            } else if (form == 1) {
                CHECK(wait_req(ucp_put_nbx(ep, src, n, raddr + 3, rkey, &xp)) == UCS_OK, "put_nbx");
                CHECK(wait_req(ucp_ep_flush_nbx(ep, &xp)) == UCS_OK, "ep_flush_nbx");
            } else {
                CHECK(wait_req(ucp_put_nb(ep, src, n, raddr + 3, rkey, NULL)) == UCS_OK, "put_nb");
                CHECK(wait_req(ucp_worker_flush_nbx(W[1], &xp)) == UCS_OK, "worker_flush_nbx");
            }
            int ok = memcmp(base + 3, src, n) == 0 && base[0] == 0 && base[2] == 0 &&
                     base[n + 3] == 0;
            CHECK(ok, "%s: put of %zu B (form %d) landed exactly", what, n, form);
            memset(dst, 0, n);
            if (form == 0) {
                st = ucp_get_nbi(ep, dst, n, raddr + 3, rkey);
                CHECK(st == UCS_OK || st == UCS_INPROGRESS, "get_nbi");
                CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "worker_flush_nb");
            } else if (form == 1) {
                CHECK(wait_req(ucp_get_nbx(ep, dst, n, raddr + 3, rkey, &xp)) == UCS_OK, "get_nbx");
            } else {
                helper_start();
                CHECK(ucp_get(ep, dst, n, raddr + 3, rkey) == UCS_OK, "blocking get");
                CHECK(ucp_worker_flush(W[1]) == UCS_OK, "blocking worker_flush");
                helper_stop();
            }
            CHECK(memcmp(dst, src, n) == 0, "%s: get of %zu B (form %d)", what, n, form);
        }
    }
    /* Ordering: a put, a fence, a put over it: the second wins. */
    src[0] = 1;
    src[1] = 2;
    CHECK(ucp_put_nbi(ep, &src[0], 1, raddr, rkey) >= 0, "put_nbi");
    helper_start(); /* the fence waits on W[1]; W[0] answers from the helper */
    CHECK(ucp_worker_fence(W[1]) == UCS_OK, "fence");
    helper_stop();
    CHECK(ucp_put_nbi(ep, &src[1], 1, raddr, rkey) >= 0, "put_nbi");
    CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
    CHECK(base[0] == 2, "%s: the put after the fence is the one that stays", what);
    free(src);
    free(dst);
}

/* Every atomic op and size on words of `base`. */
static void atomics(ucp_ep_h ep, ucp_rkey_h rkey, unsigned char *base, const char *what)
{
    uint64_t raddr = (uint64_t)(uintptr_t)base;
    volatile uint64_t *w64 = (uint64_t *)(base + 64);
    volatile uint32_t *w32 = (uint32_t *)(base + 128);
    static const ucp_atomic_post_op_t post_ops[] = {UCP_ATOMIC_POST_OP_ADD, UCP_ATOMIC_POST_OP_AND,
                                                    UCP_ATOMIC_POST_OP_OR, UCP_ATOMIC_POST_OP_XOR};
    for (int size = 4; size <= 8; size += 4) {
        uint64_t off = size == 8 ? 64 : 128;
        uint64_t mask = size == 8 ? ~0ull : 0xffffffffull;
#define CUR() (size == 8 ? (uint64_t)*w64 : (uint64_t)*w32)
#define SET(v) do { if (size == 8) *w64 = (v); else *w32 = (uint32_t)(v); } while (0)
        for (int k = 0; k < 4; k++) {
            uint64_t init = 0xf0f0f0f0a5a5a5a5ull & mask, v = 0x0ff00ff012345678ull & mask;
            uint64_t want = k == 0 ? (init + v) & mask : k == 1 ? init & v : k == 2 ? init | v : init ^ v;
            /* ucp_atomic_post */
            SET(init);
            ucs_status_t st = ucp_atomic_post(ep, post_ops[k], v, size, raddr + off, rkey);
            CHECK(st == UCS_OK || st == UCS_INPROGRESS, "atomic_post");
            CHECK(wait_req(ucp_ep_flush_nb(ep, 0, NULL)) == UCS_OK, "flush");
            CHECK(CUR() == want, "%s: post op %d size %d: %#llx, want %#llx", what, k, size,
                  (unsigned long long)CUR(), (unsigned long long)want);
            /* ucp_atomic_op_nbx without a reply: post; with one: fetch. */
            static const ucp_atomic_op_t nbx_ops[] = {UCP_ATOMIC_OP_ADD, UCP_ATOMIC_OP_AND,
                                                      UCP_ATOMIC_OP_OR, UCP_ATOMIC_OP_XOR};
            ucp_request_param_t ap;
            memset(&ap, 0, sizeof(ap));
            ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
            ap.datatype = ucp_dt_make_contig(size);
            uint64_t operand = v, reply = 0;
            SET(init);
            CHECK(wait_req(ucp_atomic_op_nbx(ep, nbx_ops[k], &operand, 1, raddr + off, rkey, &ap)) == UCS_OK, "op_nbx post");
            CHECK(wait_req(ucp_ep_flush_nb(ep, 0, NULL)) == UCS_OK, "flush");
            CHECK(CUR() == want, "%s: op_nbx post %d size %d", what, k, size);
            SET(init);
            ap.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            ap.reply_buffer = &reply;
            CHECK(wait_req(ucp_atomic_op_nbx(ep, nbx_ops[k], &operand, 1, raddr + off, rkey, &ap)) == UCS_OK, "op_nbx fetch");
            uint64_t got = size == 8 ? reply : (uint32_t)reply;
            CHECK(got == init && CUR() == want, "%s: op_nbx fetch %d size %d: old %#llx", what, k, size,
                  (unsigned long long)got);
            /* ucp_atomic_fetch_nb (FADD=0, AND=3, OR=4, XOR=5). */
            static const ucp_atomic_fetch_op_t fops[] = {UCP_ATOMIC_FETCH_OP_FADD, UCP_ATOMIC_FETCH_OP_FAND,
                                                         UCP_ATOMIC_FETCH_OP_FOR, UCP_ATOMIC_FETCH_OP_FXOR};
            SET(init);
            reply = 0;
            CHECK(wait_req(ucp_atomic_fetch_nb(ep, fops[k], v, &reply, size, raddr + off, rkey, NULL)) == UCS_OK, "fetch_nb");
            got = size == 8 ? reply : (uint32_t)reply;
            CHECK(got == init && CUR() == want, "%s: fetch_nb %d size %d", what, k, size);
        }
        /* Swap and compare-swap, in both APIs. */
        uint64_t reply = 0x77 & mask, operand = 0x1234;
        SET(5);
        CHECK(wait_req(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_SWAP, 9, &reply, size, raddr + off, rkey, NULL)) == UCS_OK, "swap");
        CHECK((size == 8 ? reply : (uint32_t)reply) == 5 && CUR() == 9, "%s: swap size %d", what, size);
        reply = 42;
        CHECK(wait_req(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_CSWAP, 9, &reply, size, raddr + off, rkey, NULL)) == UCS_OK, "cswap");
        CHECK((size == 8 ? reply : (uint32_t)reply) == 9 && CUR() == 42, "%s: cswap hit size %d", what, size);
        reply = 43;
        CHECK(wait_req(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_CSWAP, 9, &reply, size, raddr + off, rkey, NULL)) == UCS_OK, "cswap");
        CHECK((size == 8 ? reply : (uint32_t)reply) == 42 && CUR() == 42, "%s: cswap miss size %d", what, size);
        ucp_request_param_t ap;
        memset(&ap, 0, sizeof(ap));
        ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        ap.datatype = ucp_dt_make_contig(size);
        ap.reply_buffer = &reply;
        reply = 0;
        CHECK(wait_req(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_SWAP, &operand, 1, raddr + off, rkey, &ap)) == UCS_OK, "nbx swap");
        CHECK((size == 8 ? reply : (uint32_t)reply) == 42 && CUR() == 0x1234, "%s: nbx swap size %d", what, size);
        operand = 0x1234;
        reply = 7;
        CHECK(wait_req(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_CSWAP, &operand, 1, raddr + off, rkey, &ap)) == UCS_OK, "nbx cswap");
        CHECK((size == 8 ? reply : (uint32_t)reply) == 0x1234 && CUR() == 7, "%s: nbx cswap size %d", what, size);
#undef CUR
#undef SET
    }
    /* The blocking calls of ucp_compat.h (W[0] progressed by a helper thread). */
    helper_start();
    *w64 = 10;
    *w32 = 10;
    uint64_t r64 = 0;
    uint32_t r32 = 0;
    CHECK(ucp_atomic_add64(ep, 5, raddr + 64, rkey) == UCS_OK, "add64");
    CHECK(ucp_atomic_add32(ep, 5, raddr + 128, rkey) == UCS_OK, "add32");
    CHECK(ucp_worker_flush(W[1]) == UCS_OK, "flush");
    CHECK(*w64 == 15 && *w32 == 15, "%s: blocking adds", what);
    CHECK(ucp_atomic_fadd64(ep, 1, raddr + 64, rkey, &r64) == UCS_OK && r64 == 15, "fadd64");
    CHECK(ucp_atomic_fadd32(ep, 1, raddr + 128, rkey, &r32) == UCS_OK && r32 == 15, "fadd32");
    CHECK(ucp_atomic_swap64(ep, 100, raddr + 64, rkey, &r64) == UCS_OK && r64 == 16, "swap64");
    CHECK(ucp_atomic_swap32(ep, 100, raddr + 128, rkey, &r32) == UCS_OK && r32 == 16, "swap32");
    CHECK(ucp_atomic_cswap64(ep, 100, 200, raddr + 64, rkey, &r64) == UCS_OK && r64 == 100, "cswap64");
    CHECK(ucp_atomic_cswap32(ep, 100, 200, raddr + 128, rkey, &r32) == UCS_OK && r32 == 100, "cswap32");
    helper_stop();
    CHECK(*w64 == 200 && *w32 == 200, "%s: blocking cswaps", what);
}

/* Remote fetch-adds (through whatever path this transport gives) race the owner's own CPU
 * atomics on the same 32- and 64-bit words: no update is lost. */
static volatile int race_go;
static uint64_t *race64;
static uint32_t *race32;
enum { RACE_N = 20000 };
static void *racer(void *arg)
{
    (void)arg;
    while (!race_go) {}
    for (int i = 0; i < RACE_N; i++) {
        __atomic_fetch_add(race64, 1, __ATOMIC_SEQ_CST);
        __atomic_fetch_add(race32, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void race(ucp_ep_h ep, ucp_rkey_h rkey, unsigned char *base, const char *what)
{
    race64 = (uint64_t *)(base + 256);
    race32 = (uint32_t *)(base + 320);
    *race64 = 0;
    *race32 = 0;
    race_go = 0;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, racer, NULL) == 0, "pthread_create");
    race_go = 1;
    uint64_t raddr = (uint64_t)(uintptr_t)base;
    for (int i = 0; i < RACE_N; i++) {
        uint64_t old;
        void *r = ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_FADD, 1, &old, 8, raddr + 256, rkey, NULL);
        CHECK(wait_req(r) == UCS_OK, "fadd");
        ucs_status_t st = ucp_atomic_post(ep, UCP_ATOMIC_POST_OP_ADD, 1, 4, raddr + 320, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "post");
    }
    CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
    pthread_join(th, NULL);
    CHECK(*race64 == 2 * RACE_N && *race32 == 2 * RACE_N,
          "%s: remote and local atomics lost updates: %llu %u (want %d)", what,
          (unsigned long long)*race64, *race32, 2 * RACE_N);
}

/* Ordering by ucp_worker_fence, which does not wait: an atomic, a fence, a put over the same word:
 * the put lands last. Over user memory the atomic is applied by W[0]'s worker when it progresses
 * while the put is a direct copy, so without the fence the put could land first. W[0] is not
 * progressed before the fence returns (a fence that waited would hang here). Then a put, a
 * fence and a fetch-add: the fetch sees the put. */
static void fence_order(ucp_ep_h ep, ucp_rkey_h rkey, unsigned char *base, const char *what)
{
    uint64_t raddr = (uint64_t)(uintptr_t)base + 512;
    volatile uint64_t *word = (uint64_t *)(base + 512);
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        *word = 0;
        uint64_t v = 100 + (uint64_t)i;
        ucs_status_t st = ucp_atomic_post(ep, UCP_ATOMIC_POST_OP_ADD, 1, 8, raddr, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "post");
        CHECK(ucp_worker_fence(W[1]) == UCS_OK, "fence");
        st = ucp_put_nbi(ep, &v, 8, raddr, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "put_nbi");
        CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
        bad += *word != v;
    }
    CHECK(bad == 0, "%s: %d of 200 puts after a fence landed before the atomic ahead of them",
          what, bad);
    bad = 0;
    for (int i = 0; i < 200; i++) {
        *word = 0;
        uint64_t v = 7 + (uint64_t)i, old = 0;
        ucs_status_t st = ucp_put_nbi(ep, &v, 8, raddr, rkey);
        CHECK(st == UCS_OK || st == UCS_INPROGRESS, "put_nbi");
        CHECK(ucp_worker_fence(W[1]) == UCS_OK, "fence");
        CHECK(wait_req(ucp_atomic_fetch_nb(ep, UCP_ATOMIC_FETCH_OP_FADD, 1, &old, 8, raddr, rkey, NULL)) == UCS_OK, "fadd");
        bad += old != v || *word != v + 1;
    }
    CHECK(bad == 0, "%s: %d of 200 fetch-adds after a fence missed the put ahead of them", what,
          bad);
}

/* Bad input on allocated memory, which shared memory maps in this process (the direct path of
 * puts and atomics): ranges outside the mapping, a misaligned word and a key of an unmapped
 * mapping are refused with an error and one log line, and the memory is left as it was. */
static void bad_direct(ucp_context_h ctx, ucp_ep_h e10)
{
    enum { LEN = 4096 };
    void *base;
    ucp_mem_h memh = map(ctx, NULL, LEN, UCP_MEM_MAP_ALLOCATE, &base);
    memset(base, 0x22, LEN);
    uint64_t raddr = (uint64_t)(uintptr_t)base;
    ucp_rkey_h k = unpack(ctx, memh, e10);
    unsigned char src[16];
    memset(src, 0xee, sizeof(src));
    uint64_t res = 0, operand = 1;
    ucp_request_param_t xp;
    memset(&xp, 0, sizeof(xp));
    ucp_request_param_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    ap.datatype = ucp_dt_make_contig(8);
    ap.reply_buffer = &res;
    BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr + LEN, k), "ucp_put_nbi", UCS_OK);
    BAD_STATUS(ucp_put_nbi(e10, src, 16, raddr + LEN - 8, k), "ucp_put_nbi", UCS_OK);
    BAD_PTR(ucp_put_nbx(e10, src, 8, raddr - 8, k, &xp), "ucp_put_nbx", UCS_OK);
    BAD_STATUS(ucp_get_nbi(e10, src, 8, raddr + LEN, k), "ucp_get_nbi", UCS_OK);
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, raddr + LEN, k, &ap),
            "ucp_atomic_op_nbx", UCS_OK);
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, raddr - 8, k, &ap),
            "ucp_atomic_op_nbx", UCS_OK);
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, raddr + 4, k, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_CSWAP, &operand, 1, raddr, k, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    CHECK(wait_req(ucp_ep_flush_nb(e10, 0, NULL)) == UCS_OK, "flush");
    if (!over_tcp) {
        /* Nothing is outstanding: the flush is done at once, without a request. */
        CHECK(ucp_ep_flush_nb(e10, 0, NULL) == NULL, "a flush with nothing outstanding");
        CHECK(ucp_ep_flush_nbx(e10, &xp) == NULL, "a flush_nbx with nothing outstanding");
    }
    int untouched = 1;
    for (int i = 0; i < LEN; i++) untouched &= ((unsigned char *)base)[i] == 0x22;
    CHECK(untouched, "a refused call wrote the mapping");
    CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, raddr, k, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr, k), "ucp_put_nbi", UCS_ERR_INVALID_PARAM);
    ucp_rkey_destroy(k);
}

/* A zero-length mapping succeeds whatever its address and flags (as UCX's does); its key packs
 * and unpacks, and reaches no memory. A mapping without a length is refused. */
/* A request released before it completes: ucp_request_release keeps its callback (called
 * once: ucx_perftest counts on it), ucp_request_free turns it off (Open MPI frees requests
 * whose callbacks must not run then), as UCX's code does; the data lands either way. */
static int released_calls;
static void released_cb(void *req, ucs_status_t st, void *arg)
{
    (void)req;
    released_calls += st == UCS_OK && arg == &released_calls;
}

static void released_request(ucp_ep_h ep, ucp_rkey_h rkey, unsigned char *base, const char *what)
{
    static unsigned char src[4096];
    for (int by_free = 0; by_free < 2; by_free++) {
        for (size_t i = 0; i < sizeof(src); i++) src[i] = pat(i, 77 + by_free);
        ucp_request_param_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                          UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        rp.cb.send = released_cb;
        rp.user_data = &released_calls;
        released_calls = 0;
        void *r = ucp_put_nbx(ep, src, sizeof(src), (uint64_t)(uintptr_t)base, rkey, &rp);
        REQUIRE(UCS_PTR_IS_PTR(r), "%s: put with NO_IMM_CMPL gave no request", what);
        if (by_free) {
            ucp_request_free(r);
        } else {
            ucp_request_release(r);
        }
        REQUIRE(wait_req(ucp_ep_flush_nbx(ep, &(ucp_request_param_t){0})) == UCS_OK, "flush");
        for (long spins = 0; !by_free && released_calls == 0 && spins < 10000000L; spins++) {
            progress();
        }
        for (int i = 0; i < 100; i++) progress();
        CHECK(released_calls == !by_free, "%s: the %s put's callback ran %d times", what,
              by_free ? "freed" : "released", released_calls);
        CHECK(memcmp(base, src, sizeof(src)) == 0, "%s: the %s put's data did not land", what,
              by_free ? "freed" : "released");
    }
}

static void zero_length(ucp_context_h ctx, ucp_ep_h e10)
{
    static unsigned char user[64];
    void *addrs[] = {user, NULL, NULL};
    unsigned flags[] = {0, UCP_MEM_MAP_ALLOCATE, 0};
    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    for (int i = 0; i < 3; i++) {
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address = addrs[i];
        mp.flags = flags[i];
        ucs_status_t st = ucp_mem_map(ctx, &mp, &memh);
        CHECK(st == UCS_OK, "zero-length mem_map %d: %s", i, ucs_status_string(st));
        if (st != UCS_OK) continue;
        ucp_mem_attr_t ma;
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        CHECK(ucp_mem_query(memh, &ma) == UCS_OK && ma.address == NULL && ma.length == 0,
              "zero-length mem_query: %p %zu", ma.address, ma.length);
        ucp_rkey_h k = unpack(ctx, memh, e10);
        unsigned char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        uint64_t res = 0;
        void *rp;
        uint64_t raddr = (uint64_t)(uintptr_t)user;
        BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr, k), "ucp_put_nbi", UCS_OK);
        BAD_PTR(ucp_get_nb(e10, src, 8, raddr, k, NULL), "ucp_get_nb", UCS_OK);
        /* Without a key the atomic is emulated: the owner refuses the address. */
        st = wait_req(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 8, raddr, k,
                                          NULL));
        CHECK(st < 0, "atomic through a zero-length key: %s", ucs_status_string(st));
        st = ucp_rkey_ptr(k, raddr, &rp);
        CHECK(st == UCS_ERR_UNREACHABLE, "rkey_ptr of a zero-length key: %s",
              ucs_status_string(st));
        ucp_rkey_destroy(k);
        CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "zero-length unmap %d", i);
    }
    for (size_t i = 0; i < sizeof(user); i++) CHECK(user[i] == 0, "byte %zu written", i);
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.address = user;
    BAD_STATUS(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map", UCS_ERR_INVALID_PARAM);
}

/* UCP_MEM_MAP_PARAM_FIELD_PROT holds peers to the protection: a mapping without remote write
 * refuses puts and atomics (an error status and one log line), a mapping without remote read
 * refuses gets; what it allows works. */
static void protection(ucp_context_h ctx, ucp_ep_h e10)
{
    static const unsigned prots[] = {
        UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ,
        UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_WRITE,
    };
    for (int i = 0; i < 2; i++) {
        ucp_mem_map_params_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                        UCP_MEM_MAP_PARAM_FIELD_PROT;
        mp.length = 4096;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
        mp.prot = prots[i];
        ucp_mem_h memh;
        REQUIRE(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "mem_map with prot");
        ucp_mem_attr_t ma;
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        REQUIRE(ucp_mem_query(memh, &ma) == UCS_OK, "mem_query");
        unsigned char *base = ma.address;
        memset(base, 0x5a, 4096);
        ucp_rkey_h k = unpack(ctx, memh, e10);
        uint64_t raddr = (uint64_t)(uintptr_t)base;
        unsigned char buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        uint64_t res = 0;
        if (i == 0) {
            BAD_STATUS(ucp_put_nbi(e10, buf, 8, raddr, k), "ucp_put_nbi", UCS_ERR_INVALID_PARAM);
            BAD_PTR(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 8, raddr, k,
                                        NULL), "ucp_atomic_fetch_nb", UCS_ERR_INVALID_PARAM);
            CHECK(base[0] == 0x5a, "a read-only mapping was written");
            CHECK(wait_req(ucp_get_nb(e10, buf, 8, raddr, k, NULL)) == UCS_OK && buf[0] == 0x5a,
                  "get from a remotely readable mapping");
        } else {
            CHECK(wait_req(ucp_put_nb(e10, buf, 8, raddr, k, NULL)) == UCS_OK, "put");
            CHECK(wait_req(ucp_ep_flush_nb(e10, 0, NULL)) == UCS_OK, "flush");
            CHECK(base[0] == 1, "a write-only mapping was not written");
            BAD_PTR(ucp_get_nb(e10, buf, 8, raddr, k, NULL), "ucp_get_nb",
                    UCS_ERR_INVALID_PARAM);
        }
        ucp_rkey_destroy(k);
        CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");
    }
    /* Flags of later headers (written as numbers: these are UCX 1.13's headers):
     * UCP_MEM_MAP_SYMMETRIC_RKEY (8) is a hint, UCP_MEM_MAP_LOCK (16) locks the pages, and
     * UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER (bit 5) is refused as unsupported. */
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = 8192;
    mp.flags = UCP_MEM_MAP_ALLOCATE | 8 | 16;
    ucp_mem_h memh;
    CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "mem_map with SYMMETRIC_RKEY and LOCK");
    CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap locked");
    mp.field_mask |= 1ull << 5;
    BAD_STATUS(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map", UCS_ERR_UNSUPPORTED);
}

static void bad_input(ucp_context_h ctx, ucp_context_h ctx2, ucp_ep_h e10, ucp_ep_h e01,
                      ucp_ep_h e20)
{
    enum { LEN = 8192 };
    static unsigned char user[LEN] __attribute__((aligned(64)));
    void *base;
    memset(user, 0x11, sizeof(user));
    ucp_mem_h memh = map(ctx, user, LEN, 0, &base);
    uint64_t raddr = (uint64_t)(uintptr_t)base;
    ucp_rkey_h k10 = unpack(ctx, memh, e10);
    ucp_rkey_h k01 = unpack(ctx, memh, e01);
    ucp_rkey_h k20 = unpack(ctx, memh, e20);
    unsigned char src[64];
    memset(src, 0xee, sizeof(src));
    uint64_t res = 0, operand = 1;
    /* A key unpacked on another worker's endpoint (W[0]'s), or on another context's. */
    BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr, k01), "ucp_put_nbi", UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_get_nb(e10, src, 8, raddr, k20, NULL), "ucp_get_nb", UCS_ERR_INVALID_PARAM);
    BAD_STATUS(ucp_atomic_post(e10, UCP_ATOMIC_POST_OP_ADD, 1, 8, raddr, k20), "ucp_atomic_post",
               UCS_ERR_INVALID_PARAM);
    /* Outside the mapping: past its end, straddling it, before it. */
    BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr + LEN, k10), "ucp_put_nbi", UCS_OK);
    BAD_PTR(ucp_put_nb(e10, src, 16, raddr + LEN - 8, k10, NULL), "ucp_put_nb", UCS_OK);
    BAD_PTR(ucp_get_nb(e10, src, 8, raddr - 8, k10, NULL), "ucp_get_nb", UCS_OK);
    BAD_PTR(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 8, raddr + LEN, k10, NULL),
            "ucp_atomic_fetch_nb", UCS_OK);
    /* Unsupported sizes and opcodes, a misaligned word. */
    BAD_STATUS(ucp_atomic_post(e10, UCP_ATOMIC_POST_OP_ADD, 1, 2, raddr, k10), "ucp_atomic_post",
               UCS_ERR_INVALID_PARAM);
    BAD_STATUS(ucp_atomic_post(e10, (ucp_atomic_post_op_t)9, 1, 8, raddr, k10), "ucp_atomic_post",
               UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 16, raddr, k10, NULL),
            "ucp_atomic_fetch_nb", UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_atomic_fetch_nb(e10, (ucp_atomic_fetch_op_t)17, 1, &res, 8, raddr, k10, NULL),
            "ucp_atomic_fetch_nb", UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 8, raddr + 4, k10, NULL),
            "ucp_atomic_fetch_nb", UCS_ERR_INVALID_PARAM);
    ucp_request_param_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    ap.datatype = ucp_dt_make_contig(2);
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_ADD, &operand, 1, raddr, k10, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    ap.datatype = ucp_dt_make_contig(8);
    BAD_PTR(ucp_atomic_op_nbx(e10, (ucp_atomic_op_t)30, &operand, 1, raddr, k10, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_atomic_op_nbx(e10, UCP_ATOMIC_OP_SWAP, &operand, 1, raddr, k10, &ap),
            "ucp_atomic_op_nbx", UCS_ERR_INVALID_PARAM);
    /* A key from another context packed for this one. */
    BAD_STATUS(ucp_mem_unmap(ctx2, memh), "ucp_mem_unmap", UCS_ERR_INVALID_PARAM);
    /* The mapping unmapped: its keys are refused, and it cannot be unpacked again. */
    void *kb;
    size_t ks;
    REQUIRE(ucp_rkey_pack(ctx, memh, &kb, &ks) == UCS_OK, "rkey_pack");
    CHECK(ucp_mem_unmap(ctx, memh) == UCS_OK, "unmap");
    BAD_STATUS(ucp_put_nbi(e10, src, 8, raddr, k10), "ucp_put_nbi", UCS_ERR_INVALID_PARAM);
    BAD_PTR(ucp_atomic_fetch_nb(e10, UCP_ATOMIC_FETCH_OP_FADD, 1, &res, 8, raddr, k10, NULL),
            "ucp_atomic_fetch_nb", UCS_ERR_INVALID_PARAM);
    void *rp;
    BAD_STATUS(ucp_rkey_ptr(k10, raddr, &rp), "ucp_rkey_ptr", UCS_ERR_INVALID_PARAM);
    ucp_rkey_h again;
    BAD_STATUS(ucp_ep_rkey_unpack(e10, kb, &again), "ucp_ep_rkey_unpack", UCS_ERR_INVALID_PARAM);
    ucp_rkey_buffer_release(kb);
    CHECK(wait_req(ucp_worker_flush_nb(W[1], 0, NULL)) == UCS_OK, "flush");
    int untouched = 1;
    for (int i = 0; i < LEN; i++) untouched &= user[i] == 0x11;
    CHECK(untouched, "a refused call wrote the memory");
    ucp_rkey_destroy(k10);
    ucp_rkey_destroy(k01);
    ucp_rkey_destroy(k20);
}

int main(void)
{
    /* Refused calls log at warn level; the capture counts those lines. */
    setenv("RUCX_LOG_LEVEL", "warn", 1);
    const char *tls = getenv("UCX_TLS");
    over_tcp = tls != NULL && strcmp(tls, "tcp") == 0;

    ucp_config_t *cfg;
    REQUIRE(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config_read");
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64;
    ucp_context_h ctx, ctx2;
    REQUIRE(ucp_init(&params, cfg, &ctx) == UCS_OK, "ucp_init");
    REQUIRE(ucp_init(&params, cfg, &ctx2) == UCS_OK, "ucp_init 2");
    ucp_config_release(cfg);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    const char *mode = getenv("ONESIDED_THREAD_MODE");
    wp.thread_mode = mode != NULL && strcmp(mode, "single") == 0 ? UCS_THREAD_MODE_SINGLE
                                                                 : UCS_THREAD_MODE_MULTI;
    ucp_worker_h w2;

    /* 0. Memory mapped before the context has a worker (as ucx_perftest does): allocated and
     * user memory; it is registered with the first worker once that exists. A context that
     * never gets a worker cannot pack a key for its mapping (an error, one log line). */
    void *early_base, *early_user_base;
    size_t early_len = (size_t)1 << 20;
    unsigned char *early_user = aligned_alloc(4096, early_len);
    ucp_mem_h early = map(ctx, NULL, early_len, UCP_MEM_MAP_ALLOCATE, &early_base);
    ucp_mem_h early_user_mem = map(ctx, early_user, early_len, 0, &early_user_base);
    CHECK(early_user_base == early_user, "early user mapping at the user's address");
    memset(early_base, 0x5a, early_len); /* the client may write it at once */
    {
        ucp_context_h lone;
        ucp_config_t *c3;
        REQUIRE(ucp_config_read(NULL, NULL, &c3) == UCS_OK, "config_read");
        REQUIRE(ucp_init(&params, c3, &lone) == UCS_OK, "ucp_init 3");
        ucp_config_release(c3);
        void *lbase, *kb = NULL;
        size_t ks = 0;
        ucp_mem_h lm = map(lone, NULL, 4096, UCP_MEM_MAP_ALLOCATE, &lbase);
        BAD_STATUS(ucp_rkey_pack(lone, lm, &kb, &ks), "ucp_rkey_pack", UCS_ERR_NO_RESOURCE);
        CHECK(ucp_mem_unmap(lone, lm) == UCS_OK, "unmap of a mapping no worker registered");
        ucp_cleanup(lone);
    }
    REQUIRE(ucp_worker_create(ctx, &wp, &W[0]) == UCS_OK, "worker 0");
    REQUIRE(ucp_worker_create(ctx, &wp, &W[1]) == UCS_OK, "worker 1");
    REQUIRE(ucp_worker_create(ctx2, &wp, &w2) == UCS_OK, "worker of context 2");
    ucp_address_t *a0, *a1;
    size_t l0, l1;
    REQUIRE(ucp_worker_get_address(W[0], &a0, &l0) == UCS_OK, "address 0");
    REQUIRE(ucp_worker_get_address(W[1], &a1, &l1) == UCS_OK, "address 1");
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ucp_ep_h e10, e01, e20;
    ep.address = a0;
    REQUIRE(ucp_ep_create(W[1], &ep, &e10) == UCS_OK, "ep 1->0");
    REQUIRE(ucp_ep_create(w2, &ep, &e20) == UCS_OK, "ep 2->0");
    ep.address = a1;
    REQUIRE(ucp_ep_create(W[0], &ep, &e01) == UCS_OK, "ep 0->1");
    ucp_worker_release_address(W[0], a0);
    ucp_worker_release_address(W[1], a1);

    {
        unsigned char *eb = early_base;
        CHECK(eb[0] == 0x5a && eb[early_len - 1] == 0x5a, "early mapping keeps what was written");
        ucp_rkey_h ek = unpack(ctx, early, e10);
        put_get(e10, ek, early_base, early_len, "mapped before the worker, allocated");
        atomics(e10, ek, early_base, "mapped before the worker, allocated");
        ucp_rkey_destroy(ek);
        ucp_rkey_h euk = unpack(ctx, early_user_mem, e10);
        put_get(e10, euk, early_user, early_len, "mapped before the worker, user memory");
        ucp_rkey_destroy(euk);
        CHECK(ucp_mem_unmap(ctx, early) == UCS_OK, "unmap early");
        CHECK(ucp_mem_unmap(ctx, early_user_mem) == UCS_OK, "unmap early user");
        free(early_user);
    }

    /* 1. UCP_MEM_MAP_ALLOCATE memory (64 MiB, OpenSHMEM's symmetric heap size). */
    size_t big = (size_t)64 << 20;
    void *abase;
    ucp_mem_h amem = map(ctx, NULL, big, UCP_MEM_MAP_ALLOCATE, &abase);
    ucp_rkey_h ak = unpack(ctx, amem, e10);
    put_get(e10, ak, abase, big, "allocated");
    put_get(e10, ak, (unsigned char *)abase + big - (2 << 20), 2 << 20, "allocated, last 2 MiB");
    atomics(e10, ak, abase, "allocated");
    race(e10, ak, abase, "allocated");
    fence_order(e10, ak, abase, "allocated");
    if (!over_tcp) {
        void *rp;
        BAD_STATUS(ucp_rkey_ptr(ak, (uint64_t)(uintptr_t)abase + big, &rp), "ucp_rkey_ptr",
                   UCS_ERR_INVALID_PARAM);
    }
    void *p = NULL;
    ucs_status_t st = ucp_rkey_ptr(ak, (uint64_t)(uintptr_t)abase + 4096, &p);
    if (over_tcp) {
        CHECK(st == UCS_ERR_UNREACHABLE, "rkey_ptr over tcp: %s", ucs_status_string(st));
    } else {
        CHECK(st == UCS_OK, "rkey_ptr over shared memory: %s", ucs_status_string(st));
        if (st == UCS_OK) {
            memcpy(p, "direct", 7);
            CHECK(memcmp((char *)abase + 4096, "direct", 7) == 0, "rkey_ptr aliases the mapping");
        }
    }
    ucp_rkey_destroy(ak);
    CHECK(ucp_mem_unmap(ctx, amem) == UCS_OK, "unmap");

    /* 2. User memory. */
    size_t ulen = (size_t)2 << 20;
    unsigned char *user = aligned_alloc(4096, ulen);
    void *ubase;
    ucp_mem_h umem = map(ctx, user, ulen, 0, &ubase);
    CHECK(ubase == user, "user mapping at the user's address");
    ucp_rkey_h uk = unpack(ctx, umem, e10);
    put_get(e10, uk, user, ulen, "user memory");
    released_request(e10, uk, user, "user memory");
    atomics(e10, uk, user, "user memory");
    race(e10, uk, user, "user memory");
    fence_order(e10, uk, user, "user memory");
    p = NULL;
    st = ucp_rkey_ptr(uk, (uint64_t)(uintptr_t)user, &p);
    CHECK(st == UCS_ERR_UNREACHABLE, "rkey_ptr on user memory (not mapped here): %s",
          ucs_status_string(st));
    ucp_rkey_destroy(uk);
    CHECK(ucp_mem_unmap(ctx, umem) == UCS_OK, "unmap");
    free(user);

    /* 3. UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED at a free address. */
    size_t flen = (size_t)4 << 20;
    void *hole = mmap(NULL, 2 * flen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(hole != MAP_FAILED, "mmap");
    munmap(hole, 2 * flen);
    void *want = (void *)(((uintptr_t)hole + flen - 1) & ~(uintptr_t)(flen - 1));
    void *fbase;
    ucp_mem_h fmem = map(ctx, want, flen, UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED, &fbase);
    CHECK(fbase == want, "fixed mapping at %p, asked %p", fbase, want);
    ucp_rkey_h fk = unpack(ctx, fmem, e10);
    put_get(e10, fk, fbase, flen, "fixed");
    atomics(e10, fk, fbase, "fixed");
    race(e10, fk, fbase, "fixed");
    fence_order(e10, fk, fbase, "fixed");
    p = NULL;
    st = ucp_rkey_ptr(fk, (uint64_t)(uintptr_t)fbase + 100, &p);
    CHECK(over_tcp ? st == UCS_ERR_UNREACHABLE : st == UCS_OK, "rkey_ptr on the fixed mapping: %s",
          ucs_status_string(st));
    if (st == UCS_OK) {
        memcpy(p, "fixed", 6);
        CHECK(memcmp((char *)fbase + 100, "fixed", 6) == 0, "rkey_ptr aliases the fixed mapping");
    }
    /* A second fixed mapping over the first is refused. */
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = want;
    mp.length = 4096;
    mp.flags = UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED;
    ucp_mem_h dup;
    BAD_STATUS(ucp_mem_map(ctx, &mp, &dup), "ucp_mem_map", UCS_ERR_NO_MEMORY);
    ucp_rkey_destroy(fk);
    CHECK(ucp_mem_unmap(ctx, fmem) == UCS_OK, "unmap");
    CHECK(msync(want, 4096, MS_ASYNC) != 0, "the fixed address is unmapped after ucp_mem_unmap");

    /* 4. Bad input. */
    bad_input(ctx, ctx2, e10, e01, e20);
    zero_length(ctx, e10);
    protection(ctx, e10);
    bad_direct(ctx, e10);

    CHECK(wait_req(ucp_ep_close_nb(e10, UCP_EP_CLOSE_MODE_FORCE)) == UCS_OK, "close");
    CHECK(wait_req(ucp_ep_close_nb(e01, UCP_EP_CLOSE_MODE_FORCE)) == UCS_OK, "close");
    helper_start(); /* ucp_ep_destroy flushes, waiting on w2; W[0] answers from the helper */
    ucp_ep_destroy(e20);
    helper_stop();
    ucp_worker_destroy(w2);
    ucp_worker_destroy(W[0]);
    ucp_worker_destroy(W[1]);
    ucp_cleanup(ctx2);
    ucp_cleanup(ctx);
    if (failures) {
        fprintf(stderr, "onesided: %d check(s) failed\n", failures);
        return 1;
    }
    printf("onesided: all checks passed\n");
    return 0;
}
