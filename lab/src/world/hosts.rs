//! The seeds' DNS: each seed's hosts file, written from both migrations' `DNSRecord`s after the
//! seed's own cluster DNS (the in-cluster peer names, which every seed resolves to its own
//! pods). A seed resolves its own records to 127.0.0.1 (its proxy) and the other seed's to the
//! link relay in front of that seed's proxy: the record's value is the owning seed's proxy
//! address (`lb_address`), and the lab has no address both seeds reach the same way, so it
//! translates per resolving seed (split horizon).

use crate::error::{Error, Result};
use crate::member;
use crate::migration::Migration;
use crate::side::Side;
use crate::topology::Topology;

/// Rewrites both seeds' hosts files from both migrations' records.
pub fn write(topo: &Topology, migrations: &[Migration; 2]) -> Result<()> {
    for resolver in Side::BOTH {
        let seed = topo.seed(resolver);
        let mut entries: Vec<(String, String)> = member::of(resolver)
            .into_iter()
            .flat_map(|m| {
                [
                    ("127.0.0.1".to_string(), m.in_cluster_dns()),
                    (m.pod_ip().to_string(), m.pod_dns()),
                ]
            })
            .collect();
        for owner in Side::BOTH {
            let obs = &migrations[owner.index()].obs;
            for rec in obs.dns_records.values() {
                if rec.spec.values.first() != obs.lb_address.as_ref() {
                    return Err(Error::State(format!(
                        "DNSRecord {} points at {:?}, not at its seed's proxy {:?}",
                        rec.spec.name, rec.spec.values, obs.lb_address
                    )));
                }
                let addr = if owner == resolver {
                    "127.0.0.1".to_string()
                } else {
                    seed.host_ip.to_string()
                };
                entries.push((addr, rec.spec.name.clone()));
            }
        }
        seed.set_hosts(&entries)?;
    }
    Ok(())
}
