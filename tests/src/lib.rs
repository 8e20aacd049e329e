//! End-to-end tests live in tests/tests/.
#![warn(missing_docs)]
