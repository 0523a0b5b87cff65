//! The partial shapes of Gardener's `DNSRecord` (extensions.gardener.cloud/v1alpha1) and
//! etcd-druid's `Etcd` (druid.gardener.cloud/v1alpha1): only the fields isthmus writes or reads,
//! as JSON, so that fields we do not know are never dropped or overwritten. The `Etcd` field
//! names move between druid releases; [`DruidApi`] selects the spelling in one place. The
//! shapes are checked against the pinned upstream CRDs by the tests that run a real
//! kube-apiserver (`controller/tests/apiserver_*.rs`).

use crate::crd::{DruidApi, EtcdMigrationSpec, MemberUrls, ObjectRef, Role};
use crate::plan::{
    DnsRecordDesired, DnsRecordObs, DnsRecordSpec, EtcdFields, EtcdObs, ETCD_OPERATIONS, OPERATION,
    SUSPEND_SPEC_RECONCILE, TIMESTAMP,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Map, Value};

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
        operation: str_at(obj, &["metadata", "annotations", OPERATION]).map(String::from),
        generation: i64_at(obj, &["metadata", "generation"]).unwrap_or(0),
        observed_generation: i64_at(obj, &["status", "observedGeneration"]),
        last_operation_state: str_at(obj, &["status", "lastOperation", "state"]).map(String::from),
    }
}

/// `additionalAdvertisePeerURLs` (druid API v0.38): `[{memberName, urls}]`.
fn peer_url_list(members: &[MemberUrls]) -> Value {
    Value::Array(
        members
            .iter()
            .map(|m| json!({"memberName": m.name, "urls": m.peer_urls}))
            .collect(),
    )
}

/// `additionalAdvertisedURLs.{peerURLs,clientURLs}` (druid's newer API): `{overrideDefaultURL,
/// members: [{name, urls}]}`; `clientURLs` only for members with client URLs.
fn advertised_urls(members: &[MemberUrls], override_default: bool) -> Value {
    let side = |pick: fn(&MemberUrls) -> &Vec<String>| {
        let list: Vec<Value> = members
            .iter()
            .filter(|m| !pick(m).is_empty())
            .map(|m| json!({"name": m.name, "urls": pick(m)}))
            .collect();
        let mut o = Map::new();
        if override_default {
            o.insert("overrideDefaultURL".into(), json!(true));
        }
        o.insert("members".into(), Value::Array(list.clone()));
        (!list.is_empty()).then_some(Value::Object(o))
    };
    let mut out = Map::new();
    if let Some(p) = side(|m| &m.peer_urls) {
        out.insert("peerURLs".into(), p);
    }
    if let Some(c) = side(|m| &m.client_urls) {
        out.insert("clientURLs".into(), c);
    }
    Value::Object(out)
}

