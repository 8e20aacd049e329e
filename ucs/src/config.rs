//! Configuration from `RUCX_*` environment variables, with UCX's names and value syntax.
//!
//! Each layer declares its variables as a `static` table of [`ConfigVar`] and registers it in the
//! global list with [`register`] (idempotent); [`all_vars`] lists every registered variable (for
//! `rucx-info -c`) and [`check_unknown_env`] warns about `RUCX_*` variables nobody registered,
//! naming the closest known one. Values are read with the typed getters, which fall back to the
//! declared default and return a [`Error::Config`] naming the variable, the value and what is
//! accepted when the value does not parse.

use crate::status::{Error, Result};
use std::sync::{Mutex, Once};
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

    /// The value as a duration, or `None` for `inf`.
    pub fn duration_or_inf(&self) -> Result<Option<Duration>> {
        let v = self.raw();
        if v.trim().eq_ignore_ascii_case("inf") {
            return Ok(None);
        }
        self.duration().map(Some)
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

/// The registered variable tables, in registration order.
static REGISTRY: Mutex<Vec<&'static [ConfigVar]>> = Mutex::new(Vec::new());
static UCS_REGISTERED: Once = Once::new();

fn registry() -> std::sync::MutexGuard<'static, Vec<&'static [ConfigVar]>> {
    // A panic while holding the lock cannot leave the list inconsistent (pushes are atomic
    // with respect to it), so a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a layer's variables so [`all_vars`] lists them and [`check_unknown_env`] knows
/// them. Registering the same table again does nothing. ucs's own variables ([`crate::UCS_VARS`]) are
/// registered automatically.
pub fn register(vars: &'static [ConfigVar]) {
    ensure_ucs_registered();
    register_table(vars);
}

fn register_table(vars: &'static [ConfigVar]) {
    let mut reg = registry();
    if !reg
        .iter()
        .any(|t| std::ptr::eq(t.as_ptr(), vars.as_ptr()) && t.len() == vars.len())
    {
        reg.push(vars);
    }
}

fn ensure_ucs_registered() {
    UCS_REGISTERED.call_once(|| register_table(&crate::UCS_VARS));
}

/// Every registered variable, in registration order (ucs's first); a name registered twice is
/// listed once, with its first definition.
pub fn all_vars() -> Vec<ConfigVar> {
    ensure_ucs_registered();
    let reg = registry();
    let mut out: Vec<ConfigVar> = Vec::new();
    for var in reg.iter().flat_map(|t| t.iter()) {
        if !out.iter().any(|v| v.name == var.name) {
            out.push(*var);
        }
    }
    out
}

/// The registered variable called `name` (with or without the `RUCX_` prefix).
pub fn find(name: &str) -> Option<ConfigVar> {
    let name = name.strip_prefix(PREFIX).unwrap_or(name);
    all_vars().into_iter().find(|v| v.name == name)
}

/// Levenshtein distance between two ASCII-insensitive strings.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_uppercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_uppercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The registered variable closest to `name` (without prefix), if one is close enough to be a
/// plausible misspelling: at most a third of the name's length away, and at least 2 edits
/// allowed.
fn closest(name: &str, known: &[ConfigVar]) -> Option<&'static str> {
    let limit = (name.len() / 3).max(2);
    known
        .iter()
        .map(|v| (edit_distance(name, v.name), v.name))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, n)| (d, n))
        .map(|(_, n)| n)
}

/// Of the given environment variable names, those that start with `RUCX_` but are not
/// registered, each with the closest registered name (full, with prefix) if one is near.
pub fn unknown_vars<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<(String, Option<String>)> {
    let known = all_vars();
    let mut out = Vec::new();
    for full in names {
        let Some(name) = full.strip_prefix(PREFIX) else {
            continue;
        };
        if known.iter().any(|v| v.name == name) {
            continue;
        }
        out.push((
            full.to_owned(),
            closest(name, &known).map(|n| format!("{PREFIX}{n}")),
        ));
    }
    out.sort();
    out
}

