//! The partial shapes of Gardener's `DNSRecord` (extensions.gardener.cloud/v1alpha1) and
//! etcd-druid's `Etcd` (druid.gardener.cloud/v1alpha1): only the fields isthmus writes or reads,
//! as JSON, so that fields we do not know are never dropped or overwritten. The `Etcd` field
//! names move between druid releases; [`DruidApi`] selects the spelling in one place.

use crate::crd::{DruidApi, MemberUrls, ObjectRef};
use crate::plan::{DnsRecordDesired, DnsRecordObs, DnsRecordSpec, EtcdFields, EtcdObs, TIMESTAMP};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Label on every object isthmus creates, with the owning migration's name as value; used to
/// find what to clean up.
pub const MIGRATION_LABEL: &str = "isthmus.dev/migration";

/// `DNSRecord` API resource.
pub fn dnsrecord_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("extensions.gardener.cloud", "v1alpha1", "DNSRecord"),
        "dnsrecords",
    )
}

/// `Etcd` API resource.
pub fn etcd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
        "etcds",
    )
}

/// The server-side-apply body of a `DNSRecord`.
pub fn dnsrecord_body(namespace: &str, migration: &str, d: &DnsRecordDesired) -> Value {
    let mut spec = json!({
        "type": d.spec.provider_type,
        "secretRef": {"name": d.spec.secret_ref.name, "namespace": d.spec.secret_ref.namespace},
        "name": d.spec.name,
        "recordType": d.spec.record_type,
        "values": d.spec.values,
    });
    if let (Some(zone), Some(obj)) = (&d.spec.zone, spec.as_object_mut()) {
        obj.insert("zone".into(), json!(zone));
    }
    json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "DNSRecord",
        "metadata": {
            "name": d.object_name,
            "namespace": namespace,
            "labels": {MIGRATION_LABEL: migration},
            "annotations": d.annotations,
        },
        "spec": spec,
    })
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn i64_at(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_i64()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a `DNSRecord` (the whole object as JSON).
pub fn dnsrecord_observe(obj: &Value) -> DnsRecordObs {
    let s = |k: &str| str_at(obj, &["spec", k]).unwrap_or_default().to_string();
    DnsRecordObs {
        spec: DnsRecordSpec {
            provider_type: s("type"),
            secret_ref: ObjectRef {
                name: str_at(obj, &["spec", "secretRef", "name"])
                    .unwrap_or_default()
                    .into(),
                namespace: str_at(obj, &["spec", "secretRef", "namespace"])
                    .unwrap_or_default()
                    .into(),
            },
            zone: str_at(obj, &["spec", "zone"]).map(String::from),
            name: s("name"),
            record_type: s("recordType"),
            values: strings(obj.pointer("/spec/values")),
        },
        timestamp: str_at(obj, &["metadata", "annotations", TIMESTAMP]).map(String::from),
        generation: i64_at(obj, &["metadata", "generation"]).unwrap_or(0),
        observed_generation: i64_at(obj, &["status", "observedGeneration"]),
        last_operation_state: str_at(obj, &["status", "lastOperation", "state"]).map(String::from),
    }
}

fn member_list(api: DruidApi, members: &[MemberUrls]) -> Value {
    Value::Array(
        members
            .iter()
            .map(|m| match api {
                DruidApi::AdditionalAdvertisePeerUrls => {
                    json!({"memberName": m.name, "urls": m.peer_urls})
                }
                DruidApi::AdditionalAdvertisedUrls => json!({"name": m.name, "urls": m.peer_urls}),
            })
            .collect(),
    )
}

/// The server-side-apply body of an `Etcd` carrying exactly `fields` (and `annotations`).
/// With no fields this is the "release" intent: everything we owned is given up.
pub fn etcd_body(
    name: &str,
    namespace: &str,
    api: DruidApi,
    fields: &EtcdFields,
    annotations: &BTreeMap<String, String>,
) -> Value {
    let mut spec = Map::new();
    let mut etcd = Map::new();
    if let Some(r) = fields.replicas {
        spec.insert("replicas".into(), json!(r));
    }
    if let Some(p) = &fields.member_name_prefix {
        spec.insert("memberNamePrefix".into(), json!(p));
    }
    if !fields.advertise.is_empty() {
        match api {
            DruidApi::AdditionalAdvertisePeerUrls => {
                etcd.insert(
                    "additionalAdvertisePeerUrls".into(),
                    member_list(api, &fields.advertise),
                );
            }
            DruidApi::AdditionalAdvertisedUrls => {
                let peer = json!({"members": member_list(api, &fields.advertise)});
                etcd.insert("additionalAdvertisedURLs".into(), json!({"peerURLs": peer}));
            }
        }
    }
    if !fields.bootstrap_members.is_empty() {
        let members: Vec<Value> = fields
            .bootstrap_members
            .iter()
            .map(|m| json!({"name": m.name, "peerUrls": m.peer_urls}))
            .collect();
        let clients: Vec<&String> = fields
            .bootstrap_members
            .iter()
            .flat_map(|m| &m.client_urls)
            .collect();
        etcd.insert(
            "bootstrapWithExistingCluster".into(),
            json!({"members": members, "clientEndpoints": clients}),
        );
    }
    if let Some(skip) = fields.skip_client_san_verification {
        etcd.insert(
            "peerUrlTls".into(),
            json!({"skipClientSANVerification": skip}),
        );
    }
    if !etcd.is_empty() {
        spec.insert("etcd".into(), Value::Object(etcd));
    }
    let mut body = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
    });
    if let (false, Some(obj)) = (spec.is_empty(), body.as_object_mut()) {
        obj.insert("spec".into(), Value::Object(spec));
    }
    body
}

