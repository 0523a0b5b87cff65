//! Medians, min–max, ratios to the best peer and to direct (of the medians, and paired round by
//! round); the printed table and the JSON.

use crate::contender::Kind;
use std::collections::BTreeMap;

/// One figure, its unit and which way is better.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub key: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
}

pub const METRICS: [Metric; 19] = [
    Metric {
        key: "bulk_1conn",
        unit: "GB/s",
        higher_is_better: true,
    },
    Metric {
        key: "bulk_64conn",
        unit: "GB/s",
        higher_is_better: true,
    },
    Metric {
        key: "cpu_per_GB_1conn",
        unit: "ms",
        higher_is_better: false,
    },
    Metric {
        key: "cpu_per_GB_64conn",
        unit: "ms",
        higher_is_better: false,
    },
    Metric {
        key: "latency_p50",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "latency_p99",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "latency_p999",
        unit: "us",
        higher_is_better: false,
    },
    // Each turn's p99 (its ~400 round trips), the median and the worst turn: a tail spread over
    // the whole run raises the median turn, a few bad moments (a return to batch on a busy CPU)
    // only the worst.
    Metric {
        key: "turn_p99_median",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "turn_p99_worst",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "added_p50",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "added_p99",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "cpu_per_rtt",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "conns_per_s",
        unit: "1/s",
        higher_is_better: true,
    },
    Metric {
        key: "cpu_per_conn",
        unit: "us",
        higher_is_better: false,
    },
    Metric {
        key: "syscalls_per_conn",
        unit: "calls",
        higher_is_better: false,
    },
    Metric {
        key: "idle_mem_per_10k",
        unit: "MiB",
        higher_is_better: false,
    },
    // RSS grown per 100,000 connections opened and closed with the controller's
    // `idle_timeout: 3h` on isthmus's upstream (the `churn` scenario): what a closed
    // connection leaves behind.
    Metric {
        key: "churn_mem_per_100k",
        unit: "MiB",
        higher_is_better: false,
    },
    Metric {
        key: "reload_10k_routes",
        unit: "ms",
        higher_is_better: false,
    },
    Metric {
        key: "reload_survivors",
        unit: "%",
        higher_is_better: true,
    },
];

/// Calls and failed calls per connection, by system call (one round of one contender).
pub type PerCall = BTreeMap<String, (f64, f64)>;
/// Calls and failed calls per connection, by contender (one system call).
type PerWho = BTreeMap<&'static str, (f64, f64)>;

/// Samples per metric and contender, one per round.
#[derive(Debug, Default)]
pub struct Results {
    pub samples: BTreeMap<&'static str, BTreeMap<&'static str, Vec<f64>>>,
    /// The `syscalls` scenario's breakdown: per contender, per round, calls and failed calls
    /// per connection by system call.
    pub syscalls: BTreeMap<&'static str, Vec<PerCall>>,
    /// The `profile` scenario's samples by call, per contender, summed over rounds.
    pub profiles: BTreeMap<&'static str, crate::profile::Samples>,
    /// isthmus's demotions out of `SCHED_BATCH` during each scenario, one count per round.
    pub demotions: BTreeMap<String, Vec<f64>>,
}

#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

fn summarize(v: &[f64]) -> Option<Summary> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: s[0],
        max: s[s.len() - 1],
    })
}

/// The p-th percentile (0..=100) of unsorted samples, nearest rank.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

impl Results {
    /// isthmus's demotion counter before and after `scenario` (`None` when it did not run or
    /// did not answer).
    pub fn push_demotions(&mut self, scenario: &str, before: Option<f64>, after: Option<f64>) {
        if let (Some(b), Some(a)) = (before, after) {
            self.demotions
                .entry(scenario.to_owned())
                .or_default()
                .push(a - b);
        }
    }

