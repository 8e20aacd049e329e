//! Components and memory domains: `uct_query_components`, `uct_component_query`,
//! `uct_md_open` / `_close` / `_query`, `uct_md_query_tl_resources`, and the configuration
//! objects (`uct_md_config_read`, `uct_md_iface_config_read`, `uct_config_release`).
//!
//! Each rucx transport is a UCX component of the same name (`self`, `posix`, `sysv`, `cma`,
//! `tcp`; `rc_verbs` is UCX's `ib`). A component has one memory domain named after it, except
//! `ib`, which has one per RDMA device (`rxe0` for `rxe0:1`), as in UCX. A memory domain opens
//! rucx's domain of each of its devices when an interface first needs it; registration,
//! allocation and remote keys use the first device's.

use crate::ffi::*;
use crate::guard::{ffi, put_name, refuse, text};
use std::cell::RefCell;
use std::ffi::{c_char, c_uint, c_void};
use std::rc::Rc;
use uct::{AnyMd, DeviceInfo, DeviceType, MdFlags, MemoryDomain};

/// A UCX component: one rucx transport.
#[derive(Debug)]
pub struct Component {
    /// UCX's name for it.
    pub name: &'static str,
    /// The rucx transport.
    pub tl_name: &'static str,
}

/// The components, in the order `uct_query_components` lists them.
pub static COMPONENTS: [Component; 6] = [
    Component {
        name: "self",
        tl_name: "self",
    },
    Component {
        name: "tcp",
        tl_name: "tcp",
    },
    Component {
        name: "sysv",
        tl_name: "sysv",
    },
    Component {
        name: "posix",
        tl_name: "posix",
    },
    Component {
        name: "cma",
        tl_name: "cma",
    },
    Component {
        name: "ib",
        tl_name: "rc_verbs",
    },
];

impl Component {
    /// The component behind a C handle; `None` (logged) for anything else.
    pub fn from_handle(name: &str, h: *const c_void) -> Option<&'static Component> {
        let found = COMPONENTS
            .iter()
            .find(|c| std::ptr::eq(*c as *const Component as *const c_void, h));
        if found.is_none() {
            refuse(
                name,
                UCS_ERR_INVALID_PARAM,
                format!("{h:p} is not a component handle"),
            );
        }
        found
    }

    /// The component's devices here (none when the transport is unavailable).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        uct::registry::devices_of(self.tl_name).unwrap_or_default()
    }

    /// The memory domain a device belongs to.
    pub fn md_name_of(&self, device: &str) -> String {
        if self.tl_name == "rc_verbs" {
            device.split(':').next().unwrap_or(device).to_string()
        } else {
            self.name.to_string()
        }
    }

    /// The memory domains of this component here, each with its devices.
    pub fn md_resources(&self) -> Vec<(String, Vec<DeviceInfo>)> {
        let mut out: Vec<(String, Vec<DeviceInfo>)> = Vec::new();
        for d in self.devices() {
            let md = self.md_name_of(&d.name);
            match out.iter_mut().find(|(n, _)| *n == md) {
                Some((_, devs)) => devs.push(d),
                None => out.push((md, vec![d])),
            }
        }
        out
    }

    /// The C handle.
    pub fn handle(&'static self) -> *mut c_void {
        self as *const Component as *mut c_void
    }
}

/// A memory domain (`uct_md_h`).
pub struct Md {
    /// Its component.
    pub component: &'static Component,
    /// Its name.
    pub name: String,
    /// Its devices.
    pub devices: Vec<DeviceInfo>,
    /// rucx's domain of each device opened so far; the first is the primary.
    mds: RefCell<Vec<(String, Rc<AnyMd>)>>,
}

impl Md {
    /// rucx's domain serving `device`, opened on first use.
    pub fn for_device(&self, device: &str) -> ucs::Result<Rc<AnyMd>> {
        if let Some((_, m)) = self.mds.borrow().iter().find(|(d, _)| d == device) {
            return Ok(Rc::clone(m));
        }
        let m = Rc::new(AnyMd::open(self.component.tl_name, device)?);
        self.mds
            .borrow_mut()
            .push((device.to_string(), Rc::clone(&m)));
        Ok(m)
    }

