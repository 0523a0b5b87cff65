//! What etcd-druid reads of an `Etcd`'s spec to run its members: how many, their names
//! (`memberNamePrefix`, `<prefix>-<etcd>-<i>`), the peer URLs each advertises
//! (`additionalAdvertisePeerURLs` of v0.38.1, or the newer `additionalAdvertisedURLs` with
//! `overrideDefaultURL`), and the existing cluster it joins (`bootstrapWithExistingCluster`).

use crate::error::{Error, Result};
use crate::etcd::{Cluster, MemberDef};
use isthmus_controller::crd::MemberUrls;
use isthmus_controller::plan::{self, EtcdFields};
use serde_json::Value;

/// An `Etcd`'s spec as etcd-druid acts on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DruidSpec {
    /// The `Etcd`'s name (`metadata.name`).
    pub etcd: String,
    pub replicas: u16,
    pub member_name_prefix: Option<String>,
    /// Extra advertised peer URLs per member.
    pub advertised: Vec<MemberUrls>,
    /// The advertised URLs replace the in-cluster one instead of joining it.
    pub override_default_url: bool,
    /// The members of the cluster it joins; empty when not set.
    pub bootstrap: Vec<MemberUrls>,
    /// `spec.etcd.serverPort`, the members' peer port (etcd-druid's default when unset).
    pub server_port: u16,
}

impl DruidSpec {
    /// The spec of `etcd` (the whole object) as etcd-druid reads it, in either API
    /// generation (etcd-druid v0.38.1 `api/core/v1alpha1/types_etcd.go`; the newer
    /// `additionalAdvertisedURLs` of etcd-druid#1438).
    pub fn read(etcd: &Value) -> Self {
        let spec = &etcd["spec"];
        let newer = &spec["etcd"]["additionalAdvertisedURLs"]["peerURLs"];
        let (advertised, override_default_url) = match newer.is_object() {
            true => (
                members(&newer["members"], "name", "urls"),
                newer["overrideDefaultURL"].as_bool().unwrap_or(false),
            ),
            false => (
                members(
                    &spec["etcd"]["additionalAdvertisePeerURLs"],
                    "memberName",
                    "urls",
                ),
                false,
            ),
        };
        Self {
            etcd: etcd["metadata"]["name"].as_str().unwrap_or_default().into(),
            replicas: spec["replicas"]
                .as_u64()
                .and_then(|r| u16::try_from(r).ok())
                .unwrap_or(0),
            member_name_prefix: spec["memberNamePrefix"].as_str().map(String::from),
            advertised,
            override_default_url,
            bootstrap: members(
                &spec["etcd"]["bootstrapWithExistingCluster"]["members"],
                "name",
                "peerUrls",
            ),
            server_port: plan::server_port(spec),
        }
    }

    /// The spec of `fields` (an `Etcd` named `etcd`) as the controller writes it.
    pub fn from_fields(etcd: &str, fields: &EtcdFields, override_default_url: bool) -> Self {
        Self {
            etcd: etcd.to_string(),
            replicas: fields
                .replicas
                .and_then(|r| u16::try_from(r).ok())
                .unwrap_or(0),
            member_name_prefix: fields.member_name_prefix.clone(),
            advertised: fields.advertise.clone(),
            override_default_url,
            bootstrap: fields.bootstrap_members.clone(),
            server_port: plan::DRUID_SERVER_PORT,
        }
    }

    /// The name of member `i` (etcd-druid's pod name with the member-name prefix).
    pub fn member(&self, i: u16) -> String {
        match &self.member_name_prefix {
            Some(p) => format!("{p}-{}-{i}", self.etcd),
            None => format!("{}-{i}", self.etcd),
        }
    }

    /// The names of its `replicas` members.
    pub fn members(&self) -> Vec<String> {
        (0..self.replicas).map(|i| self.member(i)).collect()
    }

    /// Every member of this `Etcd` the harness defines, at any index: its pods, whatever
    /// `replicas` says now.
    pub fn pods(&self, c: &Cluster) -> Vec<String> {
        (0..)
            .map(|i| self.member(i))
            .take_while(|n| c.def(n).is_ok())
            .collect()
    }