/// The `RUCX_*` environment variables that no layer registered, each with the closest
/// registered name ([`unknown_vars`] over this process's environment), without logging.
pub fn unknown_env() -> Vec<(String, Option<String>)> {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    unknown_vars(names.iter().map(String::as_str))
}

/// Warns (through `tracing`) about each `RUCX_*` environment variable that no layer registered,
/// naming the closest known one, and returns them as (unknown, suggestion) pairs. Call it after
/// every layer in use has registered its variables.
pub fn check_unknown_env() -> Vec<(String, Option<String>)> {
    let unknown = unknown_env();
    for (name, suggestion) in &unknown {
        match suggestion {
            Some(s) => tracing::warn!("unknown environment variable {name}; did you mean {s}?"),
            None => tracing::warn!(
                "unknown environment variable {name}; `rucx-info -c` lists the known ones"
            ),
        }
    }
    unknown
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
    #[test]
    fn registry_lists_ucs_vars_and_is_idempotent() {
        static EXTRA: [ConfigVar; 2] = [
            ConfigVar {
                name: "TEST_REG_ALPHA",
                default: "1",
                doc: "test",
            },
            ConfigVar {
                name: "LOG_LEVEL",
                default: "trace",
                doc: "duplicate name: the first definition wins",
            },
        ];
        register(&EXTRA);
        register(&EXTRA);
        let all = all_vars();
        assert_eq!(
            all.iter().filter(|v| v.name == "TEST_REG_ALPHA").count(),
            1,
            "registering twice lists once"
        );
        let log = all
            .iter()
            .filter(|v| v.name == "LOG_LEVEL")
            .collect::<Vec<_>>();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].default, "warn");
        for v in crate::UCS_VARS.iter() {
            assert!(all.contains(v), "{} missing", v.name);
        }
        assert_eq!(find("RUCX_TEST_REG_ALPHA").map(|v| v.default), Some("1"));
        assert_eq!(find("TEST_REG_ALPHA").map(|v| v.default), Some("1"));
        assert!(find("TEST_REG_NOPE").is_none());
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("LOG_LEVEL", "LOG_LEVEL"), 0);
        assert_eq!(edit_distance("LOG_LEVLE", "LOG_LEVEL"), 2);
        assert_eq!(edit_distance("log_level", "LOG_LEVEL"), 0);
        assert_eq!(edit_distance("", "ABC"), 3);
        assert_eq!(edit_distance("KITTEN", "SITTING"), 3);
    }

    #[test]
    fn unknown_names_get_closest_suggestion() {
        let got = unknown_vars([
            "RUCX_LOG_LEVLE",
            "RUCX_LOG_LEVEL",
            "PATH",
            "UCX_TLS",
            "RUCX_RCACHE_ENABEL",
            "RUCX_ZZZZZZZZZZZZZZZZ",
        ]);
        assert_eq!(
            got,
            vec![
                (
                    "RUCX_LOG_LEVLE".to_owned(),
                    Some("RUCX_LOG_LEVEL".to_owned())
                ),
                (
                    "RUCX_RCACHE_ENABEL".to_owned(),
                    Some("RUCX_RCACHE_ENABLE".to_owned())
                ),
                ("RUCX_ZZZZZZZZZZZZZZZZ".to_owned(), None),
            ]
        );
    }

    #[test]
    fn check_unknown_env_reads_the_environment() {
        std::env::set_var("RUCX_TEST_CHECK_LOG_LEVLE_X", "1");
        std::env::set_var("RUCX_LOG_LEVL", "1");
        let got = check_unknown_env();
        std::env::remove_var("RUCX_TEST_CHECK_LOG_LEVLE_X");
        std::env::remove_var("RUCX_LOG_LEVL");
        assert!(
            got.iter().any(|(n, _)| n == "RUCX_TEST_CHECK_LOG_LEVLE_X"),
            "{got:?}"
        );
        assert!(
            got.contains(&(
                "RUCX_LOG_LEVL".to_owned(),
                Some("RUCX_LOG_LEVEL".to_owned())
            )),
            "{got:?}"
        );
        assert!(!got.iter().any(|(n, _)| n == "RUCX_LOG_LEVEL"));
    }
}
