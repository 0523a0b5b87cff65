//! The HAProxy PROXY protocol header (v1 text and v2 binary), with which a load balancer (or
//! an isthmus proxy in front of the tunnel server) tells the next hop a connection's real
//! client and destination addresses. A pure crate at the bottom of the workspace: the proxy's
//! listeners read it and its upstreams write it; the tunnel server's agents listener reads it.
//!
//! [`parse`] is a pure function over the bytes buffered so far: the connection handler calls it
//! after every read until the verdict is anything but [`Parsed::NeedMore`], strips `len` bytes
//! of a header and hands the rest (a ClientHello, usually) on. Every verdict other than
//! `NeedMore` is final: feeding more bytes never changes it. [`detect`] answers only whether a
//! header starts here, from its signature, for a peer whose header would be refused anyway
//! (nothing it announces is waited for). [`encode_v1`] and [`encode_v2`] write the header for
//! a next hop that expects one.
//!
//! What it must never do: panic or read past the buffer on any input; allocate (the encoders
//! only append to the caller's vector); consume bytes after the header, which belong to the
//! payload; accept an address it had to guess; accept a v2 header longer than
//! [`V2_MAX_LEN`] (the length is announced in the first 16 bytes, so a reader would otherwise
//! buffer up to 64 KiB for one connection). TLVs in v2 are skipped unread: nothing we route on
//! lives there, and reading them would only add ways to fail.
//!
//! Spec: <https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt>.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[cfg(test)]
mod tests;

/// The real endpoints of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The client, as the load balancer saw it.
    pub source: SocketAddr,
    /// The address the client connected to (the load balancer's frontend).
    pub destination: SocketAddr,
}

/// A complete, valid PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A proxied connection with its real addresses.
    Proxied(Addresses),
    /// v2 LOCAL or v1 UNKNOWN (health checks from the LB itself): no addresses; use the socket's.
    Local,
}

/// The verdict on the first bytes of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Not enough bytes to decide.
    NeedMore,
    /// No PROXY header: the bytes start with something else (decided from as few bytes as
    /// possible: a first byte that is neither 'P' nor '\r' is decided at once; a TLS ClientHello
    /// starts with 0x16).
    Absent,
    /// A complete header of `len` bytes (to strip before the payload).
    Header {
        /// What the header says.
        header: Header,
        /// The header's length in bytes, TLVs included.
        len: usize,
    },
    /// Starts like a PROXY header but is invalid; the &'static str says why (metric-label friendly).
    Invalid(&'static str),
}

const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 line the spec allows, CRLF included (`PROXY TCP6` with two full IPv6 addresses).
const V1_MAX_LEN: usize = 107;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Signature, version/command, family/protocol and the 2-byte length.
pub const V2_FIXED_LEN: usize = 16;
/// The longest v2 header accepted, TLVs included. Load balancers send the addresses (36
/// bytes for IPv6) and a few short TLVs (AWS's VPC endpoint ID, Azure's link ID, a CRC);
/// a longer header is refused from its first 16 bytes instead of being buffered.
pub const V2_MAX_LEN: usize = 2048;
const V2_CMD_LOCAL: u8 = 0x0;
const V2_CMD_PROXY: u8 = 0x1;
const V2_FAM_UNSPEC: u8 = 0x00;
const V2_FAM_TCP4: u8 = 0x11;
const V2_FAM_TCP6: u8 = 0x21;
const V2_ADDR_LEN_TCP4: u16 = 12;
const V2_ADDR_LEN_TCP6: u16 = 36;

/// Looks for a PROXY header (v1 or v2) at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    match buf.first() {
        None => Parsed::NeedMore,
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Parsed::Absent,
    }
}

/// Whether a PROXY header starts at the start of the bytes, judged by its signature alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// Not enough bytes to decide.
    NeedMore,
    /// The bytes start with something else.
    Absent,
    /// The v1 prefix `PROXY ` or the 12-byte v2 signature: a header, whatever follows.
    Header,
}

/// Decides from at most 12 bytes whether `buf` starts with a PROXY header, without reading
/// (or waiting for) what the header announces. For a peer whose header is refused anyway
/// (one not among the trusted proxies): it is refused at the signature.
pub fn detect(buf: &[u8]) -> Detected {
    let signature: &[u8] = match buf.first() {
        None => return Detected::NeedMore,
        Some(b'P') => V1_PREFIX,
        Some(b'\r') => V2_SIGNATURE,
        Some(_) => return Detected::Absent,
    };
    if prefix_mismatch(buf, signature, ()).is_some() {
        Detected::Absent
    } else if buf.len() >= signature.len() {
        Detected::Header
    } else {
        Detected::NeedMore
    }
}

