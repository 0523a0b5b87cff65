//! The pure planner: `(spec, observed objects) → desired objects + status`. No I/O, no clock,
//! no Kubernetes client: every input is plain data, so the kube adapter and a local backend
//! (hosts file, proxy YAML file, real etcd membership calls) drive the same decisions.
//!
//! Layers, bottom up: `names` and `conditions` (spelling, condition bookkeeping), `ctx` (the
//! context one pass shares and the helpers every part uses), `release` and `abort` (how an
//! exposure goes, how an abort is carried out), `roles` (what each role wants at each step),
//! `steps` (assembling the plan, and the one place that dispatches on role and step). Beside
//! them: `needs` (what to observe first), `validate` (what is refused), `request` (when to ask
//! a Gardener controller to reconcile), `druid` (what the `Etcd` says of etcd-druid itself: a
//! suspended spec reconciliation, a scale operation in progress).
//!
//! The desired state of a step is cumulative (Grow also wants everything Expose and Join
//! wanted), so planning is idempotent and resumes from any point: after a restart the same
//! observed objects give the same plan. Observation only gates *order* inside a step (the
//! destination `Etcd` is not created before its members are reachable) and readiness.
//!
//! # Driving it without Kubernetes (a local backend)
//!
//! ```
//! use isthmus_controller::crd::*;
//! use isthmus_controller::plan::{self, EtcdAction, Observed};
//! use isthmus_controller::proxy_config::{render, Layout};
//!
//! let spec = EtcdMigrationSpec {
//!     role: Role::Source,
//!     step: Step::Expose,
//!     etcd_name: "etcd-main".into(),
//!     seed_name: "seed-a".into(),
//!     internal_domain: "lab.internal".into(),
//!     members: 3,
//!     dns: DnsProvider {
//!         provider_type: "hosts-file".into(),
//!         secret_ref: ObjectRef { name: "-".into(), namespace: "-".into() },
//!         zone: None,
//!     },
//!     load_balancer: ObjectRef { name: "-".into(), namespace: "-".into() },
//!     ports: PortScheme::default(),
//!     destination: None,
//!     vpn: None,
//!     druid_api: DruidApi::default(),
//!     override_default_url: false,
//!     seed_ingress: None,
//!     allowed_sources: Vec::new(),
//! };
//! let mut obs = Observed {
//!     namespace: "shoot".into(),
//!     now: "2026-01-01T00:00:00Z".into(),
//!     lb_address: Some("10.0.0.1".into()),
//!     ..Observed::default()
//! };
//! let p = plan::plan(&spec, &obs);
//! // 1. DNS: write `p.dns_records[i].spec.name -> values[0]` into the hosts file, drop
//! //    `p.dns_deletions`, then report them in `obs.dns_records` (ready once written).
//! assert_eq!(p.dns_records[0].spec.name, "etcd-main-0.shoot.seed-a.lab.internal");
//! // 2. Proxy: write the rendered file where the proxy watches it; once its `/config` hash
//! //    equals `file.hash`, set `obs.served_routes = Some(p.routes.clone())`.
//! let file = render(&Layout::standard(spec.ports, 3, 8443, "127.0.0.1:9901".parse().unwrap()), &p.routes).unwrap();
//! assert!(file.text.contains("peer-2381"));
//! // 3. etcd: act on `p.etcd` (restart members with the extra peer URLs, `member add` with
//! //    the bootstrap members, ...) and `p.members_to_remove`; describe the result in `obs.etcd`.
//! assert!(matches!(p.etcd, EtcdAction::Keep)); // no Etcd observed yet
//! // 4. Keep the status for the next pass, and repeat until `status.step_ready`.
//! obs.previous = p.status;
//! assert!(!obs.previous.step_ready);
//! ```

mod abort;
pub mod conditions;
mod ctx;
mod druid;
pub mod names;
mod needs;
mod overwrite;
mod release;
pub mod request;
mod roles;
mod seed_rules;
mod steps;
pub mod validate;
mod vpn_server;

use crate::crd::{EtcdMigrationStatus, MemberUrls, ObjectRef, Step};

use std::collections::BTreeMap;

