//! The one metric scraper of the tests: the value of one exact series in Prometheus /
//! OpenMetrics text.

/// The value of the series `series` (name and labels, exactly as printed), or 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == series.trim_end()).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn exact_series_only() {
        let text = "# TYPE a counter\na_total{l=\"x\"} 3\na_total_more 4\nb 1.5\n";
        assert_eq!(metric(text, "a_total{l=\"x\"}"), 3.0);
        assert_eq!(metric(text, "a_total"), 0.0);
        assert_eq!(metric(text, "b"), 1.5);
        assert_eq!(metric(text, "c"), 0.0);
    }
}
