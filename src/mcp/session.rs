//! What the initialize lifecycle keeps per connection (stdio) or per
//! session (Streamable HTTP): the negotiated revision, the log level, and
//! the cancellations the transport still has to carry out.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::tool::LogLevel;
use crate::lock;

/// The state of one MCP session of the initialize lifecycle. Revision
/// 2026-07-28 requests never read it: each carries what it needs.
#[derive(Debug, Default)]
pub(crate) struct SessionState {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The revision `initialize` negotiated; `None` before it.
    version: Option<&'static str>,
    /// The capabilities the client declared in `initialize`.
    client_capabilities: Option<Arc<serde_json::Value>>,
    /// `notifications/initialized` arrived.
    initialized: bool,
    /// `logging/setLevel`; every level until it is called.
    log_level: Option<LogLevel>,
    /// Ids (JSON text) of `notifications/cancelled` the transport has not
    /// carried out yet (at most [`KEPT`], the newest): over stdio, drained
    /// after each message; over HTTP, the cancellations that arrived
    /// before their request (on another HTTP request), taken by the
    /// request when it registers.
    cancels: VecDeque<Box<[u8]>>,
    /// Calls running on other HTTP requests of this session, by id: firing
    /// the sender cancels the call.
    waiters: HashMap<Box<[u8]>, tokio::sync::oneshot::Sender<()>>,
    /// Ids of the last HTTP calls that ended (at most [`KEPT`]): a
    /// cancellation that comes after its call ended is dropped, not kept
    /// for a request that will not come.
    finished: VecDeque<Box<[u8]>>,
}

/// How many early cancellations and ended ids a session keeps.
const KEPT: usize = 16;

fn keep(list: &mut VecDeque<Box<[u8]>>, id: &[u8]) {
    if list.len() >= KEPT {
        list.pop_front();
    }
    list.push_back(id.into());
}

/// What [`SessionState::register`] made of a call.
pub(crate) enum Registered {
    /// To run; the receiver fires when the client cancels it.
    Run(tokio::sync::oneshot::Receiver<()>),
    /// Its cancellation came first: not to run, no reply.
    Cancelled,
    /// A call of the session with this id is running: refused.
    InUse,
}

impl SessionState {
    /// The negotiated revision, once `initialize` was answered.
    pub(crate) fn version(&self) -> Option<&'static str> {
        lock(&self.inner).version
    }

    /// Records a (re-)initialization: a new revision and the client's
    /// capabilities, the level reset.
    pub(crate) fn initialize(
        &self,
        version: &'static str,
        client_capabilities: Option<Arc<serde_json::Value>>,
    ) {
        let mut g = lock(&self.inner);
        g.version = Some(version);
        g.client_capabilities = client_capabilities;
        g.initialized = false;
        g.log_level = None;
    }

    /// The capabilities the client declared in `initialize`.
    pub(crate) fn client_capabilities(&self) -> Option<Arc<serde_json::Value>> {
        lock(&self.inner).client_capabilities.clone()
    }

    /// Records `notifications/initialized`.
    pub(crate) fn mark_initialized(&self) {
        lock(&self.inner).initialized = true;
    }

    /// Whether `notifications/initialized` arrived.
    pub(crate) fn is_initialized(&self) -> bool {
        lock(&self.inner).initialized
    }

    /// The least severe level sent.
    pub(crate) fn log_level(&self) -> LogLevel {
        lock(&self.inner).log_level.unwrap_or(LogLevel::Debug)
    }

    pub(crate) fn set_log_level(&self, level: LogLevel) {
        lock(&self.inner).log_level = Some(level);
    }

    /// A client asked to cancel the call with this id: fires its waiter
    /// (HTTP), or queues it for the transport's loop (stdio).
    pub(crate) fn request_cancel(&self, id: &[u8]) {
        let mut g = lock(&self.inner);
        if let Some(tx) = g.waiters.remove(id) {
            let _ = tx.send(());
        } else if !g.finished.iter().any(|f| **f == *id) {
            keep(&mut g.cancels, id);
        }
    }

    /// The queued cancellations.
    pub(crate) fn take_cancels(&self) -> Vec<Box<[u8]>> {
        std::mem::take(&mut lock(&self.inner).cancels).into()
    }

    /// Registers a call running on its own HTTP request: what cancels it,
    /// unless it is not to run.
    pub(crate) fn register(&self, id: &[u8]) -> Registered {
        let mut g = lock(&self.inner);
        if g.waiters.contains_key(id) {
            // Replacing the running call's waiter would cancel it, and its
            // end would take this one's with it.
            return Registered::InUse;
        }
        if let Some(i) = g.cancels.iter().position(|c| **c == *id) {
            g.cancels.remove(i);
            keep(&mut g.finished, id);
            return Registered::Cancelled;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        g.waiters.insert(id.into(), tx);
        Registered::Run(rx)
    }

    /// Forgets a call registered with [`register`](Self::register): it
    /// ended.
    pub(crate) fn unregister(&self, id: &[u8]) {
        let mut g = lock(&self.inner);
        g.waiters.remove(id);
        keep(&mut g.finished, id);
    }
}
