//! HTTP clients that leave while their call runs: the server drops the
//! call (its future, and whatever it holds) when it finds the client gone,
//! on rpcwire's own HTTP/1.1 loop as on hyper's path, instead of running
//! it to its end for a reply nobody reads. A client that only half-closes
//! after its request is still answered. Everything on 127.0.0.1;
//! deadlines only detect hangs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rpcwire::dispatch::{AsyncCall, WithAsync};
use rpcwire::server::http::{HttpService, Server};
use rpcwire::server::{Limits, Shutdown};
use rpcwire::{Dispatcher, RpcError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::held_calls::{HANG, State, hold, wait_until};

fn dispatcher(state: Arc<State>) -> Dispatcher<Arc<State>, WithAsync> {
    Dispatcher::builder(state)
        // Held, and never released here: it ends only when dropped.
        .async_method("wait", |call: AsyncCall<Arc<State>>| async move {
            Ok::<_, RpcError>(hold(Arc::clone(&call.state)).await)
        })
        .async_method("slow", |_: AsyncCall<Arc<State>>| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, RpcError>("done")
        })
        .build()
        .unwrap()
}

struct TestServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: Shutdown,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

async fn start(own_http1: bool) -> TestServer {
    let state = Arc::new(State::default());
    let limits = Limits::default();
    let service = HttpService::new(dispatcher(Arc::clone(&state)), &limits, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = Server::new(limits).own_http1(own_http1);
    tokio::spawn(server.serve(listener, service, shutdown.clone()));
    TestServer {
        addr,
        state,
        shutdown,
    }
}

fn post(body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const WAIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"wait"}"#;
const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"slow"}"#;

/// How the client leaves.
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// Closes its socket (a FIN, as a client that gave up sends).
    Close,
    /// Resets it (linger 0).
    Reset,
    /// Closes it with another request pipelined behind the first.
    CloseAfterPipelined,
}

/// A client sends `wait` and leaves: the call is dropped long before it
/// could end (it never does). On the own loop it ran on: the loop did not
/// look at the socket while answering.
async fn a_left_client_s_call_is_dropped(own_http1: bool, leave: Leave) {
    let what = format!("own loop {own_http1}, {leave:?}");
    let server = start(own_http1).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let mut conversation = post(WAIT);
    if let Leave::CloseAfterPipelined = leave {
        conversation.push_str(&post(PING));
    }
    s.write_all(conversation.as_bytes()).await.unwrap();
    wait_until(&server.state, &format!("{what}: started"), |st| {
        st.started.load(Ordering::SeqCst) == 1
    })
    .await;
    if let Leave::Reset = leave {
        s.set_zero_linger().unwrap();
    }
    drop(s);
    wait_until(&server.state, &format!("{what}: dropped"), |st| {
        st.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test]
async fn a_call_whose_client_closed_is_dropped() {
    for own_http1 in [true, false] {
        a_left_client_s_call_is_dropped(own_http1, Leave::Close).await;
    }
}

#[tokio::test]
async fn a_call_whose_client_reset_is_dropped() {
    for own_http1 in [true, false] {
        a_left_client_s_call_is_dropped(own_http1, Leave::Reset).await;
    }
}

#[tokio::test]
async fn a_call_whose_client_closed_with_a_request_pipelined_is_dropped() {
    a_left_client_s_call_is_dropped(true, Leave::CloseAfterPipelined).await;
}

/// A client that half-closes after its requests has not left: the own
/// loop answers every one (after an interim `100 Continue` at most), and
/// then closes.
#[tokio::test]
async fn a_half_closed_client_is_answered() {
    let server = start(true).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all([post(PING), post(PING)].concat().as_bytes())
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut raw))
        .await
        .expect("answered and closed before the deadline")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let finals: Vec<&str> = text
        .split("HTTP/1.1 ")
        .filter(|r| !r.is_empty() && *r != "100 Continue\r\n\r\n")
        .collect();
    assert_eq!(finals.len(), 2, "{text}");
    for r in finals {
        assert!(
            r.starts_with("200 OK\r\n")
                && r.ends_with(r#"{"jsonrpc":"2.0","id":2,"result":"done"}"#),
            "{text}"
        );
    }
}

/// A request that rpcwire's own loop hands to hyper (a chunked body), so
/// that a connection served with the own loop on reaches hyper's path.
fn chunked_post(body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
}

/// Sends `conversation`, half-closes, and reads to the end: the final
/// responses (interim `100 Continue`s left out).
async fn half_closed_conversation(server: &TestServer, conversation: &str) -> Vec<String> {
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(conversation.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut raw))
        .await
        .expect("answered and closed before the deadline")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    text.split("HTTP/1.1 ")
        .filter(|r| !r.is_empty() && *r != "100 Continue\r\n\r\n")
        .map(str::to_owned)
        .collect()
}