pub use abort::SOURCE_ABORT_GRACE_SECS;
pub use names::{
    members, members_named, routes, server_port, Member, MemberRoute, DRUID_SERVER_PORT, VPN_RECORD,
};
pub use needs::{needs, Needs};
pub use overwrite::{lacking, EtcdApplied, BOOTSTRAP_REMOVED, REASSERTED, REPLICAS_RAISED};
pub use release::source_cleanup_started;
pub use steps::{plan, wanted_routes};
pub use validate::{validate, SeedRules, SpecProblem};

/// Annotation that asks a Gardener controller to reconcile (Gardener's extensions: the
/// `DNSRecord`s). On an `Etcd` it is etcd-druid's deprecated spelling, still accepted and
/// removed (etcd-druid `api/core/v1alpha1/constants.go`, `GardenerOperationAnnotation`), and
/// the one gardenlet writes and its health check reads (gardener
/// `pkg/component/etcd/etcd/etcd.go` `Deploy`, `waiter.go` `CheckEtcdObject`).
pub const OPERATION: &str = "gardener.cloud/operation";
/// etcd-druid's own reconcile request, the one isthmus writes on an `Etcd` (etcd-druid
/// `api/core/v1alpha1/constants.go`, `DruidOperationAnnotation`).
pub const DRUID_OPERATION: &str = "druid.gardener.cloud/operation";
/// Both spellings of a reconcile request on an `Etcd`: etcd-druid acts on either and removes
/// both (`api/core/v1alpha1/helper.go`, `HasReconcileOperationAnnotation`,
/// `RemoveOperationAnnotation`), so either one is a request still pending.
pub const ETCD_OPERATIONS: [&str; 2] = [DRUID_OPERATION, OPERATION];
/// While an `Etcd` carries this annotation (any value), etcd-druid skips every spec
/// reconciliation, the creation's included, and leaves a request pending (etcd-druid
/// `internal/controller/etcd/reconcile_spec.go`, `shouldReconcileSpec`).
pub const SUSPEND_SPEC_RECONCILE: &str = "druid.gardener.cloud/suspend-etcd-spec-reconcile";
/// Annotation with the time of the request, so a repeated request is a change. Written on
/// `DNSRecord`s only: on an `Etcd` it is gardenlet's (its `Scale()` requires the value it last
/// wrote, `pkg/component/etcd/etcd/etcd.go`).
pub const TIMESTAMP: &str = "gardener.cloud/timestamp";
/// Annotation without which Gardener's webhooks refuse deleting a `DNSRecord` or `Etcd`.
pub const CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";

/// What the planner needs to know about the world.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Namespace of the migration (the shoot's namespace on this seed).
    pub namespace: String,
    /// Current time, RFC 3339; used for annotations, condition times and the join timeout.
    pub now: String,
    /// The migration's `metadata.generation`, echoed as `status.observedGeneration`.
    pub generation: Option<i64>,
    /// The proxy load balancer's address (IP or host name), once it has one.
    pub lb_address: Option<String>,
    /// Our `DNSRecord`s that exist, by object name.
    pub dns_records: BTreeMap<String, DnsRecordObs>,
    /// This migration's routes in the proxy file that *every* proxy pod serves; `None` when
    /// the pods do not all serve one file yet. Exposure is ready when they equal the plan's
    /// routes, and gone when they are empty.
    pub served_routes: Option<Vec<MemberRoute>>,
    /// The `Etcd` named in the spec, if it exists.
    pub etcd: Option<EtcdObs>,
    /// etcd's own member list and leader, read through the client exposure; `None` when it
    /// could not be read (or was not asked for yet).
    pub etcd_cluster: Option<EtcdCluster>,
    /// What isthmus last applied to that `Etcd`, if the controller remembers it (not after a
    /// restart; never in a local backend): which fields it had there, for `EtcdSpecOverwritten`.
    pub etcd_applied: Option<EtcdApplied>,
    /// The status as last written (conditions carry their transition times forward).
    pub previous: EtcdMigrationStatus,
}

/// One member as etcd lists it (`MemberList`). A learner that has not started yet has no name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdMember {
    /// Member ID.
    pub id: u64,
    /// Member name (empty until the member started).
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
    /// A learner (not a voter).
    pub is_learner: bool,
}

