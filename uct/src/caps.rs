//! Capabilities as data: what an interface can do, its limits, and its performance model.
//!
//! ucp reads these once per endpoint configuration to pick protocols and thresholds; a flag set
//! here is a promise that the operation works (the conformance suite checks it).

use bitflags::bitflags;

bitflags! {
    /// Interface capability flags, with UCX's names (`UCT_IFACE_FLAG_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct IfaceFlags: u64 {
        /// `am_short` / `am_short_iov`.
        const AM_SHORT = 1 << 0;
        /// `am_bcopy`.
        const AM_BCOPY = 1 << 1;
        /// `am_zcopy`.
        const AM_ZCOPY = 1 << 2;
        /// `put_short`.
        const PUT_SHORT = 1 << 4;
        /// `put_bcopy`.
        const PUT_BCOPY = 1 << 5;
        /// `put_zcopy`.
        const PUT_ZCOPY = 1 << 6;
        /// `get_short`.
        const GET_SHORT = 1 << 8;
        /// `get_bcopy`.
        const GET_BCOPY = 1 << 9;
        /// `get_zcopy`.
        const GET_ZCOPY = 1 << 10;
        /// Remote atomics are coherent with the CPU's own atomics on the target memory.
        const ATOMIC_CPU = 1 << 30;
        /// Remote atomics are atomic only with respect to other atomics of the same device.
        const ATOMIC_DEVICE = 1 << 31;
        /// Endpoints have a pending queue (`pending_add`).
        const PENDING = 1 << 34;
        /// Endpoints connect to a remote interface address (`ep_create_connected`).
        const CONNECT_TO_IFACE = 1 << 40;
        /// Endpoints connect to a remote endpoint address (`ep_create` + `connect_to_ep`).
        const CONNECT_TO_EP = 1 << 41;
        /// A peer's failure is reported as an endpoint error, and the interface keeps working.
        const ERRHANDLE_PEER_FAILURE = 1 << 43;
        /// Active-message handlers may be invoked from any thread (never set: we deliver in progress).
        const CB_ASYNC = 1 << 44;
        /// rucx's own: every operation finishes within its call and nothing arrives on the
        /// interface, so `progress` only maintains it (watches peers) and the layer above may
        /// poll it now and then instead of on every call.
        const SYNC_ONLY = 1 << 45;
        /// Tag offload: `tag_eager_short`.
        const TAG_EAGER_SHORT = 1 << 50;
        /// Tag offload: `tag_eager_bcopy`.
        const TAG_EAGER_BCOPY = 1 << 51;
        /// Tag offload: `tag_eager_zcopy`.
        const TAG_EAGER_ZCOPY = 1 << 52;
        /// Tag offload: `tag_rndv_zcopy`, `tag_rndv_cancel`, `tag_rndv_request`.
        const TAG_RNDV_ZCOPY = 1 << 53;
    }
}

bitflags! {
    /// Roles a transport takes when the layer above connects endpoints, declared by the
    /// transport itself ([`crate::Transport::ROLES`]) and known before any interface opens. ucp
    /// chooses transports for these roles by these flags, never by transport name.
    ///
    /// Each role follows from the connection flags the transport's interfaces announce, which
    /// `registry`'s tests check for every transport available on the machine.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct TlRoles: u32 {
        /// Connects endpoint to endpoint only (CONNECT_TO_EP without CONNECT_TO_IFACE): the
        /// peers must exchange endpoint addresses over another transport first, a wire-up
        /// helper (as UCX's rc needs ud).
        const NEEDS_WIREUP_HELPER = 1 << 0;
        /// Reaches other hosts and connects to a remote interface address (CONNECT_TO_IFACE
        /// on a network device), so it can carry the wire-up of a transport with
        /// [`TlRoles::NEEDS_WIREUP_HELPER`] (UCX's auxiliary transport).
        const WIREUP_HELPER = 1 << 1;
    }
}

bitflags! {
    /// Event capabilities (`UCT_IFACE_FLAG_EVENT_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EventFlags: u32 {
        /// Send completions raise events.
        const SEND_COMP = 1 << 0;
        /// Received messages raise events.
        const RECV = 1 << 1;
        /// The interface has an event file descriptor ([`crate::Iface::event_fd`]).
        const FD = 1 << 2;
    }
}

bitflags! {
    /// Atomic operations supported, for one operand size and one of post / fetch.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AtomicOps: u32 {
        /// Add.
        const ADD = 1 << 0;
        /// Bitwise and.
        const AND = 1 << 1;
        /// Bitwise or.
        const OR = 1 << 2;
        /// Bitwise xor.
        const XOR = 1 << 3;
        /// Swap (fetch only).
        const SWAP = 1 << 4;
        /// Compare-and-swap (fetch only).
        const CSWAP = 1 << 5;
    }
}

impl AtomicOps {
    /// The four operations that have a post (non-fetching) form.
    pub const POST_ALL: AtomicOps = AtomicOps::ADD
        .union(AtomicOps::AND)
        .union(AtomicOps::OR)
        .union(AtomicOps::XOR);
    /// Every fetching operation.
    pub const FETCH_ALL: AtomicOps = AtomicOps::POST_ALL
        .union(AtomicOps::SWAP)
        .union(AtomicOps::CSWAP);
}

