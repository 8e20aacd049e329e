//! `Worker::tag_send_mapped` with tag offload off (`RUCX_TM_ENABLE=n`, set before any worker
//! exists; this binary has a single test, so nothing races with it): the software rendezvous
//! reads the data in place from the shared segment or the tcp heap mapping (get over cma or
//! tcp, or pipelined active messages from a copy when there is no RMA lane).

mod mapped_send;

#[test]
fn ucp_mapped_send_delivers_without_offload() {
    std::env::set_var("RUCX_TM_ENABLE", "n");
    mapped_send::mapped_sends_deliver(false);
}
