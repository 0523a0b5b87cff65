//! Reads the one HTTP/1.x `CONNECT` request head with which Gardener's `vpn-shoot` (OpenVPN's
//! `http-proxy` with `CUSTOM-HEADER`s) and isthmus's own tunnel agent open a tunnel through the
//! VPN ingress, and writes the status line that answers it.
//!
//! [`parse`] is a pure function over the bytes buffered so far, called after every read until
//! it returns anything but [`Error::NeedMore`]; `head_len` says where the head ends, and any
//! bytes after it are already tunnel payload. A verdict other than `NeedMore` is final: more
//! bytes never change it, so the caller may stop reading at the first one.
//!
//! What it must never do: panic on any input; look past `max_head` bytes; accept what a
//! stricter HTTP hop could read differently (obs-fold, a space before a header's colon, control
//! characters, a routing header sent twice) — a request two parsers disagree on is a request
//! smuggled past one of them.

use std::net::Ipv6Addr;

#[cfg(test)]
mod tests;

/// A complete, valid CONNECT request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request target, `host:port` or `[ipv6]:port`, as sent.
    pub authority: String,
    /// The routing header's value, trimmed, if the request carried it.
    pub header_value: Option<String>,
    /// Length of the head, blank line included: the tunnel payload starts here.
    pub head_len: usize,
}

/// Why [`parse`] returned no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The head is not complete yet: read more.
    NeedMore,
    /// Another method than CONNECT: answer 405.
    NotConnect,
    /// Not a valid CONNECT head; the reason is metric-label friendly: answer 400.
    Malformed(&'static str),
    /// `max_head` bytes without the end of the head: answer 431.
    TooLarge,
}

const METHOD: &[u8] = b"CONNECT";

/// Parses the request head in `buf` (which may hold pipelined bytes after it: `head_len` tells
/// where the head ends). `header` is the routing header's name, matched case-insensitively;
/// surrounding whitespace of its value is trimmed; if the header appears twice → Malformed.
/// `max_head` caps the head (Error::TooLarge once buf has max_head bytes without the blank line).
pub fn parse(buf: &[u8], header: &str, max_head: usize) -> Result<Request, Error> {
    // Nothing past max_head is ever looked at, so a longer buffer cannot change the verdict.
    let window = buf.get(..buf.len().min(max_head)).unwrap_or_default();
    check_method_prefix(window)?;
    let mut lines = Lines {
        buf: window,
        pos: 0,
    };
    let Some(request_line) = lines.next() else {
        return Err(incomplete(buf, max_head));
    };
    let authority = request_line_authority(request_line)?;
    let mut header_value = None;
    loop {
        let Some(line) = lines.next() else {
            return Err(incomplete(buf, max_head));
        };
        if line.is_empty() {
            break;
        }
        if let Some(value) = header_line(line, header)? {
            if header_value.replace(value).is_some() {
                return Err(Error::Malformed("duplicate routing header"));
            }
        }
    }
    Ok(Request {
        authority: authority.to_owned(),
        header_value: header_value.map(str::to_owned),
        head_len: lines.pos,
    })
}

/// No blank line in the window: too large once the window is full, otherwise wait.
fn incomplete(buf: &[u8], max_head: usize) -> Error {
    if buf.len() >= max_head {
        Error::TooLarge
    } else {
        Error::NeedMore
    }
}

/// Decides on the method before the request line is complete, so that a TLS or SSH client
/// sent to the wrong port is answered at once instead of when its bytes reach `max_head`.
fn check_method_prefix(window: &[u8]) -> Result<(), Error> {
    let token_len = window
        .iter()
        .position(|&b| !is_tchar(b))
        .unwrap_or(window.len());
    let (token, rest) = window.split_at(token_len);
    // Once the method cannot become CONNECT any more, whatever follows it does not matter.
    if !METHOD.starts_with(token) {
        return Err(Error::NotConnect);
    }
    match rest.first() {
        // Still inside a prefix of CONNECT.
        None => Ok(()),
        Some(b' ') if token == METHOD => Ok(()),
        Some(b' ') if !token.is_empty() => Err(Error::NotConnect),
        Some(_) => Err(Error::Malformed("request line")),
    }
}

/// The lines of a head, each without its `\n` or `\r\n`; `pos` is where the next one starts.
struct Lines<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    /// The next complete line; `None` when the rest holds no `\n`.
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.buf.get(self.pos..)?;
        let lf = rest.iter().position(|&b| b == b'\n')?;
        self.pos += lf + 1;
        let line = rest.get(..lf)?;
        // Bare `\n` is accepted (RFC 9112 §2.2); a `\r` anywhere else is a control character.
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    }
}

/// Checks `CONNECT <authority> HTTP/1.x` and returns the authority.
fn request_line_authority(line: &[u8]) -> Result<&str, Error> {
    // Visible ASCII and single spaces only: no tabs, control characters or UTF-8.
    if !line.iter().all(|&b| b == b' ' || b.is_ascii_graphic()) {
        return Err(Error::Malformed("request line"));
    }
    let line = std::str::from_utf8(line).map_err(|_| Error::Malformed("request line"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Error::Malformed("request line"));
    };
    if method.as_bytes() != METHOD {
        return Err(Error::NotConnect);
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(Error::Malformed("version"));
    }
    if !is_authority(target) {
        return Err(Error::Malformed("authority"));
    }
    Ok(target)
}

/// `host:port` with a DNS name or IPv4 host, or `[ipv6]:port`; port 1..=65535 in plain digits.
fn is_authority(target: &str) -> bool {
    let Some((host, port)) = target.rsplit_once(':') else {
        return false;
    };
    let port_ok = (1..=5).contains(&port.len())
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        }
    };
    port_ok && host_ok
}

/// Checks one header line; returns its trimmed value when its name is `routing` (any case).
fn header_line<'a>(line: &'a [u8], routing: &str) -> Result<Option<&'a str>, Error> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(Error::Malformed("obs-fold"));
    }
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return Err(Error::Malformed("header line"));
    };
    let (name, value) = line.split_at(colon);
    let value = value.get(1..).unwrap_or_default();
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(Error::Malformed("header name"));
    }
    // HTAB, visible ASCII and obs-text (RFC 9110 §5.5); CR, LF, NUL and DEL never.
    if !value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
    {
        return Err(Error::Malformed("header value"));
    }
    if !name.eq_ignore_ascii_case(routing.as_bytes()) {
        return Ok(None);
    }
    let value = value.trim_ascii();
    std::str::from_utf8(value)
        .map(Some)
        .map_err(|_| Error::Malformed("header value"))
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The response line+headers for a status, e.g. `response(200)` = "HTTP/1.1 200 Connection established\r\n\r\n",
/// and for errors a short body-less reply with `Connection: close` and `Content-Length: 0`.
/// A status outside 100..=599 is answered as 500: the line must stay valid HTTP.
pub fn response(status: u16) -> Vec<u8> {
    let status = if (100..=599).contains(&status) {
        status
    } else {
        500
    };
    if status == 200 {
        return b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
    }
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    // RFC 9110 §15.5.6: a 405 says which methods are allowed.
    let allow = if status == 405 {
        "Allow: CONNECT\r\n"
    } else {
        ""
    };
    format!("HTTP/1.1 {status} {reason}\r\n{allow}Connection: close\r\nContent-Length: 0\r\n\r\n")
        .into_bytes()
}
