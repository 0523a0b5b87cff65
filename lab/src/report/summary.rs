//! The report as a person reads it at the end of a run: totals, a table per phase, where the
//! leader was, what happened when, what the controllers did, and every violated invariant.

use super::Report;

impl Report {
    /// A short human summary.
    pub fn summary(&self) -> String {
        let mut s = self.totals();
        s += &self.phase_tables();
        s += &self.steps_part();
        s += &self.quorum_and_events();
        s += &self.control_plane_part();
        s += &self.verdict();
        s
    }

    /// What the shoot API's clients, the lab's etcd client and the webhook callers saw.
    fn totals(&self) -> String {
        let a = &self.api;
        let mut s = format!(
            "scenario {} (RTT {} ms), kube-apiserver {}: {} API requests, {} failed ({} retried), worst {:.0} ms, longest write gap {:.0} ms; {} objects written, {} missing; watch {} events, {} missed, {} out of order, {} reconnects, {} relists; kube-apiserver webhook calls through the tunnel {}, failed {}\n",
            self.scenario, self.rtt_ms, self.control_plane.kube_apiserver, a.requests, a.failed, a.retried,
            a.worst_ms, a.longest_write_gap_ms, self.objects.written, self.objects.missing,
            a.watch.events, a.watch.missing, a.watch.out_of_order, a.watch.reconnects, a.watch.gone,
            a.webhook.calls, a.webhook.failed
        );
        s += &format!(
            "etcd (lab client): {} requests, {} failed; {} writes acknowledged, {} missing; longest write gap {:.0} ms; {} {} requests, {} failed\n",
            self.etcd.requests, self.etcd.failed, self.writes.acknowledged,
            self.writes.missing, self.writes.longest_gap_ms, self.webhook_label(), self.webhook.requests, self.webhook.failed
        );
        if let Some(j) = self.join_ms {
            s += &format!("join (3 -> 5): {j:.0} ms\n");
        }
        s
    }

    /// Per phase: the etcd client's requests, the shoot API's, the webhook callers'.
    fn phase_tables(&self) -> String {
        let a = &self.api;
        let mut s = format!(
            "{:<12} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}   (etcd)\n",
            "phase", "start_s", "end_s", "reqs", "failed", "p50_ms", "p99_ms", "max_ms", "gap_ms"
        );
        for p in &self.phases {
            s += &format!(
                "{:<12} {:>8.1} {:>8.1} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.0}\n",
                p.name,
                p.start / 1000.0,
                p.end / 1000.0,
                p.requests,
                p.failed,
                p.p50_ms,
                p.p99_ms,
                p.max_ms,
                p.longest_write_gap_ms
            );
        }
        s += &format!(
            "shoot API via source {} / destination {} kube-apiserver\n",
            a.via_source, a.via_destination
        );
        for p in &a.phases {
            s += &format!(
                "  api {:<12} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1}\n",
                p.name, p.requests, p.failed, p.p50_ms, p.p99_ms, p.max_ms
            );
        }
        for line in &a.slow {
            s += &format!("  api {line}\n");
        }
        s += &format!(
            "{} via source {} / destination {} tunnel server\n",
            self.webhook_label(),
            self.webhook.via_source,
            self.webhook.via_destination
        );
        for p in &self.webhook.phases {
            s += &format!(
                "  webhook {:<12} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1}\n",
                p.name, p.requests, p.failed, p.p50_ms, p.p99_ms, p.max_ms
            );
        }
        s
    }

    /// A run on real seeds: each step with where its time went, and the steps beside the lab's.
    fn steps_part(&self) -> String {
        let mut s = String::new();
        if !self.steps.is_empty() {
            s += "steps (start, duration; where the time went):\n";
        }
        for st in &self.steps {
            s += &format!(
                "  {:<40} {:>8.1} s {:>8.1} s\n",
                st.name,
                st.start_ms / 1000.0,
                st.ms() / 1000.0
            );
            for p in &st.parts {
                s += &format!(
                    "      {:<50} {:>8.1} s\n",
                    p.what,
                    (p.end_ms - p.start_ms) / 1000.0
                );
            }
        }
        if let Some(c) = &self.comparison {
            s += "each step on the real seeds beside the lab's:\n";
            for line in c.lines() {
                s += &format!("  {line}\n");
            }
        }
        s
    }

    /// Where the leader was at each phase's start, and every event.
    fn quorum_and_events(&self) -> String {
        let mut s = String::from("leader and quorum at each phase's start:\n");
        for q in &self.quorum {
            s += &format!(
                "  {:<18} leader {:<18} in {:<4} voters {} ({} src + {} dst), quorum {}, margin {}\n",
                q.phase,
                q.leader.as_deref().unwrap_or("?"),
                q.leader_seed.as_deref().unwrap_or("?"),
                q.voters,
                q.voters_source,
                q.voters_destination,
                q.quorum,
                q.margin
            );
        }
        for e in &self.events {
            s += &format!("  {:>7.1} s  {}\n", e.t_ms / 1000.0, e.what);
        }
        s
    }

    /// What the controllers did (runs they drove), and what the lab stood in for.
    fn control_plane_part(&self) -> String {
        let mut s = String::new();
        if let Some(c) = &self.control {
            s += &format!("control plane: {}\n", c.real);
            s += "condition timeline (both seeds' EtcdMigration):\n";
            for e in &c.conditions {
                s += &format!("  {:>7.1} s  {}\n", e.t_ms / 1000.0, e.what);
            }
            s += &format!(
                "{} object changes by the controllers; Leases: {}; invalid EtcdMigrations: {:?}\n",
                c.objects.len(),
                c.leases
                    .iter()
                    .map(|e| format!("{:.1} s {}", e.t_ms / 1000.0, e.what))
                    .collect::<Vec<_>>()
                    .join(", "),
                c.refused
            );
        }
        s += "stand-ins (what Gardener runs, the lab imitates through the same contracts):\n";
        for st in &self.stand_ins {
            s += &format!("  - {st}\n");
        }
        s
    }

    /// The membership from start to end, and every invariant that failed.
    fn verdict(&self) -> String {
        let mut s = format!(
            "members: {:?} -> {:?}\n",
            self.members.initial, self.members.r#final
        );
        if self.violations.is_empty() {
            s += "all invariants hold\n";
        } else {
            for v in &self.violations {
                s += &format!("VIOLATED: {v}\n");
            }
        }
        s
    }
}
