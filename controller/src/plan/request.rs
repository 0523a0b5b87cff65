//! When isthmus asks a Gardener controller to act: a `…/operation: reconcile` annotation.
//! etcd-druid as Gardener deploys it (`enableEtcdSpecAutoReconcile: false`) acts on a changed
//! `Etcd` spec only when `druid.gardener.cloud/operation: reconcile` (the spelling isthmus
//! writes) or the deprecated `gardener.cloud/operation: reconcile` (gardenlet's) is set, and
//! removes both once it has reconciled, after writing `status.observedGeneration` (etcd-druid
//! `internal/controller/etcd/reconcile_spec.go` `shouldReconcileSpec`, `reconcile_complete.go`
//! `completeReconcile`); either one is a request still pending. Gardener's extensions (the DNS
//! provider) take `gardener.cloud/operation` and remove it before they reconcile. So:
//!
//! - the annotation goes on together with a spec change, in a merge patch right after the
//!   server-side apply that changed the spec (never part of the apply's intent: an apply that
//!   owns the annotation deletes it as soon as a later apply omits it, and one that keeps it
//!   puts it back after its owner removed it);
//! - it is never put back for a generation its owner already reconciled;
//! - an `Etcd` whose generation druid has not observed and that carries no request (the
//!   controller stopped between the apply and the patch) gets one: druid removes the
//!   annotation only after observing the generation, so that state means nobody asked.
//!
//! Decided on the object the write returned, not on what the pass read before it: a read
//! taken before the owner removed the annotation would put it back.

use super::{DnsRecordObs, EtcdObs};

/// Whether the `Etcd` (as the write returned it) needs a reconcile request: a generation
/// etcd-druid has not observed and no `reconcile` request in either spelling (an annotation
/// with another value is one druid neither acts on nor removes).
pub fn etcd_needs_request(after: &EtcdObs) -> bool {
    after.operation.as_deref() != Some("reconcile")
        && after
            .observed_generation
            .is_none_or(|o| o < after.generation)
}

/// Whether the `DNSRecord` (as the write returned it) needs a reconcile request: the write
/// created it or changed its spec. The extension removes the annotation before it writes
/// `status.observedGeneration`, so an unobserved generation alone is no sign of a lost
/// request here.
pub fn dnsrecord_needs_request(before: Option<&DnsRecordObs>, after: &DnsRecordObs) -> bool {
    after.operation.is_none() && before.is_none_or(|b| b.generation < after.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(generation: i64, observed: Option<i64>, op: Option<&str>) -> EtcdObs {
        EtcdObs {
            generation,
            observed_generation: observed,
            operation: op.map(String::from),
            ..EtcdObs::default()
        }
    }

    #[test]
    fn etcd_requests_only_for_an_unobserved_generation_nobody_asked_for() {
        assert!(etcd_needs_request(&etcd(3, Some(2), None)), "spec changed");
        assert!(etcd_needs_request(&etcd(1, None, None)), "created");
        assert!(
            !etcd_needs_request(&etcd(3, Some(2), Some("reconcile"))),
            "asked"
        );
        // druid reconciled generation 3 and removed the annotation: never again.
        assert!(!etcd_needs_request(&etcd(3, Some(3), None)));
        // A value druid does not act on is no request.
        assert!(etcd_needs_request(&etcd(3, Some(2), Some("wait"))));
    }

    #[test]
    fn dnsrecord_requests_only_when_the_write_changed_the_spec() {
        let r = |generation, op: Option<&str>| DnsRecordObs {
            spec: crate::plan::DnsRecordSpec {
                provider_type: String::new(),
                secret_ref: crate::crd::ObjectRef {
                    name: String::new(),
                    namespace: String::new(),
                },
                zone: None,
                name: String::new(),
                record_type: String::new(),
                values: Vec::new(),
            },
            timestamp: None,
            operation: op.map(String::from),
            generation,
            observed_generation: None,
            last_operation_state: None,
        };
        assert!(dnsrecord_needs_request(None, &r(1, None)), "created");
        assert!(dnsrecord_needs_request(Some(&r(1, None)), &r(2, None)));
        // The extension took the request and has not written its status yet: not again.
        assert!(!dnsrecord_needs_request(Some(&r(2, None)), &r(2, None)));
        assert!(!dnsrecord_needs_request(
            Some(&r(1, None)),
            &r(2, Some("reconcile"))
        ));
    }
}
