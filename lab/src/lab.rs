//! The running lab: the topology, both seeds' proxies and migrations, the etcd members, the
//! continuous client, and the record of phases and membership. The membership operations here
//! (add as learner, promote, remove; quorum checked) are what the local backend
//! (`crate::backend`) turns the planner's `Etcd` changes into.

use crate::backend::{idx, Migration};
use crate::client::{ms, Continuous};
use crate::error::{Error, Result};
use crate::etcd::{self, initial_cluster, Member, MemberRef, Side};
use crate::pki::Pki;
use crate::proxy::{self, SeedProxy};
use crate::report::Membership;
use crate::topology::{self, Topology};
use crate::webhook::WebhookLab;
use isthmus_controller::proxy_config::CONFIG_KEY;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// A step of the tunnel's handover, at a phase boundary of the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelStep {
    /// The join starts: the temporary agent connects to the destination's tunnel server.
    JoinTemporary,
    /// The DNS move: calls and the regular agent go to the destination (make before break).
    MoveToDestination,
    /// The temporary agent drains and stops (after an abort, calls return to the source).
    DrainTemporary { abort: bool },
}

/// Everything one run holds; dropping it stops every process and deletes the namespaces.
#[derive(Debug)]
pub struct Lab {
    pub epoch: Instant,
    pub dir: PathBuf,
    // Field order is drop order: processes before the namespaces they run in.
    /// The shoot's kube-apiservers, load and watch; taken by the report at the end.
    pub api: Option<crate::api::ShootApi>,
    /// The webhook called through the tunnel; taken by the report at the end.
    pub webhook: Option<WebhookLab>,
    /// The seeds' API servers and controllers, when the controllers drive the run.
    pub control: Option<crate::control::ControlPlane>,
    pub members: Vec<Member>,
    pub proxies: [SeedProxy; 2],
    /// The seeds' tunnel ingress proxies, when the controllers drive the run (otherwise the
    /// tunnel route rides in `proxies`).
    pub ingress: Vec<SeedProxy>,
    pub topo: Topology,
    /// Each seed's `EtcdMigration` (source, destination): spec and observed world.
    pub migrations: [Migration; 2],
    /// Members in the cluster (as etcd-druid believes), in join order.
    pub cluster: Vec<MemberRef>,
    pub client: Option<Continuous>,
    /// Destination members promoted to voters.
    pub promoted: Vec<MemberRef>,
    /// Whether members run with `--pre-vote` (see [`crate::etcd::Member::start`]).
    pub pre_vote: bool,
    pub phases: Vec<(String, f64, f64)>,
    pub timeline: Vec<Membership>,
    /// What the migration did or injected, and when (ms since start).
    pub events: Vec<crate::report::Event>,
    /// A fault whose failures are expected (see [`crate::report::Fault`]).
    pub fault: Option<crate::report::Fault>,
    /// Leader and quorum at the start of each phase.
    pub quorum: Vec<crate::report::Quorum>,
    /// The peer URLs each member advertises (etcd's member list as the lab set it); a member
    /// not in it advertises its in-cluster URL.
    pub advertised: HashMap<MemberRef, Vec<String>>,
    /// Members the druid stand-in rolled to new peer URLs, in order.
    pub rolled: Vec<crate::report::Rolled>,
    /// The druid stand-in leaves learners unpromoted (a learner still catching up): the abort
    /// scenario's window, which a controller's reaction time would otherwise miss.
    pub hold_promotion: bool,
}

