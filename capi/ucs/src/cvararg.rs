//! The exported names of the functions written in C (`src/cshim.c`).
//!
//! A Rust cdylib exports only the symbols Rust defines, so each C function (named
//! `rucx_c_<name>`, local to the library) gets its UCX name here as a naked function made of
//! one jump: the caller's registers and stack, variadic arguments included, reach the C
//! function untouched.

/// Defines `pub extern "C" fn $name` as a jump to the C function `$target`.
macro_rules! forward_to_c {
    ($($(#[$doc:meta])* $name:ident => $target:ident;)*) => {
        extern "C" {
            $(fn $target();)*
        }
        $(
            $(#[$doc])*
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn $name() {
                core::arch::naked_asm!("jmp {}", sym $target)
            }
        )*
    };
}

forward_to_c! {
    /// `void ucs_log_dispatch(file, line, function, level, comp_conf, format, ...)`: runs the
    /// log handlers, the last pushed first, until one returns `UCS_LOG_FUNC_RC_STOP`.
    ucs_log_dispatch => rucx_c_log_dispatch;
    /// `ucs_log_default_handler(file, line, function, level, comp_conf, format, va_list)`:
    /// formats a message enabled by the component's level and writes it to the log.
    ucs_log_default_handler => rucx_c_log_default_handler;
    /// `void ucs_log_fatal_error(format, ...)`: writes a fatal-level message (no abort).
    ucs_log_fatal_error => rucx_c_log_fatal_error;
    /// `void ucs_fatal_error_format(file, line, function, format, ...)`: logs and aborts.
    ucs_fatal_error_format => rucx_c_fatal_error_format;
    /// `void ucs_fatal_error_message(file, line, function, message)`: logs and aborts.
    ucs_fatal_error_message => rucx_c_fatal_error_message;
    /// `int ucs_snprintf_safe(buf, size, format, ...)`: snprintf that always terminates.
    ucs_snprintf_safe => rucx_c_snprintf_safe;
    /// `void ucs_snprintf_zero(buf, size, format, ...)`: zero-fills, then snprintf.
    ucs_snprintf_zero => rucx_c_snprintf_zero;
    /// `void ucs_string_buffer_init(strb)`: an empty, growing buffer.
    ucs_string_buffer_init => rucx_c_string_buffer_init;
    /// `void ucs_string_buffer_init_fixed(strb, buffer, capacity)`: over caller memory.
    ucs_string_buffer_init_fixed => rucx_c_string_buffer_init_fixed;
    /// `void ucs_string_buffer_cleanup(strb)`: frees a growing buffer's memory.
    ucs_string_buffer_cleanup => rucx_c_string_buffer_cleanup;
    /// `void ucs_string_buffer_reset(strb)`: empties it.
    ucs_string_buffer_reset => rucx_c_string_buffer_reset;
    /// `size_t ucs_string_buffer_length(strb)`.
    ucs_string_buffer_length => rucx_c_string_buffer_length;
    /// `void ucs_string_buffer_appendf(strb, format, ...)`: appends (a fixed buffer truncates).
    ucs_string_buffer_appendf => rucx_c_string_buffer_appendf;
    /// `void ucs_string_buffer_appendc(strb, c, count)`: appends a character `count` times.
    ucs_string_buffer_appendc => rucx_c_string_buffer_appendc;
    /// `void ucs_string_buffer_rtrim(strb, charset)`: strips trailing characters of
    /// `charset` (whitespace when NULL).
    ucs_string_buffer_rtrim => rucx_c_string_buffer_rtrim;
    /// `const char *ucs_string_buffer_cstr(strb)`: the text ("" when nothing was written).
    ucs_string_buffer_cstr => rucx_c_string_buffer_cstr;
    /// `char *ucs_string_buffer_extract_mem(strb)`: the text in memory the caller frees.
    ucs_string_buffer_extract_mem => rucx_c_string_buffer_extract_mem;
    /// `void ucs_string_buffer_dump(strb, line_prefix, stream)`: prints it line by line.
    ucs_string_buffer_dump => rucx_c_string_buffer_dump;
    /// `ucs_status_t ucs_string_set_addf(sset, format, ...)`: adds the formatted string.
    ucs_string_set_addf => rucx_c_string_set_addf;
}
