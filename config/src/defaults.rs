//! Default values of the schemas' fields, in one place so that serialisation can leave out
//! what equals them.

use crate::duration::Duration;

/// Whether `v` is its type's default (for `skip_serializing_if`).
pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}
pub(crate) fn is_connect_timeout(d: &Duration) -> bool {
    *d == connect_timeout()
}
pub(crate) fn header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn max_header_bytes() -> usize {
    16 * 1024
}
pub(crate) fn write_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn connection_timeout() -> Duration {
    Duration::from_secs(60)
}
pub(crate) fn http_max_connections() -> usize {
    256
}
pub(crate) fn drain_delay() -> Duration {
    Duration::from_secs(5)
}
pub(crate) fn drain_timeout() -> Duration {
    Duration::from_secs(30)
}
/// The proxy's: a route change crosses kubelet's volume sync and then this poll, and the
/// controller waits for every pod to serve it before a migration step goes on (issue 45: a
/// change served in a second). A stat every 200 ms costs 5 syscalls a second.
pub(crate) fn proxy_watch_interval() -> Duration {
    Duration::from_millis(200)
}
pub(crate) fn client_hello_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn max_client_hello_bytes() -> usize {
    16 * 1024
}
pub(crate) fn yes() -> bool {
    true
}
pub(crate) fn max_connections() -> usize {
    100_000
}
pub(crate) fn min_ttl() -> Duration {
    Duration::from_secs(1)
}
pub(crate) fn max_ttl() -> Duration {
    Duration::from_secs(60)
}
pub(crate) fn retry() -> Duration {
    Duration::from_secs(2)
}
pub(crate) fn warm_up() -> Duration {
    Duration::from_secs(15)
}
pub(crate) fn keepalive_time() -> Duration {
    Duration::from_secs(60)
}
pub(crate) fn keepalive_interval() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn keepalive_probes() -> u32 {
    6
}
pub(crate) fn max_request_bytes() -> usize {
    8192
}
pub(crate) fn max_pending_hellos() -> usize {
    1024
}
pub(crate) fn max_pending_hellos_per_source() -> usize {
    32
}
pub(crate) fn connect_timeout() -> Duration {
    Duration::from_secs(10)
}
pub(crate) fn consecutive_failures() -> u32 {
    5
}
pub(crate) fn base_ejection_time() -> Duration {
    Duration::from_secs(30)
}
pub(crate) fn max_ejection_percent() -> u32 {
    50
}