impl Lab {
    /// Builds both seeds, exposes and starts the 3 source members, and waits until they serve.
    pub async fn start(
        rtt: Duration,
        proxy_bin: &Path,
        dir: &Path,
        pre_vote: bool,
        control: Option<&crate::control::ControlOptions>,
    ) -> Result<Self> {
        let epoch = Instant::now();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let topo = Topology::new(rtt).await?;
        let pki = Pki::new(dir)?;
        for m in topology::source()
            .into_iter()
            .chain(topology::destination())
        {
            pki.member(dir, &m.name(), &[&m.dns(), &m.in_cluster_dns()])?;
        }
        // What a controller reads etcd's member list with (the `etcd-client-tls` Secret).
        pki.leaf(dir, "etcd-client", &["etcd-client"])?;
        let mut plane = match control {
            Some(opts) => {
                // The controller's routes dial the members' pod names on the pod ports.
                for side in [Side::Source, Side::Destination] {
                    let rules: Vec<_> = (0..topology::MEMBERS)
                        .map(|index| MemberRef { side, index })
                        .flat_map(|m| {
                            [
                                (m.pod_ip(), 2380, m.peer_port()),
                                (m.pod_ip(), 2379, m.tls_client_port()),
                            ]
                        })
                        .collect();
                    topo.seed(side).pod_ports(&rules)?;
                    // The proxy's resolver reads the hosts file when it starts: the pod names
                    // must be there first.
                    let names: Vec<(String, String)> = (0..topology::MEMBERS)
                        .map(|index| MemberRef { side, index })
                        .map(|m| (m.pod_ip().to_string(), m.pod_dns()))
                        .collect();
                    topo.seed(side).set_hosts(&names)?;
                }
                Some(crate::control::ControlPlane::start(opts, &topo, dir).await?)
            }
            None => None,
        };
        let mut ingress = Vec::new();
        let [src, dst] = match plane.as_mut() {
            // The proxies read the controller's ConfigMap from their volumes; the tunnel's
            // ingress is a proxy of its own.
            Some(plane) => {
                let initial = proxy::controller_initial()?;
                let tunnel = proxy::render_tunnel_ingress()?;
                let mut started = Vec::new();
                for side in [Side::Source, Side::Destination] {
                    let seed = topo.seed(side);
                    let volume = &mut plane.seeds[idx(side)].volume;
                    let data = [(CONFIG_KEY.to_string(), initial.text.clone())].into();
                    volume.write(&data)?;
                    let log = dir.join(format!("proxy-{}.log", seed.label));
                    let p = SeedProxy::start_at(
                        proxy_bin,
                        seed,
                        volume.path(CONFIG_KEY),
                        log,
                        proxy::ADMIN_PORT,
                        &initial.hash,
                    )
                    .await?;
                    started.push(p);
                    let config = dir.join(format!("ingress-{}.json", seed.label));
                    std::fs::write(&config, &tunnel.text)
                        .map_err(|e| Error::io(config.display(), e))?;
                    let log = dir.join(format!("ingress-{}.log", seed.label));
                    ingress.push(
                        SeedProxy::start_at(
                            proxy_bin,
                            seed,
                            config,
                            log,
                            proxy::TUNNEL_ADMIN_PORT,
                            &tunnel.hash,
                        )
                        .await?,
                    );
                }
                started
                    .try_into()
                    .map_err(|_| Error::State("two proxies".into()))?
            }
            // Both proxies start with the listeners and no route; the planner adds the routes.
            None => {
                let src_file = proxy::render(Side::Source, &topo.source, &[])?;
                let dst_file = proxy::render(Side::Destination, &topo.destination, &[])?;
                [
                    SeedProxy::start(proxy_bin, &topo.source, dir, &src_file).await?,
                    SeedProxy::start(proxy_bin, &topo.destination, dir, &dst_file).await?,
                ]
            }
        };
        let migrations = [
            Migration::new(Side::Source, &topo),
            Migration::new(Side::Destination, &topo),
        ];
        let mut lab = Self {
            epoch,
            dir: dir.to_path_buf(),
            api: None,
            webhook: None,
            control: plane,
            members: Vec::new(),
            proxies: [src, dst],
            ingress,
            topo,
            migrations,
            cluster: Vec::new(),
            client: None,
            promoted: Vec::new(),
            pre_vote,
            phases: Vec::new(),
            timeline: Vec::new(),
            events: Vec::new(),
            fault: None,
            quorum: Vec::new(),
            advertised: HashMap::new(),
            rolled: Vec::new(),
            hold_promotion: false,
        };
        // The source cluster as a seed runs it before any migration: its members advertise
        // their in-cluster peer URLs only (the seeds' "cluster DNS" resolves those names from
        // the start). The exposure and the roll to the exposed URLs come at `Expose`.
        lab.write_hosts()?;
        lab.cluster = topology::source();
        let ic = lab.initial_cluster();
        for m in lab.cluster.clone() {
            let urls = lab.peer_urls(m);
            let member = Member::start(&lab.topo.source, dir, m, &urls, &ic, "new", pre_vote)?;
            lab.members.push(member);
        }
        // gardenlet's `Etcd` of the source: 3 replicas, none of isthmus' fields yet.
        lab.migrations[idx(Side::Source)].obs.etcd = Some(isthmus_controller::plan::EtcdObs {
            generation: 1,
            observed_generation: Some(1),
            ready: Some(true),
            fields: isthmus_controller::plan::EtcdFields {
                replicas: Some(3),
                ..Default::default()
            },
            ..Default::default()
        });
        for url in lab.urls(&lab.cluster.clone()) {
            etcd::wait_serving(&url, Duration::from_secs(60))
                .await
                .map_err(|e| lab.explain(e))?;
        }
        lab.record_membership().await;
        if let Some(opts) = control {
            // gardenlet's objects, then the controllers (as their ServiceAccount).
            lab.gardenlet_create().await?;
            if let Some(plane) = lab.control.as_mut() {
                plane.start_controllers(proxy_bin, &lab.topo, opts.replicas, dir)?;
            }
            lab.event(format!(
                "seed API servers ready; {} isthmus controller replica(s) per seed started",
                opts.replicas
            ));
        }
        // The shoot's webhook is called through the source seed's tunnel from the start: a
        // tunnel server process per seed, the shoot's agents reaching them through each seed's
        // proxy across a link with the same RTT.
        lab.webhook = Some(WebhookLab::start(lab.epoch, dir, proxy_bin, &lab.topo, rtt).await?);
        lab.event("tunnel: regular agent on the source server, webhook calls start");
        Ok(lab)
    }