/// The server-side-apply body of an `Etcd` carrying exactly `fields`, in
/// the druid API generation and with the `overrideDefaultURL` choice of `spec`. On the
/// destination the body also carries `spec.destination.etcdTemplate`, so that our first apply
/// can create the `Etcd` complete (druid accepts `bootstrapWithExistingCluster` and
/// `memberNamePrefix` only at creation) and later applies keep co-owning what it created.
/// With no fields (source) this is the "release" intent: everything we owned is given up.
pub fn etcd_body(spec: &EtcdMigrationSpec, namespace: &str, fields: &EtcdFields) -> Value {
    let template = spec
        .destination
        .as_ref()
        .and_then(|d| d.etcd_template.as_ref())
        .filter(|_| spec.role == Role::Destination);
    let mut body_spec = match template.map(|t| &t.spec) {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    };
    let mut etcd = match body_spec.remove("etcd") {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    if let Some(r) = fields.replicas {
        body_spec.insert("replicas".into(), json!(r));
    }
    if let Some(p) = &fields.member_name_prefix {
        body_spec.insert("memberNamePrefix".into(), json!(p));
    }
    if !fields.advertise.is_empty() {
        match spec.druid_api {
            DruidApi::AdditionalAdvertisePeerUrls => {
                etcd.insert(
                    "additionalAdvertisePeerURLs".into(),
                    peer_url_list(&fields.advertise),
                );
            }
            DruidApi::AdditionalAdvertisedUrls => {
                etcd.insert(
                    "additionalAdvertisedURLs".into(),
                    advertised_urls(&fields.advertise, spec.override_default_url),
                );
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
        let mut tls = match etcd.remove("peerUrlTls") {
            Some(Value::Object(o)) => o,
            _ => Map::new(),
        };
        tls.insert("skipClientSANVerification".into(), json!(skip));
        etcd.insert("peerUrlTls".into(), Value::Object(tls));
    }
    if !etcd.is_empty() {
        body_spec.insert("etcd".into(), Value::Object(etcd));
    }
    let mut all_annotations = template.map(|t| t.annotations.clone()).unwrap_or_default();
    // The reconcile request is never part of the apply (`plan::request`), in either spelling,
    // and the timestamp is gardenlet's: owning a value it later changes would make every
    // apply a conflict, and its `Scale()` requires the value it wrote.
    for k in ETCD_OPERATIONS.iter().chain([&TIMESTAMP]) {
        all_annotations.remove(*k);
    }
    let mut metadata = json!({
        "name": spec.etcd_name,
        "namespace": namespace,
        "annotations": all_annotations,
    });
    if let (Some(t), Some(m)) = (template, metadata.as_object_mut()) {
        m.insert("labels".into(), json!(t.labels));
    }
    let mut body = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": metadata,
    });
    if let (false, Some(obj)) = (body_spec.is_empty(), body.as_object_mut()) {
        obj.insert("spec".into(), Value::Object(body_spec));
    }
    body
}

fn read_members(v: Option<&Value>, name_key: &str) -> Vec<(String, Vec<String>)> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        str_at(m, &[name_key]).unwrap_or_default().to_string(),
                        strings(m.get("urls")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The advertised members as applied, whichever API generation wrote them.
fn read_advertised(obj: &Value, api: DruidApi) -> Vec<MemberUrls> {
    match api {
        DruidApi::AdditionalAdvertisePeerUrls => read_members(
            obj.pointer("/spec/etcd/additionalAdvertisePeerURLs"),
            "memberName",
        )
        .into_iter()
        .map(|(name, peer_urls)| MemberUrls {
            name,
            peer_urls,
            client_urls: Vec::new(),
        })
        .collect(),
        DruidApi::AdditionalAdvertisedUrls => {
            let base = "/spec/etcd/additionalAdvertisedURLs";
            let peers = read_members(obj.pointer(&format!("{base}/peerURLs/members")), "name");
            let clients = read_members(obj.pointer(&format!("{base}/clientURLs/members")), "name");
            peers
                .into_iter()
                .map(|(name, peer_urls)| MemberUrls {
                    client_urls: clients
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, u)| u.clone())
                        .unwrap_or_default(),
                    name,
                    peer_urls,
                })
                .collect()
        }
    }
}

/// Reads an `Etcd` (the whole object as JSON).
pub fn etcd_observe(obj: &Value, api: DruidApi) -> EtcdObs {
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
    let find = |t: &str| {
        obj.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|c| str_at(c, &["type"]) == Some(t)))
    };
    let condition = |t: &str| find(t).map(|c| str_at(c, &["status"]) == Some("True"));
    // etcd-druid#1426 (DEP-08): `False` with the operation as reason while one runs.
    let scale_operation = find("ScaleOperationComplete")
        .filter(|c| str_at(c, &["status"]) == Some("False"))
        .map(|c| str_at(c, &["reason"]).unwrap_or_default().to_string());
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
            advertise: read_advertised(obj, api),
            skip_client_san_verification: obj
                .pointer("/spec/etcd/peerUrlTls/skipClientSANVerification")
                .and_then(Value::as_bool),
        },
        server_port: Some(crate::plan::server_port(&obj["spec"])),
        timestamp: str_at(obj, &["metadata", "annotations", TIMESTAMP]).map(String::from),
        operation: etcd_operation(obj),
        ready: obj.pointer("/status/ready").and_then(Value::as_bool),
        last_errors: obj
            .pointer("/status/lastErrors")
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        all_members_updated: condition("AllMembersUpdated"),
        deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
        joined_at: str_at(obj, &["status", "bootstrapWithExistingCluster", "joinedAt"])
            .map(String::from),
        // Present with any value (etcd-druid `api/core/v1alpha1/helper.go`,
        // `GetSuspendEtcdSpecReconcileAnnotationKey`: `metav1.HasAnnotation`).
        suspended: obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(SUSPEND_SPEC_RECONCILE))
            .is_some(),
        scale_operation,
        applied_by_isthmus: false,
    }
}

