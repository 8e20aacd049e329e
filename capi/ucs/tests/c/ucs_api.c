/*
 * Drives rucx's libucs.so.0 through UCX 1.13's own headers: the logging macros (which read
 * the log level from the client's copy of ucs_global_opts and call ucs_log_dispatch), the
 * handler stack, the data objects clients import, string buffers built by the header
 * macros, memory units, socket addresses, memtrack, async contexts and the clock.
 *
 * Run with UCX_LOG_LEVEL=info: the test checks that the level arrived. Prints
 * "ucs_api: all checks passed".
 */
#include <ucs/config/global_opts.h>
#include <ucs/datastruct/string_buffer.h>
#include <ucs/datastruct/string_set.h>
#include <ucs/debug/log_def.h>
#include <ucs/debug/memtrack.h>
#include <ucs/memory/memory_type.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/type/status.h>
#include <ucs/type/thread_mode.h>
#include <ucs/async/async_fwd.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Declared in UCX headers that Debian does not install. */
extern const char *ucs_thread_mode_names[];
extern int ucs_arch_x86_enable_rdtsc;
void ucs_x86_init_tsc_freq(void);
double ucs_get_cpu_clocks_per_sec(void);
ucs_status_t ucs_async_context_init(ucs_async_context_t *async, ucs_async_mode_t mode);
void ucs_async_context_cleanup(ucs_async_context_t *async);

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

static struct {
    int  calls;
    int  level;
    char text[256];
    char file[64];
} seen;

static ucs_log_func_rc_t capture(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level,
                                 const ucs_log_component_config_t *comp_conf,
                                 const char *message, va_list ap)
{
    (void)line;
    (void)function;
    (void)comp_conf;
    seen.calls++;
    seen.level = level;
    vsnprintf(seen.text, sizeof(seen.text), message, ap);
    snprintf(seen.file, sizeof(seen.file), "%s", strrchr(file, '/') ? strrchr(file, '/') + 1 : file);
    return UCS_LOG_FUNC_RC_STOP;
}

static void test_logging(void)
{
    unsigned base = ucs_log_num_handlers();

    CHECK(ucs_global_opts.log_component.log_level == UCS_LOG_LEVEL_INFO,
          "UCX_LOG_LEVEL=info reached the client's copy of ucs_global_opts: %d",
          ucs_global_opts.log_component.log_level);
    CHECK(base >= 1, "the default handler is on the stack");
    ucs_log_push_handler(capture);
    CHECK(ucs_log_num_handlers() == base + 1, "pushed");
    ucs_error("value %d and %s", 42, "text");
    CHECK(seen.calls == 1 && seen.level == UCS_LOG_LEVEL_ERROR, "error dispatched");
    CHECK(!strcmp(seen.text, "value 42 and text"), "formatted: '%s'", seen.text);
    CHECK(!strcmp(seen.file, "ucs_api.c"), "file: '%s'", seen.file);
    ucs_info("info %s", "passes");
    CHECK(seen.calls == 2 && !strcmp(seen.text, "info passes"), "info at level info");
    ucs_debug("debug %s", "is filtered");
    CHECK(seen.calls == 2, "debug is below the level: not dispatched");
    ucs_log_pop_handler();
    CHECK(ucs_log_num_handlers() == base, "popped");
    ucs_log_pop_handler();
    CHECK(ucs_log_num_handlers() == base, "the default handler stays");
    ucs_warn("this line goes to the default handler (stderr)");
    CHECK(seen.calls == 2, "the popped handler is not called");
}

static void test_names(void)
{
    CHECK(!strcmp(ucs_memory_type_names[UCS_MEMORY_TYPE_HOST], "host"), "host");
    CHECK(!strcmp(ucs_memory_type_names[UCS_MEMORY_TYPE_UNKNOWN], "unknown"), "unknown");
    CHECK(ucs_memory_type_names[UCS_MEMORY_TYPE_LAST + 1] == NULL, "NULL after LAST");
    CHECK(!strcmp(ucs_memory_type_descs[UCS_MEMORY_TYPE_HOST], "System memory"), "desc");
    CHECK(!strcmp(ucs_thread_mode_names[UCS_THREAD_MODE_MULTI], "multi"), "multi");
    CHECK(!strcmp(ucs_status_string(UCS_ERR_NO_ELEM), "No such element"), "status string");
}

