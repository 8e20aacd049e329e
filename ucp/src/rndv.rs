//! Rendezvous: large messages move by RMA (get_zcopy or put_zcopy) or an active-message pipeline
//! after an RTS/RTR handshake; `send` is the sender's side, `recv` the receiver's.
//!
//! The receiver picks the data path per message from its endpoint's
//! [`ProtoConfig::rndv_for`](crate::wireup::ProtoConfig::rndv_for), which the performance
//! models chose (`RUCX_PROTO_INFO=y` prints it). Over shared memory with cma every rendezvous
//! size goes by get_zcopy: the receiver reads the sender's buffer once, in
//! [`ProtoConfig::rndv_frag`](crate::wireup::ProtoConfig::rndv_frag) steps between which its
//! worker goes on progressing (`State::get_step`), so with traffic both ways each core reads
//! the other's data while the other reads its own. The AM pipeline (after an RTR the sender
//! streams the data in AM-lane bcopy fragments, packed with `copy_payload` straight into the
//! transport's buffer; the receiver copies each into the receive's buffer) moves what no RMA
//! lane can, and sizes up to `rndv_am_max` where the models favour it; its sender registers
//! nothing for the RTS (it carries no remote key).
//!
//! Data in a shared segment (`tag_send_mapped` from a posix/sysv `mem_map`) is announced with
//! the AM lane's key, and the receiver reads it in place with get_zcopy on that lane, whatever
//! the size and the RMA lane: one copy, no system call. The key is unpacked by the lane's
//! endpoint ([`uct::Endpoint::peer_rkey_unpack`]), which keeps the sender's segment mapped for
//! the next messages, checks that each key names memory of its own peer, and unmaps it all
//! when the endpoint goes (closed, or failed with its peer).

mod recv;
mod send;
