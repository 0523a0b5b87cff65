//! Human durations (`10s`, `250ms`, `1h30m`) as used throughout the YAML files.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A span of time written as a sequence of `<integer><unit>` with units `ms`, `s`, `m`, `h`
/// (for example `10s`, `1500ms`, `1h30m`). Zero is written `0s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// A duration of `s` whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        Self(std::time::Duration::from_secs(s))
    }
    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Self(std::time::Duration::from_millis(ms))
    }
    /// The standard library value.
    pub const fn get(self) -> std::time::Duration {
        self.0
    }

    /// Parses `10s`, `250ms`, `1h30m`; the error says what was expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty duration; write e.g. \"10s\" or \"250ms\"".into());
        }
        let mut total: u128 = 0;
        let mut rest = t;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(format!(
                    "invalid duration {text:?}: expected a number at {rest:?}"
                ));
            }
            let value: u128 = rest[..digits]
                .parse()
                .map_err(|_| format!("invalid duration {text:?}: number too large"))?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit_ms: u128 = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "" => {
                    return Err(format!(
                        "invalid duration {text:?}: missing unit (ms, s, m or h)"
                    ))
                }
                u => return Err(format!("invalid duration {text:?}: unknown unit {u:?}")),
            };
            rest = &rest[unit_len..];
            total = total
                .checked_add(value.saturating_mul(unit_ms))
                .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        }
        let ms =
            u64::try_from(total).map_err(|_| format!("invalid duration {text:?}: too large"))?;
        Ok(Self::from_millis(ms))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 {
            write!(f, "0s")
        } else if ms % 3_600_000 == 0 {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms % 60_000 == 0 {
            write!(f, "{}m", ms / 60_000)
        } else if ms % 1_000 == 0 {
            write!(f, "{}s", ms / 1_000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::text::parse_str(d, "a duration such as 10s or 250ms", Duration::parse)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, ms, shown) in [
            ("10s", 10_000, "10s"),
            ("250ms", 250, "250ms"),
            ("1h30m", 5_400_000, "90m"),
            ("0s", 0, "0s"),
            ("2h", 7_200_000, "2h"),
        ] {
            let d = Duration::parse(text).unwrap();
            assert_eq!(d.get().as_millis(), ms, "{text}");
            assert_eq!(d.to_string(), shown);
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in [
            "",
            "10",
            "s",
            "10x",
            "1.5s",
            "-1s",
            "99999999999999999999999h",
        ] {
            assert!(Duration::parse(text).is_err(), "{text:?} should fail");
        }
    }
}

/// A duration on the command line: `<number><unit>` with unit `us`, `ms` or `s` (a bare `0` is
/// zero), finer than the YAML form (no `us` there); for clap's `value_parser`.
pub fn parse_flag(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let expected = || format!("`{text}`: expected a duration like 50us, 50ms or 2s");
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 0.000_001)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(expected());
    };
    let v: f64 = num.trim().parse().map_err(|_| expected())?;
    if !(0.0..=86_400.0).contains(&v) {
        return Err(format!("`{text}`: out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod flag_tests {
    #![allow(clippy::unwrap_used)]
    use super::parse_flag;
    use std::time::Duration;

    #[test]
    fn parses_the_units_we_document() {
        assert_eq!(parse_flag("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse_flag("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_flag("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_flag("0").unwrap(), Duration::ZERO);
        assert!(parse_flag("50").is_err());
        assert!(parse_flag("-1s").is_err());
    }
}
