//! Cache prefetch hints: the CPU is asked to bring a line closer before it is read or
//! written. Transports use them on their receive and send paths, and lend them to callers that
//! copy out of transport buffers (ucp's eager copy). Hints never fault and change no memory;
//! off x86-64 they do nothing.

/// Asks the CPU to start reading the line at `p` into this core's cache (any address: a hint
/// never faults). Does nothing off x86-64.
#[inline(always)]
pub fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address, and changes no
    // memory or flags.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Proof that this CPU has `prefetchw` (CPUID 8000_0001h ECX bit 8): only
/// [`PrefetchW::detect`] makes one.
#[derive(Debug, Clone, Copy)]
pub struct PrefetchW(());

impl PrefetchW {
    /// `Some` when the CPU has `prefetchw` (the CPUID answer is kept after the first look).
    pub fn detect() -> Option<PrefetchW> {
        has_prefetchw().then_some(PrefetchW(()))
    }

    /// `prefetchw` of the line at `p` (any address: a hint never faults).
    #[inline(always)]
    pub fn prefetch(self, p: *const u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the instruction (this value exists); a prefetch is a hint: it
        // never faults, whatever the address, and changes no memory or flags.
        unsafe {
            std::arch::asm!(
                "prefetchw [{0}]",
                in(reg) p,
                options(nostack, preserves_flags, readonly)
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

/// Whether the CPU has `prefetchw`; the answer is kept after the first look.
#[cfg(target_arch = "x86_64")]
fn has_prefetchw() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    /// 0: not looked yet, 1: no, 2: yes.
    static HAS: AtomicU8 = AtomicU8::new(0);
    match HAS.load(Ordering::Relaxed) {
        0 => {
            let yes = prefetchw_cpuid();
            HAS.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
        v => v == 2,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn has_prefetchw() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn prefetchw_cpuid() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: cpuid exists on every x86_64 CPU; leaf 0x8000_0000 gives the highest extended
    // leaf, and 0x8000_0001 is asked only when it exists.
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUID bit looked at is the one Linux names `3dnowprefetch`.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn prefetchw_detection_agrees_with_the_kernel() {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .expect("a flags line in /proc/cpuinfo");
        let kernel = flags.split_whitespace().any(|f| f == "3dnowprefetch");
        assert_eq!(PrefetchW::detect().is_some(), kernel);
        // Asked twice: the kept answer is the same.
        assert_eq!(PrefetchW::detect().is_some(), kernel);
    }

    #[test]
    fn hints_at_any_address_change_nothing() {
        let line = [7u8; 64];
        prefetch_read(line.as_ptr());
        prefetch_read(std::ptr::null());
        if let Some(cpu) = PrefetchW::detect() {
            cpu.prefetch(line.as_ptr());
            cpu.prefetch(std::ptr::null());
        }
        assert_eq!(line, [7u8; 64]);
    }
}
