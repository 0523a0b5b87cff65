//! The report's numbers: percentiles, the longest gap between acknowledged writes, per-phase
//! statistics of requests, the fault window inside which failures are expected, and the
//! events they are read against.

use crate::client::{Recording, Sample};
use serde::Serialize;

/// Something the migration did or injected.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ms: f64,
    pub what: String,
}

/// A phase of the migration, in milliseconds since the lab started.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub start: f64,
    pub end: f64,
    pub requests: usize,
    pub failed: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Longest time between two successful writes acknowledged in this phase.
    pub longest_write_gap_ms: f64,
}

/// A fault during which failed requests are expected (a quorum-losing cut): failures that
/// started inside `[start_ms - 5 s, end_ms]` are counted here instead of as violations.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    pub what: String,
    pub start_ms: f64,
    /// The fault's end plus the recovery allowance.
    pub end_ms: f64,
    pub api_failed: usize,
    pub etcd_failed: usize,
}

impl Fault {
    /// Whether a request that started at `t_ms` ran into the fault (a request may start up to
    /// its 5 s budget before the fault and fail inside it).
    pub fn covers(&self, t_ms: f64) -> bool {
        t_ms >= self.start_ms - 5000.0 && t_ms <= self.end_ms
    }
}

/// Whether `fault` (if any) covers `t_ms`.
pub fn covered(fault: Option<&Fault>, t_ms: f64) -> bool {
    fault.is_some_and(|f| f.covers(t_ms))
}

/// Requests (API requests or webhook calls) that started in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub name: String,
    pub requests: usize,
    pub failed: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl PhaseStats {
    /// Statistics of the requests that started in `[start, end)`; each item is (start, latency,
    /// ok) in ms. Used for the API's requests and the webhook's calls alike.
    pub fn of(
        name: &str,
        start: f64,
        end: f64,
        items: impl Iterator<Item = (f64, f64, bool)>,
    ) -> Self {
        let inside: Vec<(f64, bool)> = items
            .filter(|(at, _, _)| *at >= start && *at < end)
            .map(|(_, latency, ok)| (latency, ok))
            .collect();
        let mut lat: Vec<f64> = inside.iter().map(|(l, _)| *l).collect();
        lat.sort_by(f64::total_cmp);
        Self {
            name: name.into(),
            requests: inside.len(),
            failed: inside.iter().filter(|(_, ok)| !ok).count(),
            p50_ms: pct(&lat, 50.0),
            p99_ms: pct(&lat, 99.0),
            max_ms: lat.last().copied().unwrap_or(0.0),
        }
    }
}

/// Percentile (nearest rank) of sorted values.
pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Longest gap between consecutive instants (sorted in place).
pub fn longest_gap(acks: &mut [f64]) -> f64 {
    acks.sort_by(f64::total_cmp);
    acks.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

/// A phase's statistics over the requests that started in `[start, end)`.
pub fn phase(name: &str, start: f64, end: f64, rec: &Recording) -> Phase {
    let inside: Vec<&Sample> = rec
        .samples
        .iter()
        .filter(|s| s.start_ms >= start && s.start_ms < end)
        .collect();
    let mut lat: Vec<f64> = inside.iter().map(|s| s.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    let mut acks: Vec<f64> = rec
        .write_acks_ms
        .iter()
        .copied()
        .filter(|t| *t >= start && *t < end)
        .collect();
    Phase {
        name: name.to_string(),
        start,
        end,
        requests: inside.len(),
        failed: inside.iter().filter(|s| !s.ok).count(),
        p50_ms: pct(&lat, 50.0),
        p99_ms: pct(&lat, 99.0),
        max_ms: lat.last().copied().unwrap_or(0.0),
        longest_write_gap_ms: longest_gap(&mut acks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Kind, Recording, Sample};

    fn sample(start_ms: f64, latency_ms: f64, ok: bool) -> Sample {
        Sample {
            kind: Kind::Write,
            start_ms,
            latency_ms,
            ok,
            attempts: 1,
            error: None,
        }
    }

    #[test]
    fn phase_statistics_cover_only_requests_started_inside() {
        let rec = Recording {
            samples: (0..100)
                .map(|i| sample(f64::from(i) * 10.0, f64::from(i + 1), i != 50))
                .chain([sample(5000.0, 9999.0, true)])
                .collect(),
            acknowledged: Default::default(),
            write_acks_ms: vec![10.0, 20.0, 400.0, 410.0, 6000.0],
        };
        let p = phase("p", 0.0, 1000.0, &rec);
        assert_eq!((p.requests, p.failed), (100, 1));
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (50.0, 99.0, 100.0));
        assert_eq!(p.longest_write_gap_ms, 380.0);
        assert_eq!(longest_gap(&mut [3.0, 1.0, 10.0]), 7.0);
        assert_eq!(longest_gap(&mut []), 0.0);
    }
}
