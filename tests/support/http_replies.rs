//! Reading raw HTTP/1.1 responses off a connection and summing them up
//! for comparison (rpcwire's own HTTP/1.1 loop against hyper), shared by
//! tests/http.rs and tests/http_h1_edges.rs.

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
