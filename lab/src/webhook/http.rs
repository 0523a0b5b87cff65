//! The little HTTP/1.1 the callers and the webhook speak by hand: reading a head without
//! consuming what follows it (the CONNECT answer is followed by the tunnel's bytes) and its
//! status code.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads an HTTP head (up to the blank line), byte by byte so nothing after it is consumed.
pub(super) async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return Err(std::io::Error::other("HTTP head too long"));
        }
        if io.read(&mut b).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The status code of a response head (`HTTP/1.1 200 OK` → 200).
pub(super) fn status(head: &str) -> Option<u16> {
    head.split_whitespace().nth(1)?.parse().ok()
}
