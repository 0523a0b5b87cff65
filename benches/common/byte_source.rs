//! The byte source both tunnel benches stream from: the client asks for a number of bytes
//! (8 bytes, big-endian), the source sends that many and closes its side.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What the source writes and the client reads per call.
const CHUNK: usize = 256 * 1024;

/// Serves one request on `s`: reads the count and sends that many bytes. A count of 0 is an
/// idle stream: it is held until the client closes it.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    let mut n = [0u8; 8];
    if s.read_exact(&mut n).await.is_err() {
        return;
    }
    let mut left = u64::from_be_bytes(n);
    if left == 0 {
        let mut b = [0u8; 64];
        while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
        return;
    }
    let chunk = vec![0xa5u8; CHUNK];
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        if s.write_all(&chunk[..k]).await.is_err() {
            return;
        }
        left -= k as u64;
    }
    let _ = s.shutdown().await;
}

/// Asks `io` for `bytes` and reads them all; panics if the stream ends early.
pub async fn pull<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, bytes: u64) -> u64 {
    io.write_all(&bytes.to_be_bytes()).await.unwrap();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < bytes {
        let n = io.read(&mut buf).await.unwrap();
        assert!(n > 0, "stream ended early at {got} bytes");
        got += n as u64;
    }
    got
}