/// Atomic capabilities of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicCaps {
    /// 32-bit post operations.
    pub op32: AtomicOps,
    /// 32-bit fetching operations (including swap and cswap).
    pub fop32: AtomicOps,
    /// 64-bit post operations.
    pub op64: AtomicOps,
    /// 64-bit fetching operations (including swap and cswap).
    pub fop64: AtomicOps,
}

/// Size limits of one family of operations. A limit of 0 means the operation is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpLimits {
    /// Largest payload of the `_short` form (for AM: header + payload excluding the AM id).
    pub max_short: usize,
    /// Largest payload of the `_bcopy` form.
    pub max_bcopy: usize,
    /// Smallest payload worth sending with `_zcopy`.
    pub min_zcopy: usize,
    /// Largest payload of the `_zcopy` form.
    pub max_zcopy: usize,
    /// Largest iov count of the `_zcopy` (and `_short_iov`) form.
    pub max_iov: usize,
    /// Largest user header of `am_zcopy` (AM family only).
    pub max_hdr: usize,
}

/// Tag-offload limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TagLimits {
    /// Largest `tag_eager_short` payload.
    pub eager_max_short: usize,
    /// Largest `tag_eager_bcopy` payload.
    pub eager_max_bcopy: usize,
    /// Largest `tag_eager_zcopy` payload.
    pub eager_max_zcopy: usize,
    /// Largest `tag_rndv_zcopy` header.
    pub rndv_max_hdr: usize,
    /// Largest message `tag_rndv_zcopy` can carry.
    pub rndv_max_zcopy: usize,
    /// Largest number of receives posted with `iface_tag_recv_zcopy` at once.
    pub recv_max_outstanding: usize,
    /// Largest iov count of a posted receive.
    pub recv_max_iov: usize,
    /// True when an eager message the transport matches lands in the posted buffer with one
    /// copy fewer than the active-message path would take (tcp `recv`s the payload straight
    /// into it). False when both paths copy once (shared memory): the layer above then gains
    /// nothing from posting small receives or sending eager messages by tag offload, only from
    /// rendezvous.
    pub eager_saves_copy: bool,
}

/// A linear performance model, in SI units: seconds and bytes per second.
///
/// The time to move `n` bytes one way is about
/// `send_overhead + latency + n / bandwidth + recv_overhead`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerfModel {
    /// Sender CPU time per operation, seconds.
    pub send_overhead: f64,
    /// Receiver CPU time per message, seconds.
    pub recv_overhead: f64,
    /// Wire or memory bandwidth, bytes per second.
    pub bandwidth: f64,
    /// One-way latency, seconds.
    pub latency: f64,
}

impl PerfModel {
    /// Estimated one-way time for `bytes` bytes, seconds.
    pub fn time_for(&self, bytes: usize) -> f64 {
        let bw = if self.bandwidth > 0.0 {
            bytes as f64 / self.bandwidth
        } else {
            0.0
        };
        self.send_overhead + self.latency + bw + self.recv_overhead
    }
}

/// Everything an interface tells about itself (`uct_iface_attr_t`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IfaceAttr {
    /// Operations supported.
    pub flags: IfaceFlags,
    /// Event capabilities.
    pub event_flags: EventFlags,
    /// Atomics supported.
    pub atomics: AtomicCaps,
    /// Active-message limits.
    pub am: OpLimits,
    /// Put limits.
    pub put: OpLimits,
    /// Get limits.
    pub get: OpLimits,
    /// Tag-offload limits (all zero without tag offload).
    pub tag: TagLimits,
    /// Length of the device address.
    pub device_addr_len: usize,
    /// Length of the interface address (0 without CONNECT_TO_IFACE).
    pub iface_addr_len: usize,
    /// Length of an endpoint address (0 without CONNECT_TO_EP).
    pub ep_addr_len: usize,
    /// Performance model.
    pub perf: PerfModel,
    /// Priority among interfaces of equal performance (higher wins).
    pub priority: u8,
}

bitflags! {
    /// Memory-domain capability flags (`UCT_MD_FLAG_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MdFlags: u32 {
        /// `mem_alloc` gives memory peers can access.
        const ALLOC = 1 << 0;
        /// `mem_reg` registers existing memory.
        const REG = 1 << 1;
        /// Remote access needs an rkey from this domain.
        const NEED_RKEY = 1 << 3;
        /// A peer can map the remote memory and access it with loads and stores.
        const RKEY_PTR = 1 << 6;
    }
}

/// Memory-domain attributes (`uct_md_attr_t`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MdAttr {
    /// Capabilities.
    pub flags: MdFlags,
    /// Largest `mem_alloc`.
    pub max_alloc: usize,
    /// Largest `mem_reg`.
    pub max_reg: usize,
    /// Upper bound on a packed rkey's size.
    pub rkey_packed_size: usize,
    /// Registration cost: fixed seconds plus seconds per byte.
    pub reg_cost: (f64, f64),
}

/// The kind of device a transport runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// A network device (tcp, verbs).
    Net,
    /// Shared memory between processes of one host.
    Shm,
    /// Loopback inside one process.
    SelfLoop,
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceType::Net => "network",
            DeviceType::Shm => "intra-node",
            DeviceType::SelfLoop => "loopback",
        })
    }
}
