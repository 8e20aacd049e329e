//! Check of `ucs::codec` itself: a layout described by the input's first bytes is read with a
//! `Reader`, which must never panic, must fail only with a `WireError` naming the structure,
//! and, when it succeeds, must read back what a `Writer` writes for the same values.

use ucs::codec::{Reader, WireError, Writer};

/// One field read.
#[derive(Debug, Clone, PartialEq)]
enum Field<'a> {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    Var(u64),
    VarBytes(&'a [u8]),
    Bytes(&'a [u8]),
}

/// Reads `layout` (two bits per field: the first byte of the input says how many fields, the
/// next two the kinds) from `body`.
fn read<'a>(kinds: &[u8], body: &'a [u8]) -> Result<Vec<Field<'a>>, WireError> {
    let mut r = Reader::new(body, "fuzzed layout");
    let mut out = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        out.push(match k % 7 {
            0 => Field::U8(r.u8("u8")?),
            1 => Field::U16(r.u16("u16")?),
            2 => Field::U32(r.u32("u32")?),
            3 => Field::U64(r.u64("u64")?),
            4 => Field::Var(r.var("varint")?),
            5 => Field::VarBytes(r.var_bytes("bytes")?),
            _ => Field::Bytes(r.bytes(i % 13, "fixed bytes")?),
        });
        assert!(r.pos() <= body.len());
    }
    r.finish()?;
    Ok(out)
}

fn write(fields: &[Field<'_>]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut w = Writer::new(&mut v);
    for f in fields {
        match *f {
            Field::U8(x) => w.u8(x),
            Field::U16(x) => w.u16(x),
            Field::U32(x) => w.u32(x),
            Field::U64(x) => w.u64(x),
            Field::Var(x) => w.var(x),
            Field::VarBytes(b) => w.var_bytes(b),
            Field::Bytes(b) => w.bytes(b),
        };
    }
    v
}

/// The first byte is the number of fields (up to 15), the next that many bytes their kinds,
/// the rest the bytes to read. Returns 1 if the layout was read.
pub fn codec_reader(data: &[u8]) -> usize {
    let Some((&n, rest)) = data.split_first() else {
        return 0;
    };
    let n = (n as usize % 16).min(rest.len());
    let (kinds, body) = rest.split_at(n);
    match read(kinds, body) {
        Ok(fields) => {
            // Varints are accepted only in their shortest form, so writing the values back
            // gives the same bytes.
            assert_eq!(write(&fields), body, "codec: write(read(x)) != x");
            1
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("fuzzed layout"),
                "codec error without its structure: {text}"
            );
            let wire: ucs::Error = e.into();
            assert!(matches!(wire, ucs::Error::Wire(_)), "{wire:?}");
            0
        }
    }
}

pub(crate) fn codec_reader_seeds() -> Vec<Vec<u8>> {
    let fields = [
        Field::U8(7),
        Field::U16(0x0102),
        Field::U32(0x0304_0506),
        Field::U64(u64::MAX),
        Field::Var(300),
        Field::VarBytes(b"abc"),
        Field::Bytes(&[9; 6]),
    ];
    let mut seed = vec![fields.len() as u8, 0, 1, 2, 3, 4, 5, 6];
    seed.extend_from_slice(&write(&fields));
    vec![seed, vec![2, 4, 3, 0x80, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]]
}
