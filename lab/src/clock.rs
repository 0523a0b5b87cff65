//! The lab's two clocks: milliseconds since the run started (every figure of the report) and
//! the wall clock as RFC 3339 (the times the planner and the stand-ins write into objects).

use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// Milliseconds as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The current time, RFC 3339 to the second (the planner's condition and annotation times).
pub fn now() -> String {
    rfc3339(Timestamp::now().as_second())
}

/// `secs` since the Unix epoch as RFC 3339, UTC, to the second.
fn rfc3339(secs: i64) -> String {
    Timestamp::from_second(secs).map_or_else(|_| String::new(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400 + 3_661), "2000-02-29T01:01:01Z");
        assert_eq!(super::rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
