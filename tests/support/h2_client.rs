//! An HTTP/2 client connection (prior knowledge, hyper's) and a request
//! body fed through a channel, for the HTTP/2 tests of several binaries.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// An HTTP/2 connection to `addr`, driven by a task of its own.
pub async fn h2<B>(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// A request body fed through a channel: sent chunked (HTTP/1.1) or as
/// DATA frames without a length (HTTP/2).
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}