    /// The domain registration, allocation and remote keys use (the first device's).
    pub fn primary(&self) -> Rc<AnyMd> {
        if let Some((_, m)) = self.mds.borrow().first() {
            return Rc::clone(m);
        }
        let first = self.devices[0].name.clone();
        self.for_device(&first).expect("opened at uct_md_open")
    }

    /// The domain behind a C handle.
    ///
    /// # Safety
    /// `h` must be NULL or a handle from [`uct_md_open`] not yet closed.
    pub unsafe fn from_handle<'a>(name: &str, h: *mut c_void) -> Option<&'a Md> {
        if h.is_null() {
            refuse(name, UCS_ERR_INVALID_PARAM, "NULL memory domain");
            return None;
        }
        // SAFETY: the caller passes a live handle from uct_md_open.
        Some(unsafe { &*h.cast::<Md>() })
    }
}

/// The UCX device type of a rucx device.
pub fn device_type(t: DeviceType) -> u32 {
    match t {
        DeviceType::Net => UCT_DEVICE_TYPE_NET,
        DeviceType::Shm => UCT_DEVICE_TYPE_SHM,
        DeviceType::SelfLoop => UCT_DEVICE_TYPE_SELF,
    }
}

/// `ucs_status_t uct_query_components(uct_component_h **components_p, unsigned *num_p)`: every
/// component, in an array the caller frees with `uct_release_component_list`.
///
/// # Safety
/// Both pointers must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_query_components(
    components_p: *mut *mut *mut c_void,
    num_p: *mut c_uint,
) -> Status {
    ffi("uct_query_components", UCS_ERR_NO_MEMORY, || {
        if components_p.is_null() || num_p.is_null() {
            return refuse(
                "uct_query_components",
                UCS_ERR_INVALID_PARAM,
                "NULL output pointer",
            );
        }
        let n = COMPONENTS.len();
        // SAFETY: plain allocation of n pointers.
        let arr =
            unsafe { libc::malloc(n * std::mem::size_of::<*mut c_void>()) }.cast::<*mut c_void>();
        if arr.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        for (i, c) in COMPONENTS.iter().enumerate() {
            // SAFETY: arr has n entries.
            unsafe { *arr.add(i) = c.handle() };
        }
        // SAFETY: checked non-null above.
        unsafe {
            *components_p = arr;
            *num_p = n as c_uint;
        }
        UCS_OK
    })
}

/// `void uct_release_component_list(uct_component_h *components)`.
///
/// # Safety
/// `components` must come from [`uct_query_components`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn uct_release_component_list(components: *mut *mut c_void) {
    // SAFETY: the array came from malloc.
    unsafe { libc::free(components.cast()) }
}

/// `ucs_status_t uct_component_query(uct_component_h component, uct_component_attr_t *attr)`:
/// the fields `attr->field_mask` asks for; with `MD_RESOURCES`, the caller's array must hold
/// `md_resource_count` entries (from an earlier query).
///
/// # Safety
/// `attr` must point to a `uct_component_attr_t`.
#[no_mangle]
pub unsafe extern "C" fn uct_component_query(
    component: *mut c_void,
    attr: *mut uct_component_attr_t,
) -> Status {
    const NAME: &str = "uct_component_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        let Some(c) = Component::from_handle(NAME, component) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL attributes");
        }
        // SAFETY: checked non-null; the caller owns the struct.
        let attr = unsafe { &mut *attr };
        let mask = attr.field_mask;
        let mds = c.md_resources();
        if mask & UCT_COMPONENT_ATTR_FIELD_NAME != 0 {
            put_name(&mut attr.name, c.name);
        }
        if mask & UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT != 0 {
            attr.md_resource_count = mds.len() as c_uint;
        }
        if mask & UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES != 0 && !mds.is_empty() {
            if attr.md_resources.is_null() {
                return refuse(NAME, UCS_ERR_INVALID_PARAM, "md_resources is NULL");
            }
            for (i, (name, _)) in mds.iter().enumerate() {
                // SAFETY: the caller sized the array from MD_RESOURCE_COUNT.
                put_name(unsafe { &mut (*attr.md_resources.add(i)).md_name }, name);
            }
        }
        if mask & UCT_COMPONENT_ATTR_FIELD_FLAGS != 0 {
            attr.flags = 0; // no connection manager
        }
        UCS_OK
    })
}