/// etcd's own view of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdCluster {
    /// Every member, learners included.
    pub members: Vec<EtcdMember>,
    /// The leader's member ID, if the answering member knows one.
    pub leader: Option<u64>,
    /// The answering member's etcd version (`/v3/maintenance/status` `version`, `3.5.27`).
    pub version: Option<String>,
}

impl EtcdCluster {
    /// The listed member that is `m` (by name, or by peer URL for a learner without a name).
    pub fn find(&self, m: &MemberUrls) -> Option<&EtcdMember> {
        self.members.iter().find(|e| {
            (!e.name.is_empty() && e.name == m.name)
                || e.peer_urls.iter().any(|u| m.peer_urls.contains(u))
        })
    }
}

/// An operation on etcd itself that the controller carries out through etcd's API (etcd-druid
/// does not): moving leadership before the source members go, removing members of an abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdOp {
    /// Transfer leadership to this member (ID) before members leave (removing the leader
    /// forces an election that stalls requests).
    MoveLeader {
        /// Target member ID.
        to: u64,
        /// The current leader's exposed client URL: etcd accepts the transfer only there.
        via: String,
        /// The target's name, for logs.
        name: String,
    },
    /// Remove this member (abort: the learners this migration added).
    Remove {
        /// Member ID.
        id: u64,
        /// Its name or peer URL, for logs.
        name: String,
    },
}

/// The part of a `DNSRecord` spec we own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsRecordSpec {
    /// Provider type.
    pub provider_type: String,
    /// Credentials.
    pub secret_ref: ObjectRef,
    /// Hosted zone, if pinned.
    pub zone: Option<String>,
    /// Fully qualified name.
    pub name: String,
    /// `A`, `AAAA` or `CNAME`.
    pub record_type: String,
    /// Addresses or the CNAME target.
    pub values: Vec<String>,
}

/// An existing `DNSRecord`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsRecordObs {
    /// Its spec as far as we own it.
    pub spec: DnsRecordSpec,
    /// Its `gardener.cloud/timestamp`.
    pub timestamp: Option<String>,
    /// Its `gardener.cloud/operation`, while the extension has not picked the request up.
    pub operation: Option<String>,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.lastOperation.state` (`Succeeded`, `Processing`, `Error`, ...).
    pub last_operation_state: Option<String>,
}

impl DnsRecordObs {
    /// The provider has applied this spec.
    pub fn ready(&self) -> bool {
        self.observed_generation == Some(self.generation)
            && self.last_operation_state.as_deref() == Some("Succeeded")
    }
}

/// A `DNSRecord` to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsRecordDesired {
    /// Object name.
    pub object_name: String,
    /// Spec.
    pub spec: DnsRecordSpec,
    /// Annotations to own: a fresh `gardener.cloud/timestamp` when the spec changes, the
    /// existing one otherwise. The reconcile request is written after the apply ([`request`]).
    pub annotations: BTreeMap<String, String>,
}

/// The `Etcd` fields isthmus owns (everything else belongs to gardenlet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdFields {
    /// `spec.replicas`.
    pub replicas: Option<i32>,
    /// Member-name prefix (destination).
    pub member_name_prefix: Option<String>,
    /// `bootstrapWithExistingCluster.members`; empty means the field is not set.
    pub bootstrap_members: Vec<MemberUrls>,
    /// Extra advertised URLs per member; empty means not set.
    pub advertise: Vec<MemberUrls>,
    /// `peerUrlTls.skipClientSANVerification`.
    pub skip_client_san_verification: Option<bool>,
}

/// An observed `Etcd`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdObs {
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// Member names druid reports for its own pods (`status.members`). Who is a member of
    /// the etcd cluster is read from etcd itself ([`Observed::etcd_cluster`]).
    pub members: Vec<String>,
    /// Our fields as they are now.
    pub fields: EtcdFields,
    /// The members' peer port, `spec.etcd.serverPort` or etcd-druid's default
    /// ([`names::server_port`]); `None` only where no `Etcd` was read (a default value).
    pub server_port: Option<u16>,
    /// Its `gardener.cloud/timestamp` (gardenlet's: isthmus never writes it on an `Etcd`).
    pub timestamp: Option<String>,
    /// Its reconcile request, `druid.gardener.cloud/operation` or the deprecated
    /// `gardener.cloud/operation` (`reconcile` if either asks for it), while etcd-druid has not
    /// picked it up.
    pub operation: Option<String>,
    /// `status.ready`.
    pub ready: Option<bool>,
    /// Number of `status.lastErrors`.
    pub last_errors: usize,
    /// `status.conditions[AllMembersUpdated].status == "True"`, if the condition exists
    /// (`Unknown` reads as `false`).
    pub all_members_updated: Option<bool>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.bootstrapWithExistingCluster.joinedAt`: etcd-druid recorded the join (once).
    pub joined_at: Option<String>,
    /// It carries `druid.gardener.cloud/suspend-etcd-spec-reconcile` ([`SUSPEND_SPEC_RECONCILE`]):
    /// etcd-druid acts on none of its specs until the annotation is gone.
    pub suspended: bool,
    /// The scale operation etcd-druid reports in progress: the reason of
    /// `ScaleOperationComplete=False` (`ScalingIn`, `ScalingOut`, `BootstrapMembersRemoval`;
    /// etcd-druid#1426, not in v0.38.1). `None` when `True` or absent.
    pub scale_operation: Option<String>,
    /// isthmus' field manager has applied to it (its `managedFields` hold an `isthmus` /
    /// `Apply` entry): on the destination, isthmus created it, so a missing bootstrap block
    /// was removed by another writer (`overwrite`), not left out at creation.
    pub applied_by_isthmus: bool,
}