static void test_strings(void)
{
    char buf[8];
    size_t v = 0;
    UCS_STRING_BUFFER_ONSTACK(fixed, 16);
    ucs_string_buffer_t dyn = UCS_STRING_BUFFER_INITIALIZER;
    int i;

    ucs_string_buffer_appendf(&fixed, "%s-%d", "abcdefghij", 123456789);
    CHECK(!strcmp(ucs_string_buffer_cstr(&fixed), "abcdefghij-1234"),
          "a fixed buffer truncates: '%s'", ucs_string_buffer_cstr(&fixed));
    CHECK(!strcmp(ucs_string_buffer_cstr(&dyn), ""), "empty buffer");
    for (i = 0; i < 100; ++i) {
        ucs_string_buffer_appendf(&dyn, "%d,", i);
    }
    ucs_string_buffer_rtrim(&dyn, ",");
    CHECK(strlen(ucs_string_buffer_cstr(&dyn)) == 289, "grown: %zu",
          strlen(ucs_string_buffer_cstr(&dyn)));
    CHECK(!strcmp(ucs_string_buffer_cstr(&dyn) + 285, "8,99"), "rtrim");
    ucs_string_buffer_cleanup(&dyn);

    ucs_snprintf_zero(buf, sizeof(buf), "%s", "0123456789");
    CHECK(!strcmp(buf, "0123456"), "snprintf_zero");
    ucs_strncpy_zero(buf, "abcdefghij", sizeof(buf));
    CHECK(!strcmp(buf, "abcdefg"), "strncpy_zero");

    CHECK(ucs_str_to_memunits("8k", &v) == UCS_OK && v == 8192, "8k");
    CHECK(ucs_str_to_memunits("inf", &v) == UCS_OK && v == UCS_MEMUNITS_INF, "inf");
    CHECK(ucs_str_to_memunits("8q", &v) == UCS_ERR_INVALID_PARAM, "bad unit");
    CHECK(!strcmp(ucs_memunits_to_str(3 << 20, buf, sizeof(buf)), "3M"), "3M: %s", buf);
}

static void test_string_set(void)
{
    ucs_string_set_t sset;
    ucs_string_buffer_t strb = UCS_STRING_BUFFER_INITIALIZER;

    ucs_string_set_init(&sset);
    CHECK(kh_size(&sset) == 0, "a new set is empty (khash size, read inline)");
    CHECK(ucs_string_set_add(&sset, "tcp") == UCS_OK, "add");
    CHECK(ucs_string_set_addf(&sset, "%s%d", "memory", 0) == UCS_OK, "addf");
    CHECK(ucs_string_set_add(&sset, "tcp") == UCS_OK, "add again");
    CHECK(kh_size(&sset) == 2, "two strings: %u", kh_size(&sset));
    CHECK(ucs_string_set_contains(&sset, "memory0"), "contains the formatted one");
    CHECK(ucs_string_set_print_sorted(&sset, &strb, ", ") == UCS_OK, "print");
    CHECK(!strcmp(ucs_string_buffer_cstr(&strb), "memory0, tcp"), "sorted: '%s'",
          ucs_string_buffer_cstr(&strb));
    ucs_string_buffer_cleanup(&strb);
    ucs_string_set_cleanup(&sset);
}

static void test_sockaddr(void)
{
    struct sockaddr_in sin;
    char buf[64];
    uint16_t port = 0;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port   = htons(4321);
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    CHECK(!strcmp(ucs_sockaddr_str((struct sockaddr*)&sin, buf, sizeof(buf)),
                  "127.0.0.1:4321"), "sockaddr_str: %s", buf);
    CHECK(ucs_sockaddr_get_port((struct sockaddr*)&sin, &port) == UCS_OK && port == 4321,
          "port");
    CHECK(!strcmp(ucs_sockaddr_str(NULL, buf, sizeof(buf)), "<null>"), "NULL address");
}

static void test_runtime(void)
{
    ucs_async_context_t *async = NULL;
    char storage[512];
    void *p = malloc(100);

    CHECK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) == UCS_OK &&
          async != NULL, "async create");
    ucs_async_context_destroy(async);
    CHECK(ucs_async_context_create(99, &async) == UCS_ERR_INVALID_PARAM, "bad mode");
    CHECK(ucs_async_context_init((ucs_async_context_t*)storage, UCS_ASYNC_MODE_POLL) ==
          UCS_OK, "async init in the client's memory");
    ucs_async_context_cleanup((ucs_async_context_t*)storage);

    ucs_memtrack_allocated(p, 100, "test");
    ucs_memtrack_releasing(p);
    free(p);

    ucs_x86_init_tsc_freq();
    CHECK(ucs_arch_x86_enable_rdtsc == 0 || ucs_arch_x86_enable_rdtsc == 1,
          "the TSC was decided: %d", ucs_arch_x86_enable_rdtsc);
    CHECK(ucs_get_cpu_clocks_per_sec() >= 1.0e6, "clock rate %f",
          ucs_get_cpu_clocks_per_sec());
}

int main(void)
{
    test_logging();
    test_names();
    test_strings();
    test_string_set();
    test_sockaddr();
    test_runtime();
    if (failures == 0) {
        printf("ucs_api: all checks passed\n");
    }
    return failures ? 1 : 0;
}
