//! Reads the server_name (SNI) out of the first bytes a TLS client sends, without terminating TLS.
//!
//! [`parse`] is a pure function over the bytes buffered so far: the connection handler calls it
//! after every read until the verdict is anything but [`Parsed::NeedMore`], then replays the same
//! bytes to the chosen upstream. Every verdict other than `NeedMore` is final: feeding more bytes
//! never changes it, so the handler may stop reading as soon as it gets one.
//!
//! The ClientHello may be fragmented over several handshake records (`record`), which are
//! reassembled before the message itself is read (`hello`). The common single-record hello is
//! read in place; only a fragmented one is copied into one buffer.
//!
//! SSLv2-compatible hellos (first byte with the high bit set) are reported as [`Parsed::NotTls`]:
//! they cannot carry SNI and no client we route for sends them.

mod hello;
mod reader;
mod record;
#[cfg(test)]
mod tests;

/// Result of looking at the first bytes a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not enough bytes yet to decide; read more (the caller enforces the byte cap and timeout).
    NeedMore,
    /// A complete ClientHello carrying this server_name (exactly as sent, not lower-cased).
    Sni(String),
    /// A complete, well-formed ClientHello without a server_name extension (or with no host_name entry).
    NoSni,
    /// The first bytes are not a TLS handshake record (e.g. HTTP, SSH, garbage).
    NotTls,
    /// TLS-looking but broken; the reason is a short static label, usable as a metric label value.
    Malformed(Malformed),
}

/// Why bytes that start like a TLS handshake record are not a usable ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// A record longer than TLS allows (2^14 plus the 2048 bytes of slack TLS 1.2 ciphertext has).
    RecordTooLong,
    /// A zero-length handshake record, which RFC 8446 §5.1 forbids.
    EmptyRecord,
    /// A record version outside 0x0300..=0x0304.
    BadRecordVersion,
    /// A record of another content type arrived before the ClientHello was complete.
    InterleavedRecord,
    /// The first handshake message is not a ClientHello.
    NotClientHello,
    /// The handshake header announces a ClientHello larger than [`MAX_HELLO_LEN`].
    HelloTooLong,
    /// The record carrying the end of the ClientHello holds more handshake bytes after it.
    TrailingHandshakeData,
    /// A length inside the ClientHello overruns its container or leaves bytes unread.
    BadLength,
    /// An extension, or the server_name extension's list, is badly framed.
    BadExtension,
    /// The same extension type appears twice.
    DuplicateExtension,
    /// The host_name is empty, too long, not printable ASCII, or given twice.
    BadServerName,
}

impl Malformed {
    /// The reason as a snake_case label, stable for use as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::RecordTooLong => "record_too_long",
            Malformed::EmptyRecord => "empty_record",
            Malformed::BadRecordVersion => "bad_record_version",
            Malformed::InterleavedRecord => "interleaved_record",
            Malformed::NotClientHello => "not_client_hello",
            Malformed::HelloTooLong => "hello_too_long",
            Malformed::TrailingHandshakeData => "trailing_handshake_data",
            Malformed::BadLength => "bad_length",
            Malformed::BadExtension => "bad_extension",
            Malformed::DuplicateExtension => "duplicate_extension",
            Malformed::BadServerName => "bad_server_name",
        }
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Largest ClientHello body accepted. Real hellos stay far below it (even with post-quantum key
/// shares and padding, ~2 KiB); the cap lets a hostile length be rejected from its header instead
/// of waiting for the caller's byte cap.
pub const MAX_HELLO_LEN: usize = 1 << 16;

/// Looks at the first bytes a client sent; see [`Parsed`] for the verdicts.
pub fn parse(buf: &[u8]) -> Parsed {
    match record::frame(buf) {
        record::Framing::Complete(hello) => match hello.with_body(hello::server_name) {
            Ok(Some(name)) => Parsed::Sni(name),
            Ok(None) => Parsed::NoSni,
            Err(m) => Parsed::Malformed(m),
        },
        record::Framing::NeedMore => Parsed::NeedMore,
        record::Framing::NotTls => Parsed::NotTls,
        record::Framing::Malformed(m) => Parsed::Malformed(m),
    }
}

/// How many bytes of `buf` the ClientHello's records occupy, once they are all there and framed
/// correctly; bytes after that (e.g. pipelined early data) belong to the stream that follows.
///
/// Returns `None` whenever [`parse`] would not return [`Parsed::Sni`] or [`Parsed::NoSni`] for
/// framing reasons; it does not check the ClientHello's own contents.
pub fn hello_len(buf: &[u8]) -> Option<usize> {
    match record::frame(buf) {
        record::Framing::Complete(hello) => Some(hello.end),
        _ => None,
    }
}
