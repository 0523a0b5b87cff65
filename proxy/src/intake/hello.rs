//! The ClientHello in the intake's buffer: whether it is complete and what it asks for,
//! parsing only when a TLS record has completed so that a client trickling one byte at a time
//! costs O(records) parses rather than O(bytes). It reads nothing: the intake reads
//! (`Down::read_more`) and asks again.

use super::reject::Reject;
use crate::client_hello::{self, Parsed};

/// What the bytes so far say: `None` until they hold a whole ClientHello (or show there is
/// none); then the SNI the client asked for, if any, or why the connection is refused.
pub fn sni(buf: &[u8]) -> Option<Result<Option<String>, Reject>> {
    if buf.is_empty() || !ends_on_record_boundary(buf) {
        return None;
    }
    match client_hello::parse(buf) {
        Parsed::NeedMore => None,
        Parsed::Sni(name) => Some(Ok(Some(name))),
        Parsed::NoSni => Some(Ok(None)),
        Parsed::NotTls => Some(Err(Reject::NotTls)),
        Parsed::Malformed(m) => Some(Err(Reject::Malformed(m))),
    }
}

/// True when the bytes end exactly at the end of a TLS record, or do not look like TLS records
/// at all (so that the parser can say "not TLS" without waiting). Walks record headers only.
fn ends_on_record_boundary(buf: &[u8]) -> bool {
    let mut at = 0usize;
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            // A partial header. The very first bytes go to the parser so that non-TLS input is
            // rejected at once; after complete records they may be bytes a client pipelined
            // behind a complete hello (a short first write after it), which must not leave us
            // waiting for bytes that never come. At most four such parses per record.
            return true;
        };
        if header[0] != 22 {
            return true;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        at += 5 + len;
        if at >= buf.len() {
            return at == buf.len() || len > 16384 + 2048;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_boundaries() {
        assert!(ends_on_record_boundary(&[]));
        assert!(ends_on_record_boundary(b"GET / HTTP/1.1"));
        assert!(ends_on_record_boundary(&[22]));
        assert!(!ends_on_record_boundary(&[22, 3, 1, 0, 4, 1]));
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1]));
        // A partial header after complete records: the hello may be complete before it.
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1, 22, 3]));
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1, b'E']));
        assert!(ends_on_record_boundary(&[
            22, 3, 1, 0, 1, 1, 22, 3, 1, 0, 0
        ]));
        // An oversized record header is handed to the parser to be called malformed.
        assert!(ends_on_record_boundary(&[22, 3, 1, 0xff, 0xff, 1]));
    }
}