/// The whole length a v2 header announces, once its 16 fixed bytes are in `buf`; `None`
/// before that or when `buf` does not start with the v2 signature. Nothing else is checked
/// ([`parse`] does that), so a reader can take exactly the header's bytes off a socket and
/// leave the payload unread.
pub fn v2_len(buf: &[u8]) -> Option<usize> {
    let fixed = buf.get(..V2_FIXED_LEN)?;
    if !fixed.starts_with(V2_SIGNATURE) {
        return None;
    }
    let len = u16::from_be_bytes([*fixed.get(14)?, *fixed.get(15)?]);
    Some(V2_FIXED_LEN + usize::from(len))
}

/// `Some(verdict)` when `buf` does not start with (a prefix of) `expected`, `None` when it does.
fn prefix_mismatch<T>(buf: &[u8], expected: &[u8], verdict: T) -> Option<T> {
    let n = buf.len().min(expected.len());
    (buf.get(..n) != expected.get(..n)).then_some(verdict)
}

fn parse_v1(buf: &[u8]) -> Parsed {
    // 'P' followed by anything but "ROXY " is a plain client (POST, PUT, PATCH …), not a
    // broken header.
    if let Some(v) = prefix_mismatch(buf, V1_PREFIX, Parsed::Absent) {
        return v;
    }
    let window = buf.get(..buf.len().min(V1_MAX_LEN)).unwrap_or_default();
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX_LEN {
            Parsed::Invalid("v1 line too long")
        } else {
            Parsed::NeedMore
        };
    };
    let Some(line) = window.get(..lf).and_then(|l| l.strip_suffix(b"\r")) else {
        return Parsed::Invalid("v1 line without CR");
    };
    let fields = line.get(V1_PREFIX.len()..).unwrap_or_default();
    let Ok(fields) = std::str::from_utf8(fields) else {
        return Parsed::Invalid("v1 not ascii");
    };
    let len = lf + 1;
    let mut it = fields.split(' ');
    let header = match it.next() {
        // The spec lets the rest of an UNKNOWN line be anything: the receiver ignores it.
        Some("UNKNOWN") => Ok(Header::Local),
        Some("TCP4") => v1_addresses(&mut it, |s| s.parse::<Ipv4Addr>().ok().map(IpAddr::V4)),
        Some("TCP6") => v1_addresses(&mut it, |s| s.parse::<Ipv6Addr>().ok().map(IpAddr::V6)),
        _ => Err("v1 bad protocol"),
    };
    match header {
        Ok(header) => Parsed::Header { header, len },
        Err(why) => Parsed::Invalid(why),
    }
}

/// Reads `<src> <dst> <sport> <dport>` (exactly, single spaces) from `it`.
fn v1_addresses<'a>(
    it: &mut impl Iterator<Item = &'a str>,
    ip: impl Fn(&str) -> Option<IpAddr>,
) -> Result<Header, &'static str> {
    let mut next = || it.next().ok_or("v1 missing field");
    let (src, dst) = (next()?, next()?);
    let (sport, dport) = (next()?, next()?);
    if it.next().is_some() {
        return Err("v1 extra field");
    }
    let src = ip(src).ok_or("v1 bad address")?;
    let dst = ip(dst).ok_or("v1 bad address")?;
    let sport = v1_port(sport).ok_or("v1 bad port")?;
    let dport = v1_port(dport).ok_or("v1 bad port")?;
    Ok(Header::Proxied(Addresses {
        source: SocketAddr::new(src, sport),
        destination: SocketAddr::new(dst, dport),
    }))
}

/// A decimal port without sign or leading zero (`u16::from_str` alone would accept "+80", "080").
fn v1_port(s: &str) -> Option<u16> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = s.len() > 1 && s.starts_with('0');
    if digits && !leading_zero {
        s.parse().ok()
    } else {
        None
    }
}

