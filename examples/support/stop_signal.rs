//! The stop signal of the examples that serve HTTP (`http_server`,
//! `mcp_server --http`): Ctrl-C, and SIGTERM on Unix.

/// Installs the handlers of Ctrl-C and, on Unix, SIGTERM (what `docker
/// stop`, systemd and Kubernetes send), so that a signal from then on
/// stops the server gracefully rather than killing it, and returns what
/// resolves at the first. On Unix both are installed at once; elsewhere
/// Ctrl-C's when the future is first polled. A handler that cannot be
/// installed is waited on for ever: taking its error for a signal stopped
/// the server as it started.
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        async move {
            tokio::select! {
                _ = wait(interrupt) => {}
                _ = wait(terminate) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
