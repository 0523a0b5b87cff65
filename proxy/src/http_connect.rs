//! TEMPORARY STUB — replaced by branch `pp`.
#![allow(dead_code, unused_variables, missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub authority: String,
    pub header_value: Option<String>,
    pub head_len: usize,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    NeedMore,
    NotConnect,
    Malformed(&'static str),
    TooLarge,
}
pub fn parse(buf: &[u8], header: &str, max_head: usize) -> Result<Request, Error> {
    Err(Error::NeedMore)
}
pub fn response(status: u16) -> Vec<u8> {
    Vec::new()
}
