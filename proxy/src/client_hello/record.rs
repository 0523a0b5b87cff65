//! The record layer (RFC 8446 §5.1): finds where the ClientHello handshake message ends when it
//! is fragmented over several consecutive handshake records, deciding as early as the bytes allow.
//!
//! Every check looks only at bytes before the point it is about, and runs in the same order
//! whatever the buffer length, so a verdict reached on a prefix is the verdict for any longer
//! buffer too: the handler can stop reading at the first one.

use super::{Malformed, MAX_HELLO_LEN};

const RECORD_HEADER_LEN: usize = 5;
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_TYPE_HANDSHAKE: u8 = 22;
const HANDSHAKE_TYPE_CLIENT_HELLO: u8 = 1;
/// 2^14 for plaintext plus the 2048 bytes RFC 5246 allows ciphertext to grow, as a lenient cap.
const MAX_RECORD_LEN: usize = (1 << 14) + 2048;

/// What the record layer makes of the buffer.
#[derive(Debug)]
pub(super) enum Framing<'a> {
    Complete(Hello<'a>),
    NeedMore,
    NotTls,
    Malformed(Malformed),
}

/// A complete ClientHello: the records in `buf[..end]` carry its handshake message.
#[derive(Debug)]
pub(super) struct Hello<'a> {
    buf: &'a [u8],
    /// Offset just past the last record of the ClientHello.
    pub(super) end: usize,
    body_len: usize,
    single_record: bool,
}

impl Hello<'_> {
    /// Calls `f` with the ClientHello body (after the handshake header): borrowed from the buffer
    /// when one record holds it all, copied out of the records otherwise.
    pub(super) fn with_body<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        let start = RECORD_HEADER_LEN + HANDSHAKE_HEADER_LEN;
        if self.single_record {
            // Framing checked that these bytes exist; an empty body would only fail to parse.
            return f(self
                .buf
                .get(start..start + self.body_len)
                .unwrap_or_default());
        }
        let mut message = Vec::with_capacity(HANDSHAKE_HEADER_LEN + self.body_len);
        let mut records = self.buf.get(..self.end).unwrap_or_default();
        while let Some((header, rest)) = records.split_at_checked(RECORD_HEADER_LEN) {
            let len = match *header {
                [_, _, _, hi, lo] => usize::from(u16::from_be_bytes([hi, lo])),
                _ => 0,
            };
            let (fragment, rest) = rest.split_at_checked(len).unwrap_or((rest, &[]));
            message.extend_from_slice(fragment);
            records = rest;
        }
        f(message.get(HANDSHAKE_HEADER_LEN..).unwrap_or_default())
    }
}

/// Walks the records at the start of `buf` until the ClientHello they carry is complete.
pub(super) fn frame(buf: &[u8]) -> Framing<'_> {
    let mut off = 0;
    // Handshake bytes in the complete records before `off`.
    let mut got = 0;
    // The handshake header, which itself may be split over records.
    let mut hs_header = [0u8; HANDSHAKE_HEADER_LEN];
    // Length of the whole handshake message, once its header is known.
    let mut need: Option<usize> = None;
    loop {
        let len = match record_header(buf.get(off..).unwrap_or_default(), off == 0) {
            Ok(len) => len,
            Err(verdict) => return verdict,
        };
        let start = off + RECORD_HEADER_LEN;
        let available = buf.get(start..).unwrap_or_default();
        let fragment = available.get(..len).unwrap_or(available);

        for (dst, &b) in hs_header.iter_mut().skip(got).zip(fragment) {
            *dst = b;
        }
        let known = got + fragment.len();
        let [msg_type, ..] = hs_header;
        if known >= 1 && msg_type != HANDSHAKE_TYPE_CLIENT_HELLO {
            return Framing::Malformed(Malformed::NotClientHello);
        }
        if need.is_none() && known >= HANDSHAKE_HEADER_LEN {
            let [_, a, b, c] = hs_header;
            let body_len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            if body_len > MAX_HELLO_LEN {
                return Framing::Malformed(Malformed::HelloTooLong);
            }
            need = Some(HANDSHAKE_HEADER_LEN + body_len);
        }
        let total = got + len;
        if need.is_some_and(|need| total > need) {
            return Framing::Malformed(Malformed::TrailingHandshakeData);
        }
        if fragment.len() < len {
            return Framing::NeedMore;
        }
        if let Some(need) = need.filter(|&need| need == total) {
            return Framing::Complete(Hello {
                buf,
                end: start + len,
                body_len: need - HANDSHAKE_HEADER_LEN,
                single_record: off == 0,
            });
        }
        got = total;
        off = start + len;
    }
}

/// Checks the record header at the start of `h` and returns the record's length, deciding on
/// each byte as soon as it is there.
fn record_header(h: &[u8], first: bool) -> Result<usize, Framing<'static>> {
    let byte = |i: usize| h.get(i).copied().ok_or(Framing::NeedMore);
    if byte(0)? != CONTENT_TYPE_HANDSHAKE {
        // Also where SSLv2-compatible hellos end up: their first byte has the high bit set.
        return Err(if first {
            Framing::NotTls
        } else {
            Framing::Malformed(Malformed::InterleavedRecord)
        });
    }
    if byte(1)? != 3 {
        return Err(if first {
            Framing::NotTls
        } else {
            Framing::Malformed(Malformed::BadRecordVersion)
        });
    }
    if byte(2)? > 4 {
        return Err(Framing::Malformed(Malformed::BadRecordVersion));
    }
    let len = usize::from(u16::from_be_bytes([byte(3)?, byte(4)?]));
    if len > MAX_RECORD_LEN {
        return Err(Framing::Malformed(Malformed::RecordTooLong));
    }
    if len == 0 {
        return Err(Framing::Malformed(Malformed::EmptyRecord));
    }
    Ok(len)
}