/// Whether field manager `manager` has server-side applied to the object (an `Apply` entry in
/// its `metadata.managedFields`).
pub fn applied_by(obj: &Value, manager: &str) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries.iter().any(|e| {
                str_at(e, &["manager"]) == Some(manager)
                    && str_at(e, &["operation"]) == Some("Apply")
            })
        })
}

/// The reconcile request an `Etcd` carries in either spelling (etcd-druid acts on both and
/// removes both): `reconcile` when one of them asks for it, else the value of whichever is
/// set, else `None`.
fn etcd_operation(obj: &Value) -> Option<String> {
    let values: Vec<&str> = ETCD_OPERATIONS
        .iter()
        .filter_map(|k| str_at(obj, &["metadata", "annotations", k]))
        .collect();
    values
        .iter()
        .find(|v| **v == "reconcile")
        .or(values.first())
        .map(|v| v.to_string())
}

/// Member names etcd-druid reports for its own pods (`status.members`).
fn cluster_members(obj: &Value) -> Vec<String> {
    obj.pointer("/status/members")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| str_at(m, &["name"]).map(String::from))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
}

fn attach_clients(mut members: Vec<MemberUrls>, clients: &[String]) -> Vec<MemberUrls> {
    if members.len() == clients.len() {
        for (m, c) in members.iter_mut().zip(clients) {
            m.client_urls = vec![c.clone()];
        }
    }
    members
}

/// Where etcd's client TLS material is, as an `Etcd` names it in `spec.etcd.clientUrlTls`:
/// what etcd-druid mounts into its own pods to talk to etcd (etcd-druid v0.38.1
/// `internal/component/statefulset/builder.go`: the CA under `tlsCASecretRef.dataKey`, default
/// `ca.crt`; the client certificate's `tls.crt` and `tls.key`). Gardener points them at its
/// secrets manager's `ca-etcd-bundle-<hash>` (`bundle.crt`) and `etcd-client-<hash>`, and
/// renames both on a rotation (gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`, `tls.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdClientTls {
    /// The CA bundle's Secret (`tlsCASecretRef.name`).
    pub ca_secret: String,
    /// Its key (`tlsCASecretRef.dataKey`).
    pub ca_key: String,
    /// The client certificate's Secret (`clientTLSSecretRef.name`), keys `tls.crt`, `tls.key`.
    pub client_secret: String,
}

impl EtcdClientTls {
    /// The two Secrets' names (what the access grant must let the controller `get`).
    pub fn secret_names(&self) -> Vec<String> {
        vec![self.ca_secret.clone(), self.client_secret.clone()]
    }
}

/// The client TLS an `Etcd` spec (a live object's or a template's) names, in `namespace` (a
/// reference into another namespace is refused: the controller reads Secrets only where the
/// migration's grant is).
pub fn etcd_client_tls(spec: &Value, namespace: &str) -> Result<EtcdClientTls, String> {
    let tls = spec
        .pointer("/etcd/clientUrlTls")
        .ok_or("the Etcd has no spec.etcd.clientUrlTls")?;
    let name = |r: &str| -> Result<String, String> {
        let path = format!("spec.etcd.clientUrlTls.{r}");
        let name = str_at(tls, &[r, "name"])
            .filter(|n| !n.is_empty())
            .ok_or(format!("the Etcd has no {path}.name"))?;
        match str_at(tls, &[r, "namespace"]) {
            Some(ns) if !ns.is_empty() && ns != namespace => Err(format!(
                "{path} is in namespace {ns}: the controller reads Secrets of {namespace} only"
            )),
            _ => Ok(name.to_string()),
        }
    };
    Ok(EtcdClientTls {
        ca_secret: name("tlsCASecretRef")?,
        ca_key: str_at(tls, &["tlsCASecretRef", "dataKey"])
            .unwrap_or("ca.crt")
            .to_string(),
        client_secret: name("clientTLSSecretRef")?,
    })
}