fn assert_done(finals: &[String], n: usize, what: &str) {
    assert_eq!(finals.len(), n, "{what}: {finals:?}");
    for r in finals {
        assert!(
            r.starts_with("200 OK\r\n")
                && r.contains(r#"{"jsonrpc":"2.0","id":2,"result":"done"}"#),
            "{what}: {finals:?}"
        );
    }
}

/// The same on hyper's path: hyper (its `half_close` off) took the end of
/// stream read while the call ran for the client's close, and dropped the
/// call: the client read an empty reply.
#[tokio::test]
async fn a_half_closed_client_is_answered_on_hyper_s_path() {
    let server = start(false).await;
    let finals = half_closed_conversation(&server, &post(PING)).await;
    assert_done(&finals, 1, "own loop off");
    let finals = half_closed_conversation(&server, &[post(PING), post(PING)].concat()).await;
    assert_done(&finals, 2, "own loop off, pipelined");
    // Handed over by the own loop.
    let server = start(true).await;
    let finals = half_closed_conversation(&server, &chunked_post(PING)).await;
    assert_done(&finals, 1, "handed over");
}

#[tokio::test]
async fn a_call_whose_client_closed_with_a_request_pipelined_is_dropped_on_hyper_s_path() {
    a_left_client_s_call_is_dropped(false, Leave::CloseAfterPipelined).await;
}
/// A client that sends `conversation` (a `wait` call) and closes has its
/// call dropped.
async fn closed_after(own_http1: bool, conversation: &str, what: &str) {
    let server = start(own_http1).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(conversation.as_bytes()).await.unwrap();
    wait_until(&server.state, &format!("{what}: started"), |st| {
        st.started.load(Ordering::SeqCst) == 1
    })
    .await;
    drop(s);
    wait_until(&server.state, &format!("{what}: dropped"), |st| {
        st.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
}

/// hyper's path after a hand-over, and HTTP/1.0 (to which no interim
/// `100` may be sent: its end of stream is taken for a close, as before).
#[tokio::test]
async fn a_call_whose_client_closed_is_dropped_after_a_hand_over_and_on_http_1_0() {
    closed_after(true, &chunked_post(WAIT), "handed over").await;
    let http10 = post(WAIT).replacen("HTTP/1.1", "HTTP/1.0", 1);
    closed_after(true, &http10, "HTTP/1.0").await;
    closed_after(false, &http10, "HTTP/1.0, own loop off").await;
}

/// The frame `kind` with `flags` on `stream`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// An HTTP/2 client (prior knowledge) that posts `wait` and half-closes:
/// h2 takes a connection's end of stream for its end (HTTP/2 has its own
/// half-close, a stream's `END_STREAM`, and a client that can send nothing
/// more cannot acknowledge settings nor open flow-control windows), so the
/// call is dropped and the connection closed, as for a client that closed.
#[tokio::test]
async fn an_h2_client_that_half_closes_has_its_call_dropped() {
    let server = start(true).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(4, 0, 0, &[]));
    // :method POST, :scheme http, :path / (static table), then
    // content-type as a literal with its name from the static table (31).
    let mut block = vec![0x83, 0x86, 0x84, 0x0f, 0x10, 16];
    block.extend(b"application/json");
    out.extend(h2_frame(1, 0x4, 1, &block));
    out.extend(h2_frame(0, 0x1, 1, WAIT.as_bytes()));
    s.write_all(&out).await.unwrap();
    wait_until(&server.state, "h2: started", |st| {
        st.started.load(Ordering::SeqCst) == 1
    })
    .await;
    s.shutdown().await.unwrap();
    wait_until(&server.state, "h2: dropped", |st| {
        st.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    let mut raw = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut raw))
        .await
        .expect("closed before the deadline")
        .unwrap();
}
