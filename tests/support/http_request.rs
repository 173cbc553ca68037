// Reading the HTTP/1.1 requests a gateway sends to the tests' fake
// upstreams (one `content-length` body each; the gateway sends no other).

use tokio::io::AsyncReadExt;

/// A fake upstream's `200` answer carrying `reply` (JSON).
#[allow(dead_code)]
pub fn json_200(reply: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
        reply.len()
    )
}
use tokio::net::TcpStream;

/// One request off `s`: its body, with `buf` keeping what was read past
/// it (the next pipelined request); `None` at the end of the connection
/// or on an error.
pub async fn read_request_buffered(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                let body = buf[end + 4..end + 4 + len].to_vec();
                buf.drain(..end + 4 + len);
                return Some(body);
            }
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// [`read_request_buffered`] on a connection whose client waits for each
/// reply before its next request (nothing is read past one).
#[allow(dead_code)]
pub async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    read_request_buffered(s, &mut Vec::new()).await
}
