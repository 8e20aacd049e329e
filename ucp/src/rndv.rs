//! Rendezvous: large messages move by RMA (get_zcopy or put_zcopy) or an active-message pipeline
//! after an RTS/RTR handshake; `send` is the sender's side, `recv` the receiver's.

mod recv;
mod send;
