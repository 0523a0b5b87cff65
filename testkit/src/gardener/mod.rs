//! Gardener's side of a seed for tests: its own etcd deploy run as a harness ([`harness`]:
//! Gardener v1.149.3's `Deploy`, secrets manager and health checks) and the etcd client
//! Secrets in the shape its secrets manager writes them ([`secrets`]), for tests that do not
//! run the harness.

pub mod harness;
pub mod secrets;

pub use harness::{binary, crd_paths, Answer, GardenerEtcd, GARDENER_VERSION};
pub use secrets::{etcd_client_secrets, ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
