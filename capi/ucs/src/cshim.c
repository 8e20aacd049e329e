/*
 * libucs.so.0: the parts of UCX's ucs API written in C, because Rust cannot define variadic
 * functions or take a va_list: log dispatch and the default log handler, fatal errors, the
 * snprintf helpers, and the string buffer (kept beside appendf, which needs vsnprintf).
 *
 * Each function here is named rucx_c_<UCX name> and is local to the library; the exported
 * UCX name is a jump to it defined in Rust (cvararg.rs), because a Rust cdylib exports only
 * Rust symbols. The data objects (ucs_global_opts ...) are defined in Rust (data.rs); this
 * file reaches them through the GOT, so when a client copy-relocated one into its executable,
 * both sides use the client's copy.
 *
 * Every declaration here is this project's own, written from UCX 1.13's documented API and
 * checked against its headers by capi/ucs/tests/c.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef signed char ucs_status_t;

/* ---- global options (defined in data.rs) ------------------------------------------------ */

/* ucs_log_component_config_t: a level, a 16-byte name, a source-file filter. */
struct rucx_log_component {
    int         log_level;
    char        name[16];
    const char *file_filter;
};

/* ucs_global_opts_t as far as clients read it (logging); the rest is reserved. */
struct rucx_global_opts {
    struct rucx_log_component log_component;  /* @0 */
    char                     *log_file;        /* @32 */
    size_t                    log_file_size;   /* @40 */
    unsigned                  log_file_rotate; /* @48 */
    size_t                    log_buffer_size; /* @56 */
    size_t                    log_data_size;   /* @64 */
    int                       log_print_enable; /* @72 */
    unsigned char             reserved[360 - 76];
};
_Static_assert(sizeof(struct rucx_global_opts) == 360, "ucs_global_opts_t is 360 bytes");
_Static_assert(offsetof(struct rucx_global_opts, log_print_enable) == 72, "log_print_enable @72");

extern struct rucx_global_opts ucs_global_opts;
extern int ucs_arch_x86_enable_rdtsc;

/* Sets and reads the level of the global log component, in the client's copy when it made one
 * (reached through the GOT). */
void rucx_c_set_log_level(int level)
{
    ucs_global_opts.log_component.log_level = level;
}

int rucx_c_get_log_level(void)
{
    return ucs_global_opts.log_component.log_level;
}

/* Sets and reads ucs_arch_x86_enable_rdtsc (NO 0, YES 1, TRY 2), in the client's copy. */
void rucx_c_set_rdtsc(int mode)
{
    ucs_arch_x86_enable_rdtsc = mode;
}

int rucx_c_get_rdtsc(void)
{
    return ucs_arch_x86_enable_rdtsc;
}

/* ---- logging ---------------------------------------------------------------------------- */

enum { RC_STOP = 0, RC_CONTINUE = 1 };
enum { LEVEL_FATAL = 0, LEVEL_PRINT = 13, MAX_HANDLERS = 32 };

typedef int (*rucx_log_func_t)(const char *file, unsigned line, const char *function,
                               int level, const struct rucx_log_component *comp,
                               const char *format, va_list ap);

/* Rust (log.rs): copies the handler stack (bottom first) into `out`, gives the count. */
unsigned rucx_ucs_log_handlers(rucx_log_func_t *out, unsigned max);
/* Rust (log.rs): writes one formatted message to the project's log. */
void rucx_ucs_log_emit(const char *file, unsigned line, const char *function, int level,
                       const char *comp_name, const char *message);
/* Rust (log.rs): logs a fatal error and aborts. */
void rucx_ucs_fatal(const char *file, unsigned line, const char *function,
                    const char *message) __attribute__((noreturn));

