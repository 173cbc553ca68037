//! The gateway example's binary run as a child process (as an operator or
//! a service manager runs it), its standard error read all along so that
//! it never blocks on a full pipe.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::example_binary::example_binary;

/// Long enough to mean "it hangs", never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

pub struct GatewayChild {
    pub child: tokio::process::Child,
    /// Its HTTP port, once it said it listens; `None` when it exited
    /// without (refused its command line, failed to start).
    pub listening: Option<SocketAddr>,
    /// Its standard error, line by line.
    log: Arc<Mutex<Vec<String>>>,
    /// The task reading it, done once the gateway closed it (exited).
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl GatewayChild {
    /// Starts the gateway on a free loopback port with `threads` workers
    /// and `args`; returns once it says it listens, or has exited.
    pub async fn start(threads: usize, args: &[&str]) -> GatewayChild {
        let binary = example_binary("gateway", "gateway");
        let mut child = tokio::process::Command::new(binary)
            .args(["--listen", "127.0.0.1:0", "--threads", &threads.to_string()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the gateway starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let keep = Arc::clone(&log);
        let reader = tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("gateway listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let addr: SocketAddr = rest.split_once(' ').unwrap().0.parse().unwrap();
                    let _ = tx.send(addr);
                }
                keep.lock().unwrap().push(line);
            }
        });
        // `Err`: it exited without saying so.
        let listening = tokio::time::timeout(HANG, rx)
            .await
            .expect("hang: the gateway neither listened nor exited")
            .ok();
        GatewayChild {
            child,
            listening,
            log,
            reader: Some(reader),
        }
    }

    /// Its HTTP port; panics with its log if it did not start.
    pub fn addr(&self) -> SocketAddr {
        self.listening
            .unwrap_or_else(|| panic!("the gateway exited: {:?}", self.log()))
    }

    /// Sends the gateway `signal` (`TERM`, `INT`).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the gateway still running");
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}: {status}");
    }

    /// The exit status, once it exits.
    pub async fn exit_status(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(HANG, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("hang: the gateway did not exit: {:?}", self.log()))
            .unwrap()
    }

    /// Its standard error so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Its whole standard error, once it exited (the lines it wrote last
    /// may still be on their way when its exit is seen).
    pub async fn final_log(&mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            tokio::time::timeout(HANG, reader)
                .await
                .expect("hang: its standard error did not end")
                .unwrap();
        }
        self.log()
    }
}