/// A configuration object (`uct_md_config_t`, `uct_iface_config_t`). rucx's transports read
/// their settings from `RUCX_*` variables when they open, so the object has no fields:
/// `uct_config_get` and `uct_config_modify` answer `UCS_ERR_NO_ELEM` for every name.
pub struct Config {
    /// What it configures, for log lines.
    pub what: String,
}

fn new_config(what: String, config_p: *mut *mut c_void) -> Status {
    if config_p.is_null() {
        return refuse(
            "uct config read",
            UCS_ERR_INVALID_PARAM,
            "NULL output pointer",
        );
    }
    let c = Box::into_raw(Box::new(Config { what }));
    // SAFETY: checked non-null.
    unsafe { *config_p = c.cast() };
    UCS_OK
}

/// `ucs_status_t uct_md_config_read(uct_component_h, const char *env_prefix,
/// const char *filename, uct_md_config_t **config_p)`.
///
/// # Safety
/// `config_p` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_md_config_read(
    component: *mut c_void,
    _env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut c_void,
) -> Status {
    ffi("uct_md_config_read", UCS_ERR_NO_MEMORY, || {
        let Some(c) = Component::from_handle("uct_md_config_read", component) else {
            return UCS_ERR_INVALID_PARAM;
        };
        new_config(format!("memory domain of {}", c.name), config_p)
    })
}

/// `ucs_status_t uct_md_iface_config_read(uct_md_h md, const char *tl_name,
/// const char *env_prefix, const char *filename, uct_iface_config_t **config_p)`: refuses a
/// transport the domain does not serve.
///
/// # Safety
/// `md` must be a live domain; `tl_name` a C string; `config_p` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_md_iface_config_read(
    md: *mut c_void,
    tl_name: *const c_char,
    _env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_md_iface_config_read";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded from the caller.
        let Some(md) = (unsafe { Md::from_handle(NAME, md) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: forwarded from the caller.
        match unsafe { text(tl_name) } {
            Some(tl) if tl == md.component.tl_name => {
                new_config(format!("interface of {tl}"), config_p)
            }
            Some(tl) => refuse(
                NAME,
                UCS_ERR_NO_DEVICE,
                format!(
                    "memory domain {} serves transport {}, not '{tl}'",
                    md.name, md.component.tl_name
                ),
            ),
            None => refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL transport name"),
        }
    })
}

/// `void uct_config_release(void *config)`.
///
/// # Safety
/// `config` must come from a config-read call (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn uct_config_release(config: *mut c_void) {
    if !config.is_null() {
        // SAFETY: made by Box::into_raw in new_config.
        drop(unsafe { Box::from_raw(config.cast::<Config>()) });
    }
}

/// `ucs_status_t uct_config_get(void *config, const char *name, char *value, size_t max)`.
///
/// # Safety
/// `config` from a config-read call; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn uct_config_get(
    config: *mut c_void,
    name: *const c_char,
    _value: *mut c_char,
    _max: usize,
) -> Status {
    config_field("uct_config_get", config, name)
}

/// `ucs_status_t uct_config_modify(void *config, const char *name, const char *value)`.
///
/// # Safety
/// `config` from a config-read call; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn uct_config_modify(
    config: *mut c_void,
    name: *const c_char,
    _value: *const c_char,
) -> Status {
    config_field("uct_config_modify", config, name)
}