int rucx_c_log_default_handler(const char *file, unsigned line, const char *function, int level,
                            const struct rucx_log_component *comp, const char *format,
                            va_list ap)
{
    char msg[1024];
    int enabled = (comp != NULL) ? (level <= comp->log_level)
                                 : (level <= ucs_global_opts.log_component.log_level);
    if ((level == LEVEL_PRINT) ? !ucs_global_opts.log_print_enable : !enabled) {
        return RC_CONTINUE;
    }
    vsnprintf(msg, sizeof(msg), format, ap);
    rucx_ucs_log_emit(file, line, function, level, (comp != NULL) ? comp->name : "UCX", msg);
    return RC_CONTINUE;
}

void rucx_c_log_dispatch(const char *file, unsigned line, const char *function, int level,
                      struct rucx_log_component *comp, const char *format, ...)
{
    rucx_log_func_t handlers[MAX_HANDLERS];
    unsigned n = rucx_ucs_log_handlers(handlers, MAX_HANDLERS);
    int rc     = RC_CONTINUE;
    va_list ap;

    /* The last pushed handler first; the default handler is at the bottom. */
    while ((n > 0) && (rc == RC_CONTINUE)) {
        --n;
        va_start(ap, format);
        rc = handlers[n](file, line, function, level, comp, format, ap);
        va_end(ap);
    }
}

void rucx_c_log_fatal_error(const char *format, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(msg, sizeof(msg), format, ap);
    va_end(ap);
    rucx_ucs_log_emit("", 0, "", LEVEL_FATAL, "UCX", msg);
}

void rucx_c_fatal_error_format(const char *file, unsigned line, const char *function,
                            const char *format, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(msg, sizeof(msg), format, ap);
    va_end(ap);
    rucx_ucs_fatal(file, line, function, msg);
}

void rucx_c_fatal_error_message(const char *file, unsigned line, const char *function,
                             char *message)
{
    rucx_ucs_fatal(file, line, function, message);
}

/* ---- snprintf helpers ------------------------------------------------------------------- */

int rucx_c_snprintf_safe(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int ret;
    if (size == 0) {
        return 0;
    }
    va_start(ap, fmt);
    ret = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    buf[size - 1] = '\0';
    return ret;
}

void rucx_c_snprintf_zero(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    if (size == 0) {
        return;
    }
    memset(buf, 0, size);
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* ---- string buffer ---------------------------------------------------------------------- */

/* ucs_string_buffer_t: a char array {buffer, length, capacity}; bit 0 of capacity marks a
 * fixed (caller-owned) buffer that never grows. The length excludes the terminating NUL. */
struct rucx_strb {
    char  *buffer;
    size_t length;
    size_t capacity;
};

#define STRB_FIXED ((size_t)1)
#define STRB_CAP(_s) ((_s)->capacity & ~STRB_FIXED)

void rucx_c_string_buffer_init(struct rucx_strb *s)
{
    s->buffer   = NULL;
    s->length   = 0;
    s->capacity = 0;
}

void rucx_c_string_buffer_init_fixed(struct rucx_strb *s, char *buffer, size_t capacity)
{
    s->buffer   = buffer;
    s->length   = 0;
    s->capacity = (capacity & ~STRB_FIXED) | STRB_FIXED;
    if (capacity > 0) {
        buffer[0] = '\0';
    }
}

void rucx_c_string_buffer_cleanup(struct rucx_strb *s)
{
    if (!(s->capacity & STRB_FIXED)) {
        free(s->buffer);
        s->buffer   = NULL;
        s->capacity = 0;
    }
    s->length = 0;
}

void rucx_c_string_buffer_reset(struct rucx_strb *s)
{
    s->length = 0;
    if (STRB_CAP(s) > 0) {
        s->buffer[0] = '\0';
    }
}

size_t rucx_c_string_buffer_length(struct rucx_strb *s)
{
    return s->length;
}

/* Makes room for `extra` more characters plus the NUL; a fixed buffer keeps its size. Gives
 * the number of characters that fit. */
static size_t strb_reserve(struct rucx_strb *s, size_t extra)
{
    size_t need = s->length + extra + 1;
    size_t cap  = STRB_CAP(s);
    if ((need > cap) && !(s->capacity & STRB_FIXED)) {
        size_t new_cap = (cap < 64) ? 64 : cap;
        char *p;
        while (new_cap < need) {
            new_cap *= 2;
        }
        new_cap = (new_cap + 1) & ~STRB_FIXED; /* even: bit 0 is the fixed flag */
        p       = realloc(s->buffer, new_cap);
        if (p != NULL) {
            s->buffer   = p;
            s->capacity = new_cap;
            cap         = new_cap;
        }
    }
    return (cap > s->length + 1) ? cap - s->length - 1 : 0;
}

void rucx_c_string_buffer_appendf(struct rucx_strb *s, const char *fmt, ...)
{
    va_list ap;
    int n;
    size_t room;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) {
        return;
    }
    room = strb_reserve(s, (size_t)n);
    if (STRB_CAP(s) == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s->buffer + s->length, room + 1, fmt, ap);
    va_end(ap);
    s->length += ((size_t)n < room) ? (size_t)n : room;
}

