//! Configuration from `RUCX_*` environment variables, with UCX's names and value syntax.
//!
//! Each layer declares its variables as a `static` table of [`ConfigVar`] and registers it in the
//! global list ([`ALL_VARS`] is the explicit registry); values are read with the typed getters,
//! which fall back to the declared default and return a [`Error::Config`] naming the variable, the
//! value and what is accepted when the value does not parse.

use crate::status::{Error, Result};
use std::time::Duration;

/// Prefix of every rucx environment variable.
pub const PREFIX: &str = "RUCX_";

/// One configuration variable: its name without the `RUCX_` prefix, default value and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigVar {
    /// Name without the prefix, as UCX spells it (`TLS`, `NET_DEVICES`, `RNDV_THRESH`…).
    pub name: &'static str,
    /// Default value in the variable's own syntax.
    pub default: &'static str,
    /// One line on what it does and what it accepts.
    pub doc: &'static str,
}

/// A size value: a byte count or `inf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Size {
    /// A number of bytes.
    Bytes(u64),
    /// Unlimited (`inf`).
    Inf,
}

impl Size {
    /// The byte count, with `inf` as `u64::MAX`.
    pub fn bytes(self) -> u64 {
        match self {
            Size::Bytes(b) => b,
            Size::Inf => u64::MAX,
        }
    }
}

/// Parses UCX's size syntax: `123`, `8k`, `8K`, `8kb`, `1m`, `2g`, `inf`.
pub fn parse_size(text: &str) -> std::result::Result<Size, String> {
    let t = text.trim().to_ascii_lowercase();
    if t == "inf" || t == "infinity" {
        return Ok(Size::Inf);
    }
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1u64 << 20),
        Some('g') => (&t[..t.len() - 1], 1u64 << 30),
        Some('t') => (&t[..t.len() - 1], 1u64 << 40),
        _ => (t, 1),
    };
    let n: u64 = digits.parse().map_err(|_| {
        format!(
            "'{text}' is not a size (accepted: a number with an optional k/m/g/t suffix, or inf)"
        )
    })?;
    n.checked_mul(mult)
        .map(Size::Bytes)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Parses UCX's boolean syntax: `y/yes/on/1/true` and `n/no/off/0/false`.
pub fn parse_bool(text: &str) -> std::result::Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "on" | "1" | "true" => Ok(true),
        "n" | "no" | "off" | "0" | "false" => Ok(false),
        _ => Err(format!(
            "'{text}' is not a boolean (accepted: y, yes, on, 1, n, no, off, 0)"
        )),
    }
}

/// Parses UCX's time syntax: `10ms`, `1s`, `500us`, `100ns`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim().to_ascii_lowercase();
    let err = || format!("'{text}' is not a time (accepted: a number with ns, us, ms, s, m or h)");
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| err())?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value * 1e-3,
        "us" => value * 1e-6,
        "ns" => value * 1e-9,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(err()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a comma-separated list; empty items are dropped.
pub fn parse_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl ConfigVar {
    /// The full environment variable name (`RUCX_` + name).
    pub fn env_name(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }

    /// The value in force: the environment's, or the default.
    pub fn raw(&self) -> String {
        std::env::var(self.env_name()).unwrap_or_else(|_| self.default.to_owned())
    }

    /// True when the environment sets this variable.
    pub fn is_set(&self) -> bool {
        std::env::var_os(self.env_name()).is_some()
    }

    fn bad(&self, value: &str, why: String) -> Error {
        Error::Config(format!("{}={value:?}: {why}", self.env_name()))
    }

    /// The value as a [`Size`].
    pub fn size(&self) -> Result<Size> {
        let v = self.raw();
        parse_size(&v).map_err(|why| self.bad(&v, why))
    }

    /// The value as a boolean.
    pub fn bool(&self) -> Result<bool> {
        let v = self.raw();
        parse_bool(&v).map_err(|why| self.bad(&v, why))
    }

    /// The value as a duration.
    pub fn duration(&self) -> Result<Duration> {
        let v = self.raw();
        parse_duration(&v).map_err(|why| self.bad(&v, why))
    }

    /// The value as a comma-separated list (`all` and an empty value both give an empty list).
    pub fn list(&self) -> Vec<String> {
        let v = self.raw();
        if v.trim().eq_ignore_ascii_case("all") {
            Vec::new()
        } else {
            parse_list(&v)
        }
    }

    /// The value as an unsigned integer, or `None` for `auto`.
    pub fn uint_or_auto(&self) -> Result<Option<u64>> {
        let v = self.raw();
        if v.trim().eq_ignore_ascii_case("auto") {
            return Ok(None);
        }
        v.trim()
            .parse()
            .map(Some)
            .map_err(|_| self.bad(&v, "accepted: a non-negative integer or auto".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8k"), Ok(Size::Bytes(8192)));
        assert_eq!(parse_size("8KB"), Ok(Size::Bytes(8192)));
        assert_eq!(parse_size("1m"), Ok(Size::Bytes(1 << 20)));
        assert_eq!(parse_size("inf"), Ok(Size::Inf));
        assert_eq!(parse_size("17"), Ok(Size::Bytes(17)));
        assert!(parse_size("8q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn bools_and_times() {
        assert_eq!(parse_bool("y"), Ok(true));
        assert_eq!(parse_bool("off"), Ok(false));
        assert!(parse_bool("maybe").is_err());
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("10 parsecs").is_err());
    }

    #[test]
    fn bad_value_names_variable_and_value() {
        static V: ConfigVar = ConfigVar {
            name: "TEST_CFG_BAD_SIZE",
            default: "1k",
            doc: "test",
        };
        std::env::set_var("RUCX_TEST_CFG_BAD_SIZE", "12zz");
        let err = V.size().unwrap_err().to_string();
        std::env::remove_var("RUCX_TEST_CFG_BAD_SIZE");
        assert!(err.contains("RUCX_TEST_CFG_BAD_SIZE"), "{err}");
        assert!(err.contains("12zz"), "{err}");
        assert!(err.contains("accepted"), "{err}");
        assert_eq!(V.size(), Ok(Size::Bytes(1024)));
    }
}
