//! Durations on the command line: `50us`, `50ms`, `1.5s`, `0` (finer than the YAML files'
//! `config::Duration`, which has no `us`).

use std::time::Duration;

/// Parses `<number><unit>` with unit `us`, `ms` or `s` (a bare `0` is zero).
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
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
    Ok(Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_the_units_we_document() {
        assert_eq!(parse("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("50").is_err());
        assert!(parse("-1s").is_err());
    }
}