void rucx_c_string_buffer_appendc(struct rucx_strb *s, int c, size_t count)
{
    size_t room = strb_reserve(s, count);
    size_t n    = (count < room) ? count : room;
    if (STRB_CAP(s) == 0) {
        return;
    }
    memset(s->buffer + s->length, c, n);
    s->length += n;
    s->buffer[s->length] = '\0';
}

void rucx_c_string_buffer_rtrim(struct rucx_strb *s, const char *charset)
{
    while (s->length > 0) {
        char c = s->buffer[s->length - 1];
        int strip = (charset == NULL) ? (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                                         c == '\v' || c == '\f')
                                      : (strchr(charset, c) != NULL);
        if (!strip) {
            break;
        }
        --s->length;
    }
    if (STRB_CAP(s) > 0) {
        s->buffer[s->length] = '\0';
    }
}

const char *rucx_c_string_buffer_cstr(const struct rucx_strb *s)
{
    return (STRB_CAP(s) == 0) ? "" : s->buffer;
}

char *rucx_c_string_buffer_extract_mem(struct rucx_strb *s)
{
    char *p;
    if ((s->capacity & STRB_FIXED) || (STRB_CAP(s) == 0)) {
        p = strdup(rucx_c_string_buffer_cstr(s));
    } else {
        p           = s->buffer;
        s->buffer   = NULL;
        s->capacity = 0;
    }
    s->length = 0;
    return p;
}

void rucx_c_string_buffer_dump(const struct rucx_strb *s, const char *line_prefix, FILE *stream)
{
    const char *p = rucx_c_string_buffer_cstr(s);
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len     = (nl != NULL) ? (size_t)(nl - p) : strlen(p);
        fprintf(stream, "%s%.*s\n", (line_prefix != NULL) ? line_prefix : "", (int)len, p);
        p += len + ((nl != NULL) ? 1 : 0);
    }
}

/* ---- configuration list ----------------------------------------------------------------- */

/* ucs_list_link_t: {prev, next}. The object is defined in data.rs; an empty list points to
 * itself, which only code reaching it through the GOT can set (the client's copy when it made
 * one), so the library's constructor calls this. */
struct rucx_list_link {
    struct rucx_list_link *prev, *next;
};

extern struct rucx_list_link ucs_config_global_list;

void rucx_c_init_config_list(void)
{
    ucs_config_global_list.prev = &ucs_config_global_list;
    ucs_config_global_list.next = &ucs_config_global_list;
}

/* ---- string set: the variadic add -------------------------------------------------------- */

/* Rust (string_set.rs): adds a copy of `str`. */
ucs_status_t ucs_string_set_add(void *sset, const char *str);

ucs_status_t rucx_c_string_set_addf(void *sset, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -5; /* UCS_ERR_INVALID_PARAM */
    }
    if ((size_t)n >= sizeof(buf)) {
        return -21; /* UCS_ERR_EXCEEDS_LIMIT: longer than a string set entry may be */
    }
    return ucs_string_set_add(sset, buf);
}