fn parse_v2(buf: &[u8]) -> Parsed {
    if let Some(v) = prefix_mismatch(buf, V2_SIGNATURE, Parsed::Invalid("v2 bad signature")) {
        return v;
    }
    let Some(&[ver_cmd, fam, len_hi, len_lo]) = buf.get(V2_SIGNATURE.len()..V2_FIXED_LEN) else {
        return Parsed::NeedMore;
    };
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid("v2 bad version");
    }
    let addr_len = u16::from_be_bytes([len_hi, len_lo]);
    let len = V2_FIXED_LEN + usize::from(addr_len);
    if len > V2_MAX_LEN {
        return Parsed::Invalid("v2 too long");
    }
    // Everything below is decided from the 16 fixed bytes, so a broken header is reported
    // without waiting for (up to 64 KiB of) a body it announced.
    let header = match (ver_cmd & 0x0f, fam) {
        // LOCAL: the receiver must ignore the family and any addresses.
        (V2_CMD_LOCAL, _) => Header::Local,
        // UNSPEC with PROXY: the spec says to use the socket's addresses.
        (V2_CMD_PROXY, V2_FAM_UNSPEC) => Header::Local,
        (V2_CMD_PROXY, V2_FAM_TCP4) if addr_len < V2_ADDR_LEN_TCP4 => {
            return Parsed::Invalid("v2 length too short")
        }
        (V2_CMD_PROXY, V2_FAM_TCP6) if addr_len < V2_ADDR_LEN_TCP6 => {
            return Parsed::Invalid("v2 length too short")
        }
        (V2_CMD_PROXY, V2_FAM_TCP4 | V2_FAM_TCP6) => {
            let Some(body) = buf.get(V2_FIXED_LEN..len) else {
                return Parsed::NeedMore;
            };
            Header::Proxied(v2_addresses(fam, body))
        }
        (V2_CMD_PROXY, _) => return Parsed::Invalid("v2 unsupported family"),
        _ => return Parsed::Invalid("v2 bad command"),
    };
    if buf.len() < len {
        return Parsed::NeedMore;
    }
    Parsed::Header { header, len }
}

/// The addresses at the start of a v2 body whose length was already checked for `fam`.
fn v2_addresses(fam: u8, body: &[u8]) -> Addresses {
    // Fixed-size reads with zero fallbacks: `parse_v2` checked the length, so the fallbacks are
    // unreachable, and they keep this function panic-free without a second error path.
    fn take<const N: usize>(body: &[u8], at: usize) -> [u8; N] {
        body.get(at..at + N)
            .and_then(|s| s.try_into().ok())
            .unwrap_or([0; N])
    }
    let (src, dst, ports_at): (IpAddr, IpAddr, usize) = if fam == V2_FAM_TCP4 {
        (take::<4>(body, 0).into(), take::<4>(body, 4).into(), 8)
    } else {
        (take::<16>(body, 0).into(), take::<16>(body, 16).into(), 32)
    };
    Addresses {
        source: SocketAddr::new(src, u16::from_be_bytes(take(body, ports_at))),
        destination: SocketAddr::new(dst, u16::from_be_bytes(take(body, ports_at + 2))),
    }
}

/// Both addresses in one family: IPv4 when both are, otherwise both as IPv6 (IPv4-mapped).
fn same_family(a: &Addresses) -> (IpAddr, IpAddr) {
    match (a.source.ip(), a.destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (s.into(), d.into()),
        (s, d) => (to_v6(s).into(), to_v6(d).into()),
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Appends a v1 line for `a` (TCP4 or TCP6 by the source address family; mixed families: map
/// IPv4 to IPv4-mapped IPv6 and use TCP6).
pub fn encode_v1(a: &Addresses, out: &mut Vec<u8>) {
    let (src, dst) = same_family(a);
    let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    let (sport, dport) = (a.source.port(), a.destination.port());
    // Writing into a Vec cannot fail; the Result only exists for other writers.
    let _ = write!(out, "PROXY {proto} {src} {dst} {sport} {dport}\r\n");
}

/// Appends a v2 PROXY/TCP header (no TLVs).
pub fn encode_v2(a: &Addresses, out: &mut Vec<u8>) {
    out.extend_from_slice(V2_SIGNATURE);
    out.push(0x20 | V2_CMD_PROXY);
    match same_family(a) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(V2_FAM_TCP4);
            out.extend_from_slice(&V2_ADDR_LEN_TCP4.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(V2_FAM_TCP6);
            out.extend_from_slice(&V2_ADDR_LEN_TCP6.to_be_bytes());
            out.extend_from_slice(&to_v6(s).octets());
            out.extend_from_slice(&to_v6(d).octets());
        }
    }
    out.extend_from_slice(&a.source.port().to_be_bytes());
    out.extend_from_slice(&a.destination.port().to_be_bytes());
}
