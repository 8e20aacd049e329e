//! # The transport conformance suite
//!
//! Written once, generic over the transport, run for every transport. A transport instantiates
//! it with one line in its test module:
//!
//! ```ignore
//! #[cfg(test)]
//! mod conformance {
//!     use crate::testing::TlPair;
//!     crate::uct_conformance_tests!(suite, TlPair<super::PosixTransport>);
//! }
//! ```
//!
//! which expands to a module `suite` with one `#[test]` per conformance test
//! (`cargo test -p uct posix::conformance` runs them).
//!
//! [`TlPair<T>`] is the generic fixture: it opens two interfaces of `T` in this process through
//! [`crate::Transport`] (on the transport's first non-network device, or `lo`), connects
//! endpoints 0→1 and 1→0 (CONNECT_TO_IFACE, else CONNECT_TO_EP), and opens more interfaces on
//! demand. A transport that needs something else (a peer in a helper thread, a special
//! device, extra progress to finish connecting) implements [`Fixture`] itself and passes its
//! type to the macro instead.
//!
//! What the suite expects of a transport:
//! - Capabilities are promises: every advertised operation works with in-range arguments,
//!   every other one returns `Error::Unsupported`; a limit is non-zero exactly when its flag
//!   is set; address lengths match `IfaceAttr`; `event_fd()` exists exactly with
//!   `EventFlags::FD`.
//! - Sizes: AM short/bcopy/zcopy at 0, 1 and the limit arrive intact; limit+1 gives
//!   `Error::MessageTooLong` (bcopy: a pack closure claiming limit+1 bytes gives an error and
//!   sends nothing); AM ids ≥ 32 give `Error::InvalidParam`.
//! - `NoResource` is followed, after `pending_add`, by a `pending` callback during progress;
//!   nothing is lost, duplicated or reordered on one endpoint.
//! - Put/get/atomics outside the remote key's region give `Error::RemoteAccess` (from the call
//!   or from the completion) and change nothing; a truncated, bit-inverted or all-zero packed
//!   rkey is rejected by `rkey_unpack`.
//! - Operations may complete at once or with `InProgress` + completion; the suite accepts both.
//!
//! - Tag offload ([`tag`]): limits non-zero exactly with their TAG_* flags, no tag operation
//!   without them; eager sizes, matching order under masks, truncation, cancel, the posted
//!   limit, expected and unexpected rendezvous.
//!
//! Tests skip (returning early with a note on stderr) when the capabilities say the operation
//! is absent, or when `Fixture::new` gives `NoDevice`, `Unsupported` or `Unreachable`. Waits
//! are bounded by a watchdog ([`WATCHDOG`]), never by timing assertions.

mod fixture;
pub mod suite;
pub mod tag;

pub use fixture::{
    local_mem, pattern, progress_until, remote_mem, run_op, Fixture, OpValue, Recorder, RemoteMem,
    TestMem, TlPair, WATCHDOG,
};

/// Expands to `mod $name { #[test] fn ... }` running every conformance test with fixture
/// `$fixture` (a type implementing [`testing::Fixture`](crate::testing::Fixture)).
#[macro_export]
macro_rules! uct_conformance_tests {
    ($name:ident, $fixture:ty) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::uct_conformance_tests!(@tests $fixture;
                caps_consistency,
                am_short_sizes,
                am_short2_sizes,
                am_short_iov_sizes,
                am_bcopy_sizes,
                am_zcopy_sizes,
                am_id_out_of_range,
                back_pressure,
                flush_completes,
                many_to_one,
                put_get_short,
                put_get_bcopy,
                put_get_zcopy,
                rma_out_of_range,
                rkey_corrupt,
                atomics_32,
                atomics_64,
                event_fd_wakes_receiver
            );
            $crate::uct_conformance_tests!(@tag_tests $fixture;
                tag_caps,
                tag_eager_sizes,
                tag_match_order_and_mask,
                tag_truncated,
                tag_cancel,
                tag_recv_limit,
                tag_rndv_expected,
                tag_rndv_unexpected
            );
        }
    };
    (@tag_tests $fixture:ty; $($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $crate::testing::tag::$test::<$fixture>()
            }
        )*
    };
    (@tests $fixture:ty; $($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $crate::testing::suite::$test::<$fixture>()
            }
        )*
    };
}
