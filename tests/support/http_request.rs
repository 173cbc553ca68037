// Reading the HTTP/1.1 requests a gateway sends to the tests' fake
// upstreams (one `content-length` body each; the gateway sends no other).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
#[allow(dead_code)]
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

/// POSTs `body` (JSON) to `addr` on a connection of its own
/// (`connection: close`) and reads the whole response: its status and
/// body. The gateway tests' client.
#[allow(dead_code)]
pub async fn post_close(addr: std::net::SocketAddr, body: &str) -> (u16, String) {
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, text) = exchange(addr, &request).await;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// Writes `request` (a whole request that asks for `connection: close`)
/// to `addr` on a connection of its own and reads the answer to the end
/// of the connection: its status and its whole text.
#[allow(dead_code)]
pub async fn exchange(addr: std::net::SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // A hang guard, not a measurement.
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stream.read_to_end(&mut response),
    )
    .await
    .expect("hang: no answer")
    .unwrap();
    let text = String::from_utf8(response).unwrap();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    (status, text)
}