    /// Runs one step of the tunnel handover and records it as an event.
    pub async fn tunnel(&mut self, step: TunnelStep) -> Result<()> {
        let Some(w) = self.webhook.as_mut() else {
            return Ok(());
        };
        let what = match step {
            TunnelStep::JoinTemporary => {
                w.join_temporary().await?;
                "tunnel: temporary agent joined the destination server"
            }
            TunnelStep::MoveToDestination => {
                w.move_to_destination().await?;
                "tunnel: webhook calls and the regular agent moved to the destination server"
            }
            TunnelStep::DrainTemporary { abort } => {
                w.drain_temporary(abort).await?;
                "tunnel: temporary agent drained and stopped"
            }
        };
        self.event(what);
        Ok(())
    }

    /// Milliseconds since the lab started.
    pub fn now_ms(&self) -> f64 {
        ms(self.epoch.elapsed())
    }

    /// Client URLs of `members`.
    pub fn urls(&self, members: &[MemberRef]) -> Vec<String> {
        self.topo.client_urls(members)
    }

    /// Opens a phase (closing the previous one).
    pub fn phase(&mut self, name: &str) {
        let now = self.now_ms();
        if let Some(last) = self.phases.last_mut() {
            last.2 = now;
        }
        tracing::info!(phase = name, t_ms = now as u64, "phase");
        self.phases.push((name.to_string(), now, now));
    }