impl EtcdObs {
    /// etcd-druid has acted on the current generation.
    pub fn synced(&self) -> bool {
        self.observed_generation == Some(self.generation)
    }

    /// Ready as Gardener's waiter reads an `Etcd` (gardener v1.149.3
    /// `pkg/component/etcd/etcd/waiter.go`, `CheckEtcdObject`): no `lastErrors`, not being
    /// deleted, druid observed this generation, no operation annotation left (either
    /// spelling: druid removes both), and unless `replicas` is 0, `AllMembersUpdated` present
    /// and `True` and `status.ready`.
    pub fn gardener_ready(&self) -> bool {
        let hibernated = self.fields.replicas == Some(0);
        self.last_errors == 0
            && !self.deleting
            && self.synced()
            && self.operation.is_none()
            && (hibernated || self.all_members_updated == Some(true) && self.ready == Some(true))
    }
}

/// What to do with the `Etcd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdAction {
    /// Leave it alone.
    Keep,
    /// Own exactly these fields (server-side apply: fields we owned and omit are removed).
    /// No annotation is owned: the reconcile request is written after the apply ([`request`]),
    /// and `gardener.cloud/timestamp` is gardenlet's (its `Scale()` requires the value it last
    /// wrote, gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`).
    Apply {
        /// The fields.
        fields: EtcdFields,
    },
    /// Give up every field we own (apply an empty intent); etcd-druid rolls the members back
    /// (the source's abort).
    Release,
    /// Confirm and delete it (abort on the destination only).
    Delete,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The step actually planned (a refused `Abort` plans the previous step).
    pub step: Step,
    /// `DNSRecord`s to apply.
    pub dns_records: Vec<DnsRecordDesired>,
    /// `DNSRecord` object names to confirm and delete (only those that exist).
    pub dns_deletions: Vec<String>,
    /// This migration's proxy routes; empty means none. A released exposure keeps the members'
    /// routes until etcd-druid rolled the members back to their in-cluster URLs.
    pub routes: Vec<MemberRoute>,
    /// The `Etcd`.
    pub etcd: EtcdAction,
    /// Apply the `Etcd` with force: the destination's abort, whose `replicas: 0` must win over
    /// a `replicas` gardenlet's `Deploy` raised (then its manager's) — the `Etcd` is deleted
    /// next. Every other write is never forced.
    pub force_etcd: bool,
    /// etcd members that must leave the cluster. At Shrink etcd-druid removes them in
    /// Kubernetes (after the bootstrap members are cleared); a local backend calls
    /// `member remove` itself, after moving leadership to a member that stays.
    pub members_to_remove: Vec<String>,
    /// Operations on etcd the controller itself carries out now (see [`EtcdOp`]).
    pub etcd_ops: Vec<EtcdOp>,
    /// The status to write.
    pub status: EtcdMigrationStatus,
}
