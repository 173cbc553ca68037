//! Reading raw HTTP/1.1 responses off a connection and summing them up
//! for comparison (rpcwire's own HTTP/1.1 loop against hyper), shared by
//! the HTTP test files.

/// A response as compared: status, headers but `date` (lowercased,
/// sorted), body.
pub type RawResponse = (String, Vec<(String, String)>, String);

pub fn responses_of(mut raw: &[u8]) -> Vec<RawResponse> {
    let mut responses = Vec::new();
    while !raw.is_empty() {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        let len = match response.parse(raw) {
            Ok(httparse::Status::Complete(len)) => len,
            _ => {
                let rest = String::from_utf8_lossy(raw).into_owned();
                responses.push(("<rest>".into(), vec![], rest));
                break;
            }
        };
        let status = format!("{} {}", response.code.unwrap(), response.reason.unwrap());
        let mut headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                let value = String::from_utf8_lossy(h.value).into_owned();
                (h.name.to_ascii_lowercase(), value)
            })
            .filter(|(name, _)| name != "date")
            .collect();
        headers.sort();
        let body_len = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
        let end = (len + body_len).min(raw.len());
        let body = String::from_utf8_lossy(&raw[len..end]).into_owned();
        raw = &raw[end..];
        responses.push((status, headers, body));
    }
    responses
}

pub fn summary(responses: &[RawResponse], closed: bool) -> String {
    let mut s: Vec<String> = responses
        .iter()
        .map(|(status, headers, body)| {
            let h: Vec<String> = headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
            format!("[{status} | {} | {body}]", h.join(", "))
        })
        .collect();
    s.push(if closed { "<closed>" } else { "<still open>" }.into());
    s.join(" ")
}

/// A `POST /` with `head`'s extra lines and `body`, its `content-length`
/// last.
pub fn request(head: &str, body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\n{head}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// How long [`exchange`] waits for the server: a hang guard, never a
/// measurement.
const EXCHANGE_HANG: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes `raw` on `stream` and reads until `n` whole responses came.
pub async fn exchange(
    stream: &mut tokio::net::TcpStream,
    raw: impl AsRef<[u8]>,
    n: usize,
) -> Vec<RawResponse> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(raw.as_ref()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(EXCHANGE_HANG, async {
        loop {
            let responses = responses_of(&got);
            let whole = responses.iter().filter(|r| r.0 != "<rest>").count();
            if whole >= n && !responses.iter().any(|r| r.0 == "<rest>") {
                return responses;
            }
            let read = stream.read(&mut buf).await.unwrap();
            assert!(read > 0, "closed early: {:?}", responses_of(&got));
            got.extend_from_slice(&buf[..read]);
        }
    })
    .await
    .expect("the server answers")
}

/// `raw` on a new connection to `addr`: its one response.
pub async fn one(addr: std::net::SocketAddr, raw: &str) -> RawResponse {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(&mut stream, raw, 1).await.remove(0)
}

/// An HTTP/2 client connection (prior knowledge, as `h2c`) to `addr`,
/// its connection task spawned.
pub async fn h2_client(
    addr: std::net::SocketAddr,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    sender
}