    /// Opens a phase and records where the leader is and how many voters the cluster can
    /// lose there (asked of the voters; a cluster that does not answer within 2 s is recorded
    /// without a leader).
    pub async fn enter(&mut self, name: &str) {
        self.phase(name);
        let voters = self.voters();
        let urls = self.urls(&voters);
        let leader = tokio::time::timeout(Duration::from_secs(2), etcd::leader(&urls))
            .await
            .ok()
            .and_then(|r| r.ok())
            .filter(|l| !l.is_empty());
        let all = [topology::source(), topology::destination()].concat();
        let leader_seed = leader.as_ref().and_then(|l| {
            all.iter()
                .find(|m| &m.name() == l)
                .map(|m| self.topo.seed(m.side).label.clone())
        });
        let n = voters.len();
        let quorum = n / 2 + 1;
        let in_source = voters.iter().filter(|m| m.side == Side::Source).count();
        self.quorum.push(crate::report::Quorum {
            phase: name.to_string(),
            t_ms: self.now_ms(),
            leader,
            leader_seed,
            voters: n,
            quorum,
            margin: n.saturating_sub(quorum),
            voters_source: in_source,
            voters_destination: n - in_source,
        });
    }

    /// Records an event.
    pub fn event(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(%what, "event");
        let t_ms = self.now_ms();
        self.events.push(crate::report::Event { t_ms, what });
    }

    /// Closes the last phase.
    pub fn end_phases(&mut self) {
        let now = self.now_ms();
        if let Some(last) = self.phases.last_mut() {
            last.2 = now;
        }
    }

    /// Records the membership as etcd lists it now.
    pub async fn record_membership(&mut self) {
        // Ask the voters only: a learner that was just added is not serving yet, and the
        // client may send the list request to it (connection refused, seen in the abort
        // scenario right after the learner add). Voters list learners too.
        let urls = self.urls(&self.voters());
        match self.member_names(&urls).await {
            Ok(names) => {
                let t_ms = self.now_ms();
                self.timeline.push(Membership {
                    t_ms,
                    members: names,
                });
            }
            // The timeline is informative; a missing point is logged, not fatal.
            Err(e) => tracing::warn!(error = %e, "membership not recorded"),
        }
    }

    /// Member names as etcd lists them (learners marked), asked of `urls`.
    pub async fn member_names(&self, urls: &[String]) -> Result<Vec<String>> {
        let mut c = etcd::connect(urls).await?;
        Ok(etcd::list(&mut c).await?.iter().map(marked_name).collect())
    }

    /// The peer URLs `m` advertises now.
    pub fn peer_urls(&self, m: MemberRef) -> Vec<String> {
        self.advertised
            .get(&m)
            .cloned()
            .unwrap_or_else(|| vec![m.in_cluster_url()])
    }

    /// `--initial-cluster` of the members in the cluster, with the URLs they advertise.
    pub fn initial_cluster(&self) -> String {
        let entries: Vec<(MemberRef, Vec<String>)> = self
            .cluster
            .iter()
            .map(|m| (*m, self.peer_urls(*m)))
            .collect();
        initial_cluster(&entries)
    }

    /// Adds `m` as a learner advertising `urls` and starts it (the first half of a join).
    pub async fn add_learner(&mut self, m: MemberRef, urls: Vec<String>) -> Result<()> {
        let admin = etcd::connect(&self.urls(&self.voters())).await?;
        etcd::add_learner(&admin, m, &urls).await?;
        self.advertised.insert(m, urls.clone());
        // The new member asks the first peer that answers for the member list and exits if
        // that peer has not applied the addition yet ("member count is unequal", seen at 150 ms
        // RTT): start it only once every member lists it.
        for url in self.urls(&self.cluster.clone()) {
            etcd::retry(
                &format!("{url} lists {}", m.name()),
                Duration::from_secs(30),
                || async {
                    let mut c = etcd::connect(std::slice::from_ref(&url)).await?;
                    if etcd::list(&mut c).await?.iter().any(|l| m.listed_as(l)) {
                        Ok(())
                    } else {
                        Err(Error::State("not yet".into()))
                    }
                },
            )
            .await?;
        }
        self.cluster.push(m);
        let ic = self.initial_cluster();
        let member = Member::start(
            self.topo.seed(m.side),
            &self.dir,
            m,
            &urls,
            &ic,
            "existing",
            self.pre_vote,
        )?;
        self.members.push(member);
        self.record_membership().await;
        Ok(())
    }