fn read_members(api: DruidApi, v: Option<&Value>) -> Vec<MemberUrls> {
    let key = match api {
        DruidApi::AdditionalAdvertisePeerUrls => "memberName",
        DruidApi::AdditionalAdvertisedUrls => "name",
    };
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| MemberUrls {
                    name: str_at(m, &[key]).unwrap_or_default().into(),
                    peer_urls: strings(m.get("urls")),
                    client_urls: Vec::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads an `Etcd` (the whole object as JSON).
pub fn etcd_observe(obj: &Value, api: DruidApi) -> EtcdObs {
    let advertise = match api {
        DruidApi::AdditionalAdvertisePeerUrls => {
            read_members(api, obj.pointer("/spec/etcd/additionalAdvertisePeerUrls"))
        }
        DruidApi::AdditionalAdvertisedUrls => read_members(
            api,
            obj.pointer("/spec/etcd/additionalAdvertisedURLs/peerURLs/members"),
        ),
    };
    let clients = strings(obj.pointer("/spec/etcd/bootstrapWithExistingCluster/clientEndpoints"));
    let bootstrap_members = obj
        .pointer("/spec/etcd/bootstrapWithExistingCluster/members")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| MemberUrls {
                    name: str_at(m, &["name"]).unwrap_or_default().into(),
                    peer_urls: strings(m.get("peerUrls")),
                    client_urls: Vec::new(),
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    // clientEndpoints is one list for all members; give it back in member order (one each)
    // so it compares equal with what we applied.
    let bootstrap_members = attach_clients(bootstrap_members, &clients);
    EtcdObs {
        generation: i64_at(obj, &["metadata", "generation"]).unwrap_or(0),
        observed_generation: i64_at(obj, &["status", "observedGeneration"]),
        ready_replicas: i64_at(obj, &["status", "readyReplicas"])
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or(0),
        members: cluster_members(obj),
        fields: EtcdFields {
            replicas: i64_at(obj, &["spec", "replicas"]).and_then(|r| i32::try_from(r).ok()),
            member_name_prefix: str_at(obj, &["spec", "memberNamePrefix"]).map(String::from),
            bootstrap_members,
            advertise,
            skip_client_san_verification: obj
                .pointer("/spec/etcd/peerUrlTls/skipClientSANVerification")
                .and_then(Value::as_bool),
        },
        timestamp: str_at(obj, &["metadata", "annotations", TIMESTAMP]).map(String::from),
    }
}

/// Members of the etcd cluster as druid reports them: its own pods' members
/// (`status.members`) plus the source members it joined
/// (`status.bootstrapWithExistingClusterMembers`, cleared by druid once it removed them after
/// Shrink).
fn cluster_members(obj: &Value) -> Vec<String> {
    let names = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| str_at(m, &["name"]).map(String::from))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let mut all = names("/status/members");
    for n in names("/status/bootstrapWithExistingClusterMembers") {
        if !all.contains(&n) {
            all.push(n);
        }
    }
    all
}

fn attach_clients(mut members: Vec<MemberUrls>, clients: &[String]) -> Vec<MemberUrls> {
    if members.len() == clients.len() {
        for (m, c) in members.iter_mut().zip(clients) {
            m.client_urls = vec![c.clone()];
        }
    }
    members
}
