//! The little HTTP/1.1 the callers and the webhook speak by hand: reading a head without
//! consuming what follows it (the CONNECT answer is followed by the tunnel's bytes) and its
//! status code.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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

/// Reads a request: its head ([`read_head`]) and its body, as long as its `Content-Length`
/// says (at most 64 KiB).
pub async fn read_request<S: AsyncRead + Unpin>(io: &mut S) -> std::io::Result<(String, Vec<u8>)> {
    let head = read_head(io).await?;
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len.min(64 * 1024)];
    io.read_exact(&mut body).await?;
    Ok((head, body))
}

/// Answers 200 with the JSON `body` and closes (over TLS with close_notify: the caller reads
/// to the end of a clean close).
pub async fn answer_json<S: AsyncWrite + Unpin>(io: &mut S, body: &str) -> std::io::Result<()> {
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    io.write_all(answer.as_bytes()).await?;
    io.shutdown().await
}

/// The status code of a response head (`HTTP/1.1 200 OK` → 200).
pub(super) fn status(head: &str) -> Option<u16> {
    head.split_whitespace().nth(1)?.parse().ok()
}
