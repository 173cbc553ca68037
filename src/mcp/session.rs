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
    /// Its client ended the session (HTTP `DELETE`): its running calls
    /// were cancelled, and a call registering late is not run.
    ended: bool,
}

/// How many early cancellations and ended ids a session keeps.
const KEPT: usize = 16;

/// Whether `id` (JSON text) is one a request can carry: a string or a
/// number, within the parser's default id limit
/// ([`Parser::DEFAULT_MAX_ID_LEN`](crate::Parser::DEFAULT_MAX_ID_LEN)).
/// Only such ids are kept for later: anything else names no request (the
/// dispatcher refuses it), and keeping it would let a client park
/// megabytes in the session.
fn is_request_id(id: &[u8]) -> bool {
    id.len() <= crate::Parser::DEFAULT_MAX_ID_LEN as usize
        && matches!(id.first(), Some(b'"' | b'-' | b'0'..=b'9'))
}

fn keep(list: &mut VecDeque<Box<[u8]>>, id: &[u8]) {
    if !is_request_id(id) {
        return;
    }
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
    /// An id no request can carry: the dispatcher refuses the message;
    /// nothing to cancel.
    Untracked,
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
    /// (HTTP), or queues it for the transport's loop (stdio). An id no
    /// request can carry (an object, or past the id limit) is ignored
    /// ("invalid cancellation notifications SHOULD be ignored").
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
        if g.ended {
            return Registered::Cancelled;
        }
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
        // An id no request can carry is refused by the dispatcher at once:
        // nothing could cancel it, and it is not kept.
        if !is_request_id(id) {
            return Registered::Untracked;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        g.waiters.insert(id.into(), tx);
        Registered::Run(rx)
    }

    /// The session ended: cancels every call still running on it (their
    /// client said it is done with them) and refuses to run any call that
    /// registers later (one that found the session just before it ended).
    pub(crate) fn end(&self) {
        let waiters = {
            let mut g = lock(&self.inner);
            g.ended = true;
            g.cancels.clear();
            std::mem::take(&mut g.waiters)
        };
        for (_, cancel) in waiters {
            let _ = cancel.send(());
        }
    }

    /// Forgets a call registered with [`register`](Self::register): it
    /// ended.
    pub(crate) fn unregister(&self, id: &[u8]) {
        let mut g = lock(&self.inner);
        g.waiters.remove(id);
        keep(&mut g.finished, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's end cancels its running calls and refuses to run one
    /// that registers after it (a request that found the session just
    /// before its `DELETE`).
    #[test]
    fn the_end_cancels_running_calls_and_refuses_late_ones() {
        let s = SessionState::default();
        let Registered::Run(mut running) = s.register(b"1") else {
            panic!("a fresh id runs");
        };
        s.request_cancel(b"2");
        s.end();
        assert_eq!(running.try_recv(), Ok(()));
        assert!(matches!(s.register(b"3"), Registered::Cancelled));
        assert!(s.take_cancels().is_empty());
    }

    /// A `requestId` no request can carry was kept for a request that
    /// might come (16 per session, of any size): megabytes a client could
    /// park in every session.
    #[test]
    fn only_request_ids_are_kept() {
        let s = SessionState::default();
        let long = format!("\"{}\"", "x".repeat(2000));
        for id in [r#"{"a":1}"#, "[1]", "null", "true", long.as_str()] {
            s.request_cancel(id.as_bytes());
            s.unregister(id.as_bytes());
            assert!(
                matches!(s.register(id.as_bytes()), Registered::Untracked),
                "{id}"
            );
            s.unregister(id.as_bytes());
        }
        assert!(s.take_cancels().is_empty());
        let g = lock(&s.inner);
        assert!(g.finished.is_empty(), "{:?}", g.finished);
        assert!(g.waiters.is_empty());
        drop(g);
        // Plain ids still are.
        for id in ["\"a\"", "7", "-1"] {
            s.request_cancel(id.as_bytes());
        }
        assert_eq!(s.take_cancels().len(), 3);
    }
}
