//! Test helpers shared by the verbs transports' tests (rc_verbs and ud_verbs): the device to
//! run on, a recording sink, and the interface pair of a conformance fixture.

use crate::ep::{CompletionId, EpId, PendingId};
use crate::iface::{EventSink, IfaceParams};
use crate::Transport;
use ucs::{Error, Result};

/// The first device of transport `T`, or `None` with a note saying why the test is skipped
/// (no device: the tests run for real in the Soft-RoCE VM).
pub(crate) fn device<T: Transport>() -> Option<String> {
    match T::devices() {
        Ok(d) => Some(d[0].name.clone()),
        Err(why) => {
            println!("note: skipped, no {} device here: {why}", T::NAME);
            None
        }
    }
}

/// A sink that records active messages, completions, `get_bcopy` data, retries and errors.
#[derive(Default)]
pub(crate) struct Sink {
    pub(crate) ams: Vec<(u8, Vec<u8>)>,
    pub(crate) comps: Vec<(u64, Result<u64>)>,
    pub(crate) gets: Vec<(u64, Vec<u8>)>,
    pub(crate) errors: Vec<(EpId, Error)>,
    pub(crate) pend: Vec<(EpId, u64)>,
}

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.comps.push((comp.0, result));
    }
    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        self.gets.push((comp.0, data.to_vec()));
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.pend.push((ep, req.0));
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

/// The interfaces of a conformance fixture of transport `T`, each with its memory domain, on
/// the transport's first device. Without a device, `open` gives `NoDevice` and the suite
/// skips with a note.
pub(crate) struct Sides<T: Transport> {
    sides: Vec<(T::Iface, T::Md)>,
    device: String,
}

impl<T: Transport> Sides<T> {
    /// Two interfaces on the first device.
    pub(crate) fn open() -> Result<Self> {
        let devices = T::devices()
            .map_err(|why| Error::NoDevice(format!("{} is unavailable: {why}", T::NAME)))?;
        let device = devices[0].name.clone();
        let sides = vec![Self::open_side(&device)?, Self::open_side(&device)?];
        Ok(Sides { sides, device })
    }

    fn open_side(device: &str) -> Result<(T::Iface, T::Md)> {
        let md = T::open_md(device)?;
        let iface = T::open_iface(
            &md,
            &IfaceParams {
                device: device.to_owned(),
                ..Default::default()
            },
        )?;
        Ok((iface, md))
    }

    /// Number of interfaces open.
    pub(crate) fn len(&self) -> usize {
        self.sides.len()
    }
    /// Opens one more interface on the same device; gives its index.
    pub(crate) fn add(&mut self) -> Result<usize> {
        let side = Self::open_side(&self.device)?;
        self.sides.push(side);
        Ok(self.sides.len() - 1)
    }
    /// Interface `i`.
    pub(crate) fn iface(&mut self, i: usize) -> &mut T::Iface {
        &mut self.sides[i].0
    }
    /// Interface `i`, shared.
    pub(crate) fn iface_ref(&self, i: usize) -> &T::Iface {
        &self.sides[i].0
    }
    /// The memory domain of interface `i`.
    pub(crate) fn md(&self, i: usize) -> &T::Md {
        &self.sides[i].1
    }
}
