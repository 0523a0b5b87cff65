//! Captures the exact ClientHello bytes a TLS client sends, for `proxy/testdata/`.
//!
//! `capture_hello listen ADDR OUT` accepts one connection on ADDR, reads until the parser reaches
//! a verdict, writes the ClientHello's records (nothing after them) to OUT and prints the verdict;
//! point any client (openssl, etcd, chromium) at it. The handshake never completes: the listener
//! closes the connection, so the client's one hello is all there is to record.
//!
//! `capture_hello rustls SERVER_NAME OUT` does the same for an in-process rustls client (ring
//! provider, default settings) connecting to 127.0.0.1:0; an IP address as SERVER_NAME gives a
//! hello without SNI.
//!
//! `scripts/capture-client-hellos.sh` runs every capture the samples README lists.

use std::error::Error;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use isthmus_proxy::client_hello::{hello_len, parse, Parsed};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, addr, out] if mode == "listen" => {
            let listener = TcpListener::bind(addr.as_str())?;
            eprintln!("listening on {}", listener.local_addr()?);
            capture(&listener, out)
        }
        [mode, name, out] if mode == "rustls" => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let name = name.clone();
            let client = std::thread::spawn(move || rustls_client(addr, &name));
            capture(&listener, out)?;
            client.join().map_err(|_| "rustls client panicked")?
        }
        _ => Err(
            "usage: capture_hello listen ADDR OUT | capture_hello rustls SERVER_NAME OUT".into(),
        ),
    }
}

/// Reads one connection's first bytes until they are a verdict, and saves the ClientHello.
fn capture(listener: &TcpListener, out: &str) -> Result<()> {
    let (mut sock, peer) = listener.accept()?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let verdict = loop {
        let n = sock.read(&mut chunk)?;
        if n == 0 {
            return Err(format!("{peer} closed after {} bytes", buf.len()).into());
        }
        buf.extend(chunk.get(..n).unwrap_or_default());
        match parse(&buf) {
            Parsed::NeedMore => {}
            verdict => break verdict,
        }
    };
    let len = hello_len(&buf).ok_or_else(|| format!("{peer}: no ClientHello: {verdict:?}"))?;
    std::fs::write(out, buf.get(..len).unwrap_or_default())?;
    println!("{out}: {len} bytes from {peer}: {verdict:?}");
    Ok(())
}

fn rustls_client(addr: std::net::SocketAddr, name: &str) -> Result<()> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_owned())?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name)?;
    let mut sock = TcpStream::connect(addr)?;
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    sock.flush()?;
    Ok(())
}