fn config_field(func: &str, config: *mut c_void, name: *const c_char) -> Status {
    ffi(func, UCS_ERR_NO_ELEM, || {
        if config.is_null() {
            return refuse(func, UCS_ERR_INVALID_PARAM, "NULL configuration");
        }
        // SAFETY: the caller passes a config from a config-read call and a C string.
        let (c, n) = unsafe { (&*config.cast::<Config>(), text(name).unwrap_or_default()) };
        refuse(
            func,
            UCS_ERR_NO_ELEM,
            format!(
                "the {} configuration has no field '{n}' (rucx's transports read RUCX_* \
                 variables: see rucx-info -c)",
                c.what
            ),
        )
    })
}

/// `ucs_status_t uct_md_open(uct_component_h component, const char *md_name,
/// const uct_md_config_t *config, uct_md_h *md_p)`.
///
/// # Safety
/// `md_name` must be a C string and `md_p` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_md_open(
    component: *mut c_void,
    md_name: *const c_char,
    _config: *const c_void,
    md_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_md_open";
    ffi(NAME, UCS_ERR_NO_DEVICE, || {
        let Some(c) = Component::from_handle(NAME, component) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: forwarded from the caller.
        let (Some(want), false) = (unsafe { text(md_name) }, md_p.is_null()) else {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL name or output pointer");
        };
        let resources = c.md_resources();
        let Some((name, devices)) = resources.into_iter().find(|(n, _)| *n == want) else {
            return refuse(
                NAME,
                UCS_ERR_NO_DEVICE,
                format!("component {} has no memory domain '{want}' here", c.name),
            );
        };
        let md = Md {
            component: c,
            name,
            devices,
            mds: RefCell::new(Vec::new()),
        };
        let first = md.devices[0].name.clone();
        if let Err(e) = md.for_device(&first) {
            return crate::guard::fail(NAME, &e);
        }
        // SAFETY: checked non-null.
        unsafe { *md_p = Box::into_raw(Box::new(md)).cast() };
        UCS_OK
    })
}

/// `void uct_md_close(uct_md_h md)`: interfaces and memory of the domain must be gone first.
///
/// # Safety
/// `md` must come from [`uct_md_open`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn uct_md_close(md: *mut c_void) {
    if !md.is_null() {
        // SAFETY: made by Box::into_raw in uct_md_open.
        drop(unsafe { Box::from_raw(md.cast::<Md>()) });
    }
}

/// `ucs_status_t uct_md_query_tl_resources(uct_md_h md, uct_tl_resource_desc_t **resources_p,
/// unsigned *num_p)`: the domain's transport on each of its devices, in an array the caller
/// frees with `uct_release_tl_resource_list`.
///
/// # Safety
/// `md` must be live; the output pointers valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_md_query_tl_resources(
    md: *mut c_void,
    resources_p: *mut *mut uct_tl_resource_desc_t,
    num_p: *mut c_uint,
) -> Status {
    const NAME: &str = "uct_md_query_tl_resources";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded from the caller.
        let Some(md) = (unsafe { Md::from_handle(NAME, md) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if resources_p.is_null() || num_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL output pointer");
        }
        let n = md.devices.len();
        let size = std::mem::size_of::<uct_tl_resource_desc_t>();
        // SAFETY: plain allocation (at least one entry, so malloc never returns a unique NULL).
        let arr = unsafe { libc::calloc(n.max(1), size) }.cast::<uct_tl_resource_desc_t>();
        if arr.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        for (i, d) in md.devices.iter().enumerate() {
            // SAFETY: arr has n zeroed entries.
            let r = unsafe { &mut *arr.add(i) };
            put_name(&mut r.tl_name, md.component.tl_name);
            put_name(&mut r.dev_name, &d.name);
            r.dev_type = device_type(d.dev_type);
            r.sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
        }
        // SAFETY: checked non-null.
        unsafe {
            *resources_p = arr;
            *num_p = n as c_uint;
        }
        UCS_OK
    })
}

/// `void uct_release_tl_resource_list(uct_tl_resource_desc_t *resources)`.
///
/// # Safety
/// `resources` must come from [`uct_md_query_tl_resources`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn uct_release_tl_resource_list(resources: *mut uct_tl_resource_desc_t) {
    // SAFETY: the array came from calloc.
    unsafe { libc::free(resources.cast()) }
}

