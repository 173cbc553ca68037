//! The process's standard output, for a stream driver.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// The process's standard output, written without line buffering (on
/// Unix): each buffer the [driver](super::Driver) hands over (whole
/// frames, up to 2 MiB) reaches the file descriptor in one `write_all`,
/// on a blocking thread, as `tokio::io::stdout()` does.
///
/// `tokio::io::stdout()` writes through std's `Stdout`, whose
/// `LineWriter` writes up to the last newline at once and keeps the rest
/// until a flush: an LSP frame (`Content-Length: 52\r\n\r\n{...}`) went
/// out as its header, and then its body at the flush, in a second system
/// call. A process that exits in between (at the end of a zero shutdown
/// grace, say) left its client a header without a body. Here a write of
/// up to `PIPE_BUF` bytes to a pipe (4 KiB on Linux, 512 on macOS and the
/// BSDs) arrives whole or not at all; a larger one can still be cut by an
/// exit during it. Elsewhere than Unix, or if descriptor 1 cannot be
/// duplicated, it is `tokio::io::stdout()`.
///
/// A write handed over is done on a blocking thread: flush before the
/// process exits (`std::process::exit` does not wait for it).
/// [`serve_stdio`](super::serve_stdio) (which flushes it before it
/// returns) and MCP's stdio server use it.
///
/// ```no_run
/// use rpcwire::server::stream::{stdout, Driver};
/// use rpcwire::frame::Lsp;
/// use tokio::io::AsyncWriteExt;
/// # async fn run(dispatcher: rpcwire::Dispatcher<()>) -> std::io::Result<()> {
/// let mut out = stdout();
/// let reason = Driver::new(Lsp::new())
///     .run(&dispatcher, tokio::io::stdin(), &mut out)
///     .await?;
/// // What the driver wrote last may still be on its way.
/// out.flush().await?;
/// # let _ = reason;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Stdout {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// A duplicate of descriptor 1: writes bypass std's `LineWriter`.
    #[cfg(unix)]
    File(tokio::fs::File),
    /// Where descriptor 1 cannot be duplicated (or outside Unix).
    Tokio(tokio::io::Stdout),
}

/// The process's standard output for a stream driver: see [`Stdout`].
pub fn stdout() -> Stdout {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
            return Stdout {
                inner: Inner::File(tokio::fs::File::from_std(std::fs::File::from(fd))),
            };
        }
    }
    Stdout {
        inner: Inner::Tokio(tokio::io::stdout()),
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.inner {
            #[cfg(unix)]
            Inner::File(f) => Pin::new(f).poll_write(cx, buf),
            Inner::Tokio(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.inner {
            #[cfg(unix)]
            Inner::File(f) => Pin::new(f).poll_flush(cx),
            Inner::Tokio(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.inner {
            #[cfg(unix)]
            // Flushes; the duplicate descriptor closes when dropped, and
            // descriptor 1 stays open (as `tokio::io::stdout()` leaves it).
            Inner::File(f) => Pin::new(f).poll_flush(cx),
            Inner::Tokio(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::Read;
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::Stdout;

    /// What the driver writes reaches the descriptor whole, without
    /// waiting for a flush: through std's `LineWriter` an LSP frame's body
    /// (after the header's last newline) waited for the flush.
    #[tokio::test]
    async fn a_frame_reaches_the_descriptor_whole_before_any_flush() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let mut out = Stdout {
            inner: super::Inner::File(tokio::fs::File::from_std(std::fs::File::from(
                std::os::fd::OwnedFd::from(writer),
            ))),
        };
        let frame = b"Content-Length: 2\r\n\r\n{}";
        assert_eq!(out.write(frame).await.unwrap(), frame.len());
        let read = tokio::task::spawn_blocking(move || {
            let mut got = [0; 23];
            reader.read_exact(&mut got).map(|()| got)
        });
        let got = tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("the frame's body waited for a flush")
            .unwrap()
            .unwrap();
        assert_eq!(&got, frame);
        out.flush().await.unwrap();
    }
}