    /// The peer URLs etcd-druid starts `def` with: the advertised ones, after the in-cluster
    /// one unless `overrideDefaultURL`; the in-cluster one alone when not advertised. An
    /// advertised URL must be the member's exposed one (the only other name the seeds' DNS and
    /// proxies serve).
    pub fn peer_urls(&self, def: &MemberDef) -> Result<Vec<String>> {
        let Some(a) = self.advertised.iter().find(|a| a.name == def.name) else {
            return Ok(vec![def.in_cluster_peer_url.clone()]);
        };
        if a.peer_urls != [def.exposed_peer_url.clone()] {
            return Err(Error::State(format!(
                "the Etcd advertises {} at {:?}; the seeds serve it at {} only",
                def.name, a.peer_urls, def.exposed_peer_url
            )));
        }
        Ok(match self.override_default_url {
            true => a.peer_urls.clone(),
            false => [vec![def.in_cluster_peer_url.clone()], a.peer_urls.clone()].concat(),
        })
    }
}

/// `[{<name>: .., <urls>: [..]}]` as member names and peer URLs.
fn members(list: &Value, name: &str, urls: &str) -> Vec<MemberUrls> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|m| MemberUrls {
            name: m[name].as_str().unwrap_or_default().into(),
            peer_urls: m[urls]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|u| u.as_str().map(String::from))
                .collect(),
            client_urls: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::Place;
    use serde_json::json;

    fn def(name: &str) -> MemberDef {
        MemberDef {
            name: name.into(),
            exposed_peer_url: "https://etcd-main-0.ns.seed-b.example.com:2380".into(),
            in_cluster_peer_url: "https://etcd-main-0.etcd-main-peer.ns.svc:12380".into(),
            listen_peer_url: "https://127.0.0.1:12380".into(),
            client_url: "http://127.0.0.1:22379".into(),
            tls_client_url: "https://127.0.0.1:24379".into(),
            place: Place::PrivateHosts("/tmp/hosts".into()),
        }
    }

    #[test]
    fn both_api_generations_are_read_and_the_default_url_kept_unless_overridden() {
        let exposed = "https://etcd-main-0.ns.seed-b.example.com:2380";
        let old = json!({"metadata": {"name": "etcd-main"}, "spec": {
            "replicas": 2, "memberNamePrefix": "dest",
            "etcd": {"additionalAdvertisePeerURLs": [{"memberName": "dest-etcd-main-0", "urls": [exposed]}],
                     "bootstrapWithExistingCluster": {"members": [{"name": "etcd-main-0",
                         "peerUrls": ["https://etcd-main-0.ns.seed-a.example.com:2380"]}]}}}});
        let s = DruidSpec::read(&old);
        assert_eq!(s.members(), ["dest-etcd-main-0", "dest-etcd-main-1"]);
        assert_eq!(s.server_port, 2380, "etcd-druid's default");
        assert_eq!(s.bootstrap[0].name, "etcd-main-0");
        let d = def("dest-etcd-main-0");
        assert_eq!(
            s.peer_urls(&d).unwrap(),
            [d.in_cluster_peer_url.clone(), exposed.into()]
        );
        let not_advertised = s.peer_urls(&def("dest-etcd-main-1")).unwrap();
        assert_eq!(not_advertised, std::slice::from_ref(&d.in_cluster_peer_url));

        let newer = json!({"metadata": {"name": "etcd-main"}, "spec": {"replicas": 3, "etcd": {
            "additionalAdvertisedURLs": {"peerURLs": {"overrideDefaultURL": true,
                "members": [{"name": "dest-etcd-main-0", "urls": [exposed]}]}}}}});
        let s = DruidSpec::read(&newer);
        assert_eq!(s.members(), ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
        let mut other_port = newer.clone();
        other_port["spec"]["etcd"]["serverPort"] = json!(2390);
        assert_eq!(DruidSpec::read(&other_port).server_port, 2390);
        assert!(s.bootstrap.is_empty());
        assert_eq!(s.peer_urls(&d).unwrap(), [exposed]);
    }

    #[test]
    fn an_advertised_url_the_seeds_do_not_serve_is_refused() {
        let s = DruidSpec::read(
            &json!({"metadata": {"name": "etcd-main"}, "spec": {"etcd": {
            "additionalAdvertisePeerURLs": [{"memberName": "dest-etcd-main-0",
                                             "urls": ["https://elsewhere.example.com:2380"]}]}}}),
        );
        let e = s
            .peer_urls(&def("dest-etcd-main-0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("elsewhere.example.com"), "{e}");
    }
}