/// Bytes before a packed remote key in UCX's buffer: its length (u32, little-endian).
pub const RKEY_HEADER: usize = 4;

/// `ucs_status_t uct_md_query(uct_md_h md, uct_md_attr_t *md_attr)`. Every domain registers
/// host memory for its own zero-copy operations, and zero-copy needs a memory handle
/// (`NEED_MEMH`); `REG` means registered memory also gets a remote key.
///
/// # Safety
/// `md` must be live and `md_attr` point to a `uct_md_attr_t`.
#[no_mangle]
pub unsafe extern "C" fn uct_md_query(md: *mut c_void, md_attr: *mut uct_md_attr_t) -> Status {
    const NAME: &str = "uct_md_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        // SAFETY: forwarded from the caller.
        let Some(md) = (unsafe { Md::from_handle(NAME, md) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if md_attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL attributes");
        }
        let m = md.primary();
        let a = m.attr();
        let mut flags = UCT_MD_FLAG_NEED_MEMH;
        for (r, u) in [
            (MdFlags::ALLOC, UCT_MD_FLAG_ALLOC),
            (MdFlags::REG, UCT_MD_FLAG_REG),
            (MdFlags::NEED_RKEY, UCT_MD_FLAG_NEED_RKEY),
            (MdFlags::RKEY_PTR, UCT_MD_FLAG_RKEY_PTR),
        ] {
            if a.flags.contains(r) {
                flags |= u;
            }
        }
        let host = 1u64 << UCS_MEMORY_TYPE_HOST;
        let cap = uct_md_cap_t {
            max_alloc: if a.flags.contains(MdFlags::ALLOC) {
                a.max_alloc as u64
            } else {
                0
            },
            max_reg: if a.max_reg == 0 {
                usize::MAX
            } else {
                a.max_reg
            },
            flags,
            reg_mem_types: host,
            detect_mem_types: 0,
            alloc_mem_types: if a.flags.contains(MdFlags::ALLOC) {
                host
            } else {
                0
            },
            access_mem_types: host,
        };
        let mut local_cpus = [0u8; 128];
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.clamp(1, 1024) as usize;
        for cpu in 0..cpus {
            local_cpus[cpu / 8] |= 1 << (cpu % 8);
        }
        // SAFETY: checked non-null; the caller owns the struct.
        let out = unsafe { &mut *md_attr };
        out.cap = cap;
        out.reg_cost = ucs_linear_func_t {
            c: a.reg_cost.0,
            m: a.reg_cost.1,
        };
        put_name(&mut out.component_name, md.component.name);
        out.rkey_packed_size = RKEY_HEADER + a.rkey_packed_size;
        out.local_cpus = local_cpus;
        UCS_OK
    })
}

/// `int uct_md_is_sockaddr_accessible(uct_md_h, const ucs_sock_addr_t *, mode)`: 0, no rucx
/// domain connects by socket address at this layer.
#[no_mangle]
pub extern "C" fn uct_md_is_sockaddr_accessible(
    _md: *mut c_void,
    _sockaddr: *const c_void,
    _mode: u32,
) -> i32 {
    0
}

/// `const char *uct_device_type_names[]`: network, intra-node, accelerator, loopback.
#[no_mangle]
pub static uct_device_type_names: Names<4> = Names([
    c"network".as_ptr(),
    c"intra-node".as_ptr(),
    c"accelerator".as_ptr(),
    c"loopback".as_ptr(),
]);

/// `const char *uct_alloc_method_names[]`: thp, md, heap, mmap, huge, then NULL.
#[no_mangle]
pub static uct_alloc_method_names: Names<6> = Names([
    c"thp".as_ptr(),
    c"md".as_ptr(),
    c"heap".as_ptr(),
    c"mmap".as_ptr(),
    c"huge".as_ptr(),
    std::ptr::null(),
]);

/// An array of static C strings, shareable between threads.
#[repr(transparent)]
pub struct Names<const N: usize>(pub [*const c_char; N]);

// SAFETY: the pointers are to static, immutable NUL-terminated strings.
unsafe impl<const N: usize> Sync for Names<N> {}
