//! What the report makes of a run: the clients stop, every acknowledged write and object is
//! read back, the final members are listed, the invariants are checked (each failure a
//! violation inside the report, never hidden), and every request is written next to the
//! report for whoever wants to look closer.

use super::Run;
use crate::api::report::{ApiReport, ControlPlane, Objects};
use crate::client::{self, Recording};
use crate::clock;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::etcd;
use crate::member::MemberRef;
use crate::options::Options;
use crate::report::{self, Members, Report, Webhook, Writes};
use crate::stats::Fault;
use crate::webhook::Call;
use std::collections::BTreeMap;
use std::path::Path;

/// What the end-of-run invariants are checked on.
struct Outcome<'a> {
    rec: &'a Recording,
    fault: Option<&'a Fault>,
    /// Acknowledged writes missing or changed.
    missing: &'a [String],
    expected: &'a [MemberRef],
    final_members: &'a [String],
    webhook: &'a Webhook,
    calls: &'a [Call],
}

impl<D: Driver> Run<D> {
    /// The destination kube-apiserver did not become ready (the GEP's failure boundary): the
    /// migration cannot go on (nothing may move the DNS to an API server that is not ready);
    /// the run ends here with 5 voters and says so.
    pub(super) async fn not_ready(self, opts: &Options, why: String) -> Result<Report> {
        let five = self.lab.world.members();
        let mut report = self.finish(opts, &five, false).await?;
        report.violations.push(format!(
            "the destination kube-apiserver did not become ready at RTT {} ms: {why}",
            clock::ms(opts.rtt)
        ));
        Ok(report)
    }

    /// Ends the run: `expected` are the members it must end with; `released`, whether every
    /// one of them must be back on its in-cluster peer URL alone.
    pub(super) async fn finish(
        mut self,
        opts: &Options,
        expected: &[MemberRef],
        released: bool,
    ) -> Result<Report> {
        self.lab.record.end_phases();
        let rec = self.client.stop().await;
        // etcd's own account of the leadership moves (the controller's at `Shrink` runs in
        // its process, outside the journal): a slow request's "meanwhile" names them.
        let record = &mut self.lab.record;
        let epoch = std::time::SystemTime::now()
            .checked_sub(record.epoch().elapsed())
            .unwrap_or_else(std::time::SystemTime::now);
        record
            .events
            .extend(super::leadership::transfers(&self.lab.world.dir, epoch));
        record.events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        let mut violations = Vec::new();
        let (api, objects, control_plane) = self.shoot_api(&mut violations).await?;
        let fault = self
            .lab
            .record
            .fault
            .clone()
            .map(|f| counted(f, &api, &rec));
        let (webhook, calls) = self.tunnel_calls().await?;
        let members = self.members(expected, released, &mut violations).await?;
        let urls = self.lab.world.urls(expected);
        let missing = client::missing(&urls, &rec.acknowledged).await?;
        write_samples(&self.lab.world.dir, &api, &rec)?;
        check(
            &Outcome {
                rec: &rec,
                fault: fault.as_ref(),
                missing: &missing,
                expected,
                final_members: &members.r#final,
                webhook: &webhook,
                calls: &calls,
            },
            &mut violations,
        );
        let driver = self
            .driver
            .conclude(&control_plane.kube_apiserver, &mut violations);
        let record = &self.lab.record;
        let mut acks = rec.write_acks_ms.clone();
        Ok(Report {
            stand_ins: driver.stand_ins.iter().map(|s| s.to_string()).collect(),
            control: driver.control,
            quorum: record.quorum.clone(),
            scenario: opts.scenario.name().into(),
            rtt_ms: clock::ms(opts.rtt),
            api,
            objects,
            control_plane,
            etcd: report::etcd_totals(&rec),
            webhook,
            writes: Writes {
                acknowledged: rec.acknowledged.len(),
                missing: missing.len(),
                longest_gap_ms: report::longest_gap(&mut acks),
            },
            members,
            phases: record
                .phases
                .iter()
                .map(|(n, s, e)| report::phase(n, *s, *e, &rec))
                .collect(),
            events: record.events.clone(),
            fault,
            join_ms: self.join_ms,
            violations,
            steps: Vec::new(),
            comparison: None,
            samples: rec.samples,
        })
    }

    /// The shoot API's part: the load stops, the watch catches up, every acknowledged object
    /// is read back.
    async fn shoot_api(
        &mut self,
        violations: &mut Vec<String>,
    ) -> Result<(ApiReport, Objects, ControlPlane)> {
        let w = &mut self.lab.world;
        let api = w
            .api
            .take()
            .ok_or_else(|| Error::State("the shoot API did not start".into()))?;
        let record = &self.lab.record;
        api.finish(
            w.webhook.as_ref(),
            &record.phases,
            &record.events,
            record.fault.as_ref(),
            violations,
        )
        .await
    }

