//! Rendezvous: large messages move by RMA (get_zcopy or put_zcopy) or an active-message pipeline
//! after an RTS/RTR handshake; `send` is the sender's side, `recv` the receiver's.
//!
//! The receiver picks the data path per message from its endpoint's
//! [`ProtoConfig::rndv_for`](crate::wireup::ProtoConfig::rndv_for): sizes up to `rndv_am_max`
//! go by the pipeline even when an RMA lane exists (over shared memory the pipeline's two
//! overlapped user-space copies through the FIFO beat one cross-memory-attach copy in the
//! kernel while the data stays cached), larger ones by get_zcopy (or put_zcopy). Pipeline: the
//! RTR asks for the data; the sender streams it in AM-lane bcopy fragments (packed with
//! `copy_payload` straight into the transport's buffer, as many as the lane takes before
//! back-pressure, no allocation per fragment); the receiver copies each fragment from the
//! transport's buffer straight into the receive's buffer (`copy_payload`). The sender of a
//! pipelined size registers nothing for the RTS (it carries no remote key).
//!
//! Data in a shared segment (`tag_send_mapped` from a posix/sysv `mem_map`) is announced with
//! the AM lane's key, and the receiver reads it in place with get_zcopy on that lane, whatever
//! the size and the RMA lane: one copy, no system call. The key is unpacked by the lane's
//! endpoint ([`uct::Endpoint::peer_rkey_unpack`]), which keeps the sender's segment mapped for
//! the next messages, checks that each key names memory of its own peer, and unmaps it all
//! when the endpoint goes (closed, or failed with its peer).

mod recv;
mod send;