    /// `bulk1 0/0/0, bulk64 2/1/2, …`: the demotions per round, by scenario.
    pub fn demotion_line(&self) -> Option<String> {
        let parts: Vec<String> = self
            .demotions
            .iter()
            .map(|(s, v)| {
                let rounds: Vec<String> = v.iter().map(|n| format!("{n:.0}")).collect();
                format!("{s} {}", rounds.join("/"))
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    pub fn push(&mut self, metric: &'static str, who: Kind, value: f64) {
        self.samples
            .entry(metric)
            .or_default()
            .entry(who.name())
            .or_default()
            .push(value);
    }

    fn summary(&self, metric: &str, who: &str) -> Option<Summary> {
        self.samples
            .get(metric)?
            .get(who)
            .and_then(|v| summarize(v))
    }

    /// Added latency is derived from the medians, after all rounds.
    pub fn derive_added(&mut self) {
        for (from, to) in [("latency_p50", "added_p50"), ("latency_p99", "added_p99")] {
            let Some(direct) = self.summary(from, "direct") else {
                continue;
            };
            for k in Kind::ALL.into_iter().filter(|k| *k != Kind::Direct) {
                if let Some(s) = self.summary(from, k.name()) {
                    self.push(to, k, s.median - direct.median);
                }
            }
        }
    }

    fn best_peer(&self, m: &Metric) -> Option<(&'static str, f64)> {
        Kind::ALL
            .into_iter()
            .filter(|k| k.is_peer())
            .filter_map(|k| self.summary(m.key, k.name()).map(|s| (k.name(), s.median)))
            .reduce(|a, b| {
                let better = if m.higher_is_better {
                    b.1 > a.1
                } else {
                    b.1 < a.1
                };
                if better {
                    b
                } else {
                    a
                }
            })
    }

    /// The median over rounds of `who`'s figure divided by `peer`'s in the same round. Rounds
    /// swing together (the host, the kernel's TIME_WAIT table: in one `connrate` run every
    /// contender's slowest round was the same), and a ratio of medians taken from different
    /// rounds carries that swing; the contenders of a round run minutes apart at most.
    /// `None` unless both have a figure in every round (and there are two rounds or more).
    /// Added latency is paired from the latency percentiles: round by round, what the
    /// contender adds to that round's direct path over what the peer adds.
    fn paired(&self, metric: &str, who: &str, peer: &str) -> Option<f64> {
        let (metric, added) = match metric {
            "added_p50" => ("latency_p50", true),
            "added_p99" => ("latency_p99", true),
            m => (m, false),
        };
        let by = self.samples.get(metric)?;
        let less = if added { Some(by.get("direct")?) } else { None };
        let (a, b) = (by.get(who)?, by.get(peer)?);
        if a.len() != b.len() || a.len() < 2 || less.is_some_and(|d| d.len() != a.len()) {
            return None;
        }
        let r: Vec<f64> = (0..a.len())
            .map(|i| {
                let d = less.map_or(0.0, |d| d[i]);
                (a[i] - d) / (b[i] - d)
            })
            .collect();
        if r.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return None;
        }
        summarize(&r).map(|s| s.median)
    }

    /// Records one round of the `syscalls` scenario: `counts` over `conns` connections.
    pub fn push_syscalls(
        &mut self,
        who: Kind,
        counts: &BTreeMap<String, crate::syscalls::Count>,
        conns: u64,
    ) {
        let per = |n: u64| n as f64 / conns as f64;
        let round = counts
            .iter()
            .map(|(name, c)| (name.clone(), (per(c.calls), per(c.errors))))
            .collect::<PerCall>();
        let total: u64 = counts.values().map(|c| c.calls).sum();
        self.push("syscalls_per_conn", who, per(total));
        self.syscalls.entry(who.name()).or_default().push(round);
    }

    /// Adds one round of the `profile` scenario.
    pub fn push_profile(&mut self, who: Kind, samples: &crate::profile::Samples) {
        let sum = self.profiles.entry(who.name()).or_default();
        for (k, n) in samples {
            *sum.entry(k.clone()).or_default() += n;
        }
    }

    /// Share of each contender's samples by call, and what of it is not the connections' own
    /// TCP work.
    pub fn profile_table(&self) -> Option<String> {
        use crate::profile::{BUCKETS, MACHINERY, USER};
        if self.profiles.is_empty() {
            return None;
        }
        let who: Vec<&'static str> = Kind::ALL
            .into_iter()
            .map(Kind::name)
            .filter(|n| self.profiles.contains_key(n))
            .collect();
        let share = |w: &str, keys: &[&str]| -> f64 {
            let s = &self.profiles[w];
            let total: u64 = s.values().sum();
            let part: u64 = keys.iter().filter_map(|k| s.get(*k)).sum();
            if total == 0 {
                0.0
            } else {
                100.0 * part as f64 / total as f64
            }
        };
        let mut names: Vec<&String> = self
            .profiles
            .values()
            .flat_map(|s| s.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let top = |n: &str| who.iter().map(|w| share(w, &[n])).fold(0.0f64, f64::max);
        names.sort_by(|a, b| top(b).total_cmp(&top(a)).then(a.cmp(b)));
        let mut out = format!("{:<34}", "% of samples");
        for w in &who {
            out += &format!(" {w:>10}");
        }
        out += "\n";
        let mut row = |label: &str, keys: &[&str]| {
            out += &format!("{label:<34}");
            for w in &who {
                out += &format!(" {:>9.1}%", share(w, keys));
            }
            out += "\n";
        };
        for n in names {
            // Below half a per cent: housekeeping and the profile's noise.
            if top(n) >= 0.5 {
                row(n, &[n]);
            }
        }
        let epoll: Vec<&str> = ["epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl"].into();
        let mut saveable = epoll.clone();
        saveable.push(MACHINERY);
        row("= io_uring's ceiling (calls+epoll)", &saveable);
        saveable.push(USER);
        row("= not TCP work (+ user space)", &saveable);
        let samples: Vec<String> = who
            .iter()
            .map(|w| format!("{w} {}", self.profiles[w].values().sum::<u64>()))
            .collect();
        out += &format!(
            "samples: {} (buckets: {})\n",
            samples.join(", "),
            BUCKETS.join(", ")
        );
        Some(out)
    }

    /// Median over rounds of calls (and failed calls) per connection, by contender and call.
    fn syscall_medians(&self) -> BTreeMap<String, PerWho> {
        let mut out: BTreeMap<String, PerWho> = BTreeMap::new();
        for (who, rounds) in &self.syscalls {
            let names: std::collections::BTreeSet<&String> =
                rounds.iter().flat_map(|r| r.keys()).collect();
            for name in names {
                let get = |i: usize| -> Vec<f64> {
                    rounds
                        .iter()
                        .map(|r| r.get(name).map_or(0.0, |c| if i == 0 { c.0 } else { c.1 }))
                        .collect()
                };
                let (Some(calls), Some(errors)) = (summarize(&get(0)), summarize(&get(1))) else {
                    continue;
                };
                out.entry(name.clone())
                    .or_default()
                    .insert(who, (calls.median, errors.median));
            }
        }
        out
    }

    /// The `syscalls` breakdown: one row per system call, one column per contender, calls
    /// per connection (median over rounds) and, after the slash, how many of them failed.
    pub fn syscall_table(&self) -> Option<String> {
        if self.syscalls.is_empty() {
            return None;
        }
        let who: Vec<&'static str> = Kind::ALL
            .into_iter()
            .map(Kind::name)
            .filter(|n| self.syscalls.contains_key(n))
            .collect();
        let medians = self.syscall_medians();
        let mut rows: Vec<(&String, &PerWho)> = medians.iter().collect();
        let top = |m: &PerWho| m.values().map(|c| c.0).fold(0.0f64, f64::max);
        rows.sort_by(|a, b| top(b.1).total_cmp(&top(a.1)).then(a.0.cmp(b.0)));
        let mut out = format!("{:<18}", "calls/conn (failed)");
        for w in &who {
            out += &format!(" {w:>16}");
        }
        out += "\n";
        for (name, per) in rows {
            // Calls made less than once per 100 connections are timers and housekeeping.
            if top(per) < 0.01 {
                continue;
            }
            out += &format!("{name:<18}");
            for w in &who {
                let cell = match per.get(w) {
                    Some((c, e)) if *e >= 0.005 => format!("{c:.2} ({e:.2})"),
                    Some((c, _)) => format!("{c:.2}"),
                    None => "-".into(),
                };
                out += &format!(" {cell:>16}");
            }
            out += "\n";
        }
        out += &format!("{:<18}", "total");
        for w in &who {
            let cell = self
                .summary("syscalls_per_conn", w)
                .map_or("-".into(), |s| format!("{:.2}", s.median));
            out += &format!(" {cell:>16}");
        }
        out += "\n";
        Some(out)
    }

    /// The table: one row per figure and contender.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<18} {:<9} {:>10} {:>21} {:>10} {:>9} {:>8}\n",
            "figure", "who", "median", "min–max", "/best peer", "/direct", "paired"
        );
        for m in &METRICS {
            let best = self.best_peer(m);
            let direct = self.summary(m.key, "direct");
            for k in Kind::ALL {
                let Some(s) = self.summary(m.key, k.name()) else {
                    continue;
                };
                let ratio = |d: Option<f64>| match d {
                    Some(d) if d != 0.0 => format!("{:.2}x", s.median / d),
                    _ => "-".into(),
                };
                let paired = best
                    .and_then(|b| self.paired(m.key, k.name(), b.0))
                    .map_or_else(|| "-".into(), |r| format!("{r:.2}x"));
                out += &format!(
                    "{:<18} {:<9} {:>10} {:>21} {:>10} {:>9} {:>8}\n",
                    format!("{} ({})", m.key, m.unit),
                    k.name(),
                    fmt(s.median),
                    format!("{}–{}", fmt(s.min), fmt(s.max)),
                    ratio(best.map(|b| b.1)),
                    ratio(direct.map(|d| d.median)),
                    paired,
                );
            }
        }
        out
    }

    pub fn json(&self, meta: serde_json::Value) -> serde_json::Value {
        let mut figures = serde_json::Map::new();
        for m in &METRICS {
            let best = self.best_peer(m);
            let direct = self.summary(m.key, "direct");
            let mut per = serde_json::Map::new();
            for k in Kind::ALL {
                let Some(s) = self.summary(m.key, k.name()) else {
                    continue;
                };
                per.insert(
                    k.name().into(),
                    serde_json::json!({
                        "median": s.median, "min": s.min, "max": s.max,
                        "samples": self.samples[m.key][k.name()],
                        "ratio_to_best_peer": best.map(|b| s.median / b.1),
                        "paired_ratio_to_best_peer":
                            best.and_then(|b| self.paired(m.key, k.name(), b.0)),
                        "ratio_to_direct": direct.map(|d| s.median / d.median),
                    }),
                );
            }
            figures.insert(
                m.key.into(),
                serde_json::json!({
                    "unit": m.unit, "higher_is_better": m.higher_is_better,
                    "best_peer": best.map(|b| b.0), "by": per,
                }),
            );
        }
        let syscalls: BTreeMap<String, BTreeMap<&str, serde_json::Value>> = self
            .syscall_medians()
            .into_iter()
            .map(|(name, per)| {
                let per = per
                    .into_iter()
                    .map(|(w, (c, e))| (w, serde_json::json!({ "calls": c, "failed": e })))
                    .collect();
                (name, per)
            })
            .collect();
        serde_json::json!({
            "meta": meta, "figures": figures, "syscalls_per_conn": syscalls,
            "profile_samples": self.profiles, "isthmus_demotions": self.demotions,
        })
    }
}

fn fmt(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}