    /// The webhook calls the lab's callers made through the tunnel (written to
    /// `webhook_calls.json`), once every party of the tunnel stopped.
    async fn tunnel_calls(&mut self) -> Result<(Webhook, Vec<Call>)> {
        let calls = match self.lab.world.webhook.take() {
            Some(w) => w.stop().await,
            None => Vec::new(),
        };
        let calls_path = self.lab.world.dir.join("webhook_calls.json");
        if let Ok(text) = serde_json::to_string(&calls) {
            std::fs::write(&calls_path, text).map_err(|e| Error::io(calls_path.display(), e))?;
        }
        let webhook = Webhook::from_calls(
            &calls,
            &self.lab.record.phases,
            Some(
                "a tunnel-server process in each seed behind its proxy; the agents in a shoot \
                 namespace reach it through that proxy across a link with the RTT (never cut)"
                    .into(),
            ),
        );
        Ok((webhook, calls))
    }

    /// The members as etcd lists them at the end, with the URLs they advertise; with
    /// `released`, each of `expected` must be back on its in-cluster URL alone.
    async fn members(
        &mut self,
        expected: &[MemberRef],
        released: bool,
        violations: &mut Vec<String>,
    ) -> Result<Members> {
        self.lab.record_membership().await;
        let urls = self.lab.world.urls(expected);
        // One member list gives the final names and the URLs they advertise.
        let cluster = &self.lab.world.etcd;
        let listed = etcd::list(&mut etcd::connect(&urls).await?).await?;
        let final_members: Vec<String> = listed.iter().map(|l| cluster.marked_name(l)).collect();
        let final_peer_urls: BTreeMap<String, Vec<String>> = listed
            .into_iter()
            .map(|l| (cluster.name_of(&l), l.peer_urls))
            .collect();
        if released {
            // The exposure is gone: every member must be back on its in-cluster URL alone.
            for m in expected {
                let got = final_peer_urls.get(&m.name());
                if got != Some(&vec![m.in_cluster_url()]) {
                    violations.push(format!(
                        "{} advertises {got:?} after the migration, not its in-cluster URL {}",
                        m.name(),
                        m.in_cluster_url()
                    ));
                }
            }
        }
        let record = &self.lab.record;
        Ok(Members {
            initial: self.initial.clone(),
            r#final: final_members,
            timeline: record.timeline.clone(),
            final_peer_urls,
            rolled: record.rolled.clone(),
        })
    }
}

/// `f` with the failed requests it covers counted.
fn counted(mut f: Fault, api: &ApiReport, rec: &Recording) -> Fault {
    f.api_failed = api
        .samples
        .iter()
        .filter(|s| !s.ok && f.covers(s.start_ms))
        .count();
    f.etcd_failed = rec
        .samples
        .iter()
        .filter(|s| !s.ok && f.covers(s.start_ms))
        .count();
    f
}

/// Every request, for whoever wants to look closer than the report.
fn write_samples(dir: &Path, api: &ApiReport, rec: &Recording) -> Result<()> {
    let api_path = dir.join("api_samples.json");
    if let Ok(text) = serde_json::to_string(&api.samples) {
        std::fs::write(&api_path, text).map_err(|e| Error::io(api_path.display(), e))?;
    }
    let samples_path = dir.join("samples.json");
    if let Ok(text) = serde_json::to_string(&rec.samples) {
        std::fs::write(&samples_path, text).map_err(|e| Error::io(samples_path.display(), e))?;
    }
    Ok(())
}

/// The invariants of the lab's own client, the final members and the tunnel.
fn check(o: &Outcome, violations: &mut Vec<String>) {
    let etcd_unexpected = o
        .rec
        .samples
        .iter()
        .filter(|s| !s.ok && !report::covered(o.fault, s.start_ms))
        .count();
    if etcd_unexpected > 0 {
        violations.push(format!("{etcd_unexpected} etcd requests failed"));
    }
    if !o.missing.is_empty() {
        violations.push(format!(
            "{} acknowledged writes missing or changed: {:?}",
            o.missing.len(),
            &o.missing[..o.missing.len().min(5)]
        ));
    }
    let mut want: Vec<String> = o.expected.iter().map(MemberRef::name).collect();
    let mut got = o.final_members.to_vec();
    want.sort();
    got.sort();
    if want != got {
        violations.push(format!("final members {got:?}, expected {want:?}"));
    }
    if o.webhook.failed > 0 {
        let first = o.calls.iter().find_map(|c| c.error.clone());
        violations.push(format!(
            "{} of {} webhook calls through the tunnel failed (first: {first:?})",
            o.webhook.failed, o.webhook.requests
        ));
    }
    if o.webhook.requests == 0 {
        violations.push("no webhook call was made through the tunnel".into());
    }
    if o.rec.acknowledged.is_empty() {
        violations.push("no write was acknowledged".into());
    }
}
