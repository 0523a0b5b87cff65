//! TEMPORARY STUB — replaced by branch `pp`.
#![allow(dead_code, unused_variables, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    pub source: std::net::SocketAddr,
    pub destination: std::net::SocketAddr,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    Proxied(Addresses),
    Local,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    NeedMore,
    Absent,
    Header { header: Header, len: usize },
    Invalid(&'static str),
}
pub fn parse(buf: &[u8]) -> Parsed {
    Parsed::Absent
}
pub fn encode_v1(a: &Addresses, out: &mut Vec<u8>) {}
pub fn encode_v2(a: &Addresses, out: &mut Vec<u8>) {}
