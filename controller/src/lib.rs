//! isthmus-controller: turns "migrate this shoot's etcd" into objects on one seed — a
//! `DNSRecord` per exposed etcd member and for the temporary VPN, routes in the shared isthmus
//! proxy config, the migration fields of etcd-druid's `Etcd`, and the Service that opens the
//! shoot namespace's NetworkPolicies to the proxies — step by step, resumable, and
//! cleaned up afterwards. It must never terminate or inspect etcd traffic, never delete an
//! object it did not create, and never delete a `DNSRecord` or `Etcd` without the Gardener
//! deletion confirmation.
//!
//! # Layers
//! - [`access`]: what the orchestrator grants the controller in a shoot namespace (a `Role`
//!   and `RoleBinding` per migration): the controller's writes and its one Secret read.
//! - [`crd`]: the `EtcdMigration` resource (`isthmus.dev/v1alpha1`), plain serde data.
//! - [`plan`]: the pure planner. **This is the API a non-Kubernetes backend drives**:
//!   check the spec with [`plan::validate`], build a [`plan::Observed`] (LB address,
//!   existing DNS records, whether every proxy serves the routes, the `Etcd`'s state, the last
//!   status, and etcd's member list where [`plan::needs`] asks for it), call [`plan::plan`]
//!   once, and carry out the [`plan::Plan`]: apply/delete DNS records (a local
//!   backend writes a hosts file), serve [`plan::Plan::routes`] (render them with
//!   [`proxy_config::render`] into the proxy's JSON file), act on [`plan::EtcdAction`] (a local
//!   backend changes real etcd membership; [`plan::Plan::members_to_remove`] lists members to
//!   `member remove` after moving leadership to a member that stays), and store
//!   [`plan::Plan::status`] as the next `previous`. Call again until `status.step_ready`.
//! - [`proxy_config`]: renders all migrations' routes into the proxy ConfigMap's JSON (from the
//!   proxy's own schema, checked once) and its hash.
//! - [`gardener`]: the partial, versioned JSON shapes of `DNSRecord` and `Etcd`.
//! - [`network`]: the Service per shoot namespace from which gardener-resource-manager makes
//!   the NetworkPolicies that let the proxies reach the migrating etcd members.
//! - [`tunnel_server`]: the temporary VPN's tunnel server of a destination migration that asks
//!   for one (`spec.vpn.server`): the objects gardenlet would make for `vpn-seed-server`.
//! - [`load_balancer`]: when the proxies' LoadBalancer Service is needed (made on demand).
//! - [`kube_adapter`]: the kube-rs controller (server-side apply, finalizer, status, metrics,
//!   leader election, proxy `/config` hash probes).

#![forbid(unsafe_code)]

pub mod access;
pub mod crd;
pub mod gardener;
pub mod kube_adapter;
pub mod load_balancer;
pub mod network;
pub mod plan;
pub mod proxy_config;
pub mod tunnel_server;
