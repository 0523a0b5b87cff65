//! What a pass must observe before [`super::plan`] that costs more than reading objects:
//! etcd's own member list and leader, read through the client exposure (a TLS round trip per
//! endpoint, and a timeout while the exposure does not work yet). Asked only where the plan
//! reads it, through the URLs that reach the cluster first.

use super::abort::released;
use super::ctx::{member_prefix, server_port};
use super::names::members_named;
use super::release::source_cleanup_started;
use super::Observed;
use crate::crd::{EtcdMigrationSpec, Role, Step};

/// What to observe before planning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Client URLs (`https://host:port`) to read etcd's member list and leader through, in
    /// the order to try them; empty when this pass does not need them. The source members'
    /// come first on the destination: they are voters from the start.
    pub etcd_endpoints: Vec<String>,
}

/// What `plan(spec, obs)` needs that `obs` does not hold yet. Put the member list into
/// [`Observed::etcd_cluster`] (`None` when no endpoint answered), then plan.
pub fn needs(spec: &EtcdMigrationSpec, obs: &Observed) -> Needs {
    let wanted = match (spec.role, spec.step) {
        // An abort removes the members it added, until it saw them gone (its release then
        // deletes the names etcd is read through).
        (Role::Source, Step::Abort) => !released(obs),
        (Role::Destination, Step::Abort) => obs.etcd.is_some(),
        // Whether a source member is still in the cluster, until the cleanup began.
        (Role::Source, Step::Complete) => !source_cleanup_started(&obs.previous),
        // Before the `Etcd` is created: the source cluster's version, when one is declared.
        (Role::Destination, Step::Join | Step::Grow | Step::Shrink) => {
            obs.etcd.is_some()
                || spec
                    .destination
                    .as_ref()
                    .is_some_and(|d| d.etcd_version.is_some())
        }
        _ => false,
    };
    if !wanted {
        return Needs::default();
    }
    let sources = spec
        .destination
        .iter()
        .flat_map(|d| d.source_members.iter())
        .flat_map(|m| m.client_urls.iter().cloned());
    let own = members_named(
        spec,
        &obs.namespace,
        member_prefix(spec, obs).as_deref(),
        server_port(spec, obs),
    )
    .into_iter()
    .map(|m| m.client_url());
    Needs {
        etcd_endpoints: sources.chain(own).collect(),
    }
}