    /// Promotes `m` once it caught up, and waits until it serves linearizable reads.
    pub async fn promote(&mut self, m: MemberRef) -> Result<()> {
        let admin = etcd::connect(&self.urls(&self.voters())).await?;
        etcd::promote(&admin, m)
            .await
            .map_err(|e| self.explain(e))?;
        self.promoted.push(m);
        let url = m.client_url(self.topo.seed(m.side));
        etcd::wait_serving(&url, Duration::from_secs(60)).await?;
        self.record_membership().await;
        Ok(())
    }

    /// Removes `m` from the cluster (quorum checked), then stops its process.
    pub async fn remove(&mut self, m: MemberRef) -> Result<()> {
        let rest: Vec<MemberRef> = self.cluster.iter().copied().filter(|x| *x != m).collect();
        let rest_voters: Vec<MemberRef> = self.voters().into_iter().filter(|x| *x != m).collect();
        let admin = etcd::connect(&self.urls(&rest)).await?;
        etcd::remove(&admin, m, &self.urls(&rest_voters)).await?;
        self.cluster.retain(|x| *x != m);
        self.promoted.retain(|x| *x != m);
        self.members.retain(|x| x.r != m);
        self.advertised.remove(&m);
        self.record_membership().await;
        Ok(())
    }

    /// `kill -9` of the current leader, then, after `down`, the restart kubelet would do: the
    /// same member on its data directory. Returns the killed member's name.
    pub async fn kill_leader_and_restart(&mut self, down: Duration) -> Result<String> {
        let leader = etcd::leader(&self.urls(&self.voters())).await?;
        let m = self
            .cluster
            .iter()
            .copied()
            .find(|m| m.name() == leader)
            .ok_or_else(|| Error::State(format!("leader {leader:?} is not a lab member")))?;
        let member = self
            .members
            .iter_mut()
            .find(|x| x.r == m)
            .ok_or_else(|| Error::State(format!("{leader} is not running")))?;
        member.kill9();
        self.event(format!("kill -9 of the leader {leader}"));
        tokio::time::sleep(down).await;
        self.members.retain(|x| x.r != m);
        // The data directory exists: etcd ignores --initial-cluster and rejoins as itself.
        let ic = self.initial_cluster();
        let urls = self.peer_urls(m);
        let seed = self.topo.seed(m.side);
        let restarted = Member::start(seed, &self.dir, m, &urls, &ic, "existing", self.pre_vote)?;
        self.members.push(restarted);
        let url = m.client_url(seed);
        etcd::wait_serving(&url, Duration::from_secs(60)).await?;
        self.event(format!("{leader} restarted on its data directory, serving"));
        Ok(leader)
    }

    /// Voting members (source members start as voters; others after promotion).
    pub fn voters(&self) -> Vec<MemberRef> {
        self.cluster
            .iter()
            .copied()
            .filter(|m| m.side == Side::Source || self.promoted.contains(m))
            .collect()
    }

    /// Adds the last lines of the members' logs to an error, so a failure can be read.
    pub fn explain(&self, e: Error) -> Error {
        let mut logs = String::new();
        for m in &self.cluster {
            let path = Member::log_path(&self.dir, *m);
            if let Ok(t) = std::fs::read_to_string(&path) {
                let tail: Vec<&str> = t.lines().rev().take(5).collect();
                logs += &format!(
                    "\n--- {}:\n{}",
                    path.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
        Error::State(format!("{e}{logs}"))
    }
}

/// A member's lab name, marked when it is a learner (the membership timeline's spelling).
pub fn marked_name(l: &etcd::Listed) -> String {
    let name = l.lab_name();
    if l.learner {
        format!("{name} (learner)")
    } else {
        name
    }
}
