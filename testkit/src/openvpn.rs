//! OpenVPN (Debian's `openvpn`) as Gardener's VPN runs it: TCP, TUN on both ends, TLS with
//! certificates of the test PKI, and the client in the shoot reaching the server in the seed
//! through an HTTP CONNECT proxy that routes by Gardener's `X-Gardener-Destination` header.
//! The arguments of both ends, for `tests/openvpn.rs` and the tunnels bench.

use std::net::SocketAddr;
use std::path::Path;

/// The header the client sends its destination in (`--http-proxy-option CUSTOM-HEADER`).
pub const DESTINATION_HEADER: &str = "X-Gardener-Destination";

/// A certificate authority, certificate and key, as files.
#[derive(Debug, Clone, Copy)]
pub struct Tls<'a> {
    pub ca: &'a Path,
    pub cert: &'a Path,
    pub key: &'a Path,
}

impl Tls<'_> {
    fn args(&self) -> Vec<String> {
        let p = |x: &Path| x.display().to_string();
        vec![
            "--ca".into(),
            p(self.ca),
            "--cert".into(),
            p(self.cert),
            "--key".into(),
            p(self.key),
        ]
    }
}

/// The server's arguments: TCP on `listen`, the tunnel addresses `ifconfig` (its own, the
/// client's), log level `verb`.
pub fn server_args(listen: SocketAddr, ifconfig: [&str; 2], tls: Tls, verb: u8) -> Vec<String> {
    let mut args: Vec<String> = [
        "--dev",
        "tun",
        "--proto",
        "tcp-server",
        "--local",
        &listen.ip().to_string(),
        "--port",
        &listen.port().to_string(),
        "--ifconfig",
        ifconfig[0],
        ifconfig[1],
        "--tls-server",
        "--dh",
        "none",
    ]
    .map(String::from)
    .into();
    args.extend(tls.args());
    args.extend(["--verb".into(), verb.to_string()]);
    args
}

/// The client's arguments: the server at `remote` through the CONNECT proxy at `proxy`, with
/// `destination` in [`DESTINATION_HEADER`]; the tunnel addresses `ifconfig` (its own, the
/// server's); retries every second; log level `verb`.
pub fn client_args(
    remote: SocketAddr,
    proxy: SocketAddr,
    destination: &str,
    ifconfig: [&str; 2],
    tls: Tls,
    verb: u8,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--dev",
        "tun",
        "--proto",
        "tcp-client",
        "--remote",
        &remote.ip().to_string(),
        &remote.port().to_string(),
        "--http-proxy",
        &proxy.ip().to_string(),
        &proxy.port().to_string(),
        "--http-proxy-option",
        "CUSTOM-HEADER",
        DESTINATION_HEADER,
        destination,
        "--ifconfig",
        ifconfig[0],
        ifconfig[1],
        "--tls-client",
    ]
    .map(String::from)
    .into();
    args.extend(tls.args());
    args.extend(["--connect-retry", "1", "1", "--verb"].map(String::from));
    args.push(verb.to_string());
    args
}
