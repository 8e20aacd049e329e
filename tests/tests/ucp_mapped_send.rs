//! `Worker::tag_send_mapped` with tag offload on (the default): data from a `mem_map` shared
//! segment arrives intact at eager and rendezvous sizes over posix and sysv (alone, and with
//! cma as the RMA lane), and from a heap mapping over tcp; the rendezvous is announced in place (counter) and an expected one is
//! pulled by the receiving interface; bad ranges are errors.

mod mapped_send;

#[test]
fn ucp_mapped_send_delivers_with_offload() {
    mapped_send::mapped_sends_deliver(true);
}

#[test]
fn ucp_mapped_send_bad_range_is_an_error() {
    mapped_send::bad_ranges_are_errors();
}

#[test]
fn ucp_send_nb_gives_none_when_done_at_once() {
    mapped_send::nb_sends_deliver();
}

#[test]
fn ucp_send_nb_keeps_order_under_back_pressure() {
    mapped_send::nb_sends_keep_order_under_back_pressure();
}
