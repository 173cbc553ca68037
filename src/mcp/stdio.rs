//! MCP over stdio (or any byte stream): one message per line.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Receiver;

use super::{McpServer, SessionHandle, SessionState, apply_cancels, is_batch, write_batch_refusal};
use crate::frame::{Concatenated, Framer, Lines, Step};
use crate::server::Outbox;

/// How long calls still running may finish after the input closed.
const DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Bytes of requests held while calls are at the cap: past them, input is
/// no longer read (the client's writes wait), as the stream transports'
/// bound on held messages.
const HELD_BYTES: usize = 64 * 1024;

/// The bound on held requests while tools wait for the client's answers,
/// which may come behind them (as the stream transports'): past it, and a
/// second later, the tools' requests are given up on.
const HELD_BYTES_ASKING: usize = crate::frame::DEFAULT_MAX_FRAME;

impl McpServer {
    /// Serves one client over the process's stdin and stdout until stdin
    /// closes: one JSON-RPC message per line, nothing but MCP messages on
    /// stdout (log with `eprintln!` or a stderr logger).
    pub async fn serve_stdio(&self) -> std::io::Result<()> {
        self.serve_stream(tokio::io::stdin(), crate::server::stream::stdout())
            .await
    }

    /// Serves one client over a byte stream pair in stdio's framing (one
    /// message per line), until `reader` reaches its end. Replies to calls
    /// still running then, or waiting behind `max_in_flight`, are written
    /// if they come within two seconds; every request still unanswered
    /// then is answered with -32800 (`Request cancelled`, its `data`
    /// saying why), its call cancelled.
    ///
    /// Replies are written as calls finish (calls run concurrently), each
    /// after the progress and log notifications its call sent; sessions of
    /// the initialize lifecycle are sent `notifications/tools/list_changed`
    /// when the tools change.
    ///
    /// At most [`max_in_flight`](super::McpServerBuilder::max_in_flight)
    /// calls run; requests past them wait, in order, and once 64 KiB of
    /// them wait no more input is read (the client's writes wait), unless
    /// tools wait for the client's answers: then up to 5 MiB, past which
    /// (for a second) the tools' requests fail
    /// ([`PeerError::Backlog`](crate::peer::PeerError::Backlog)).
    /// Notifications (`notifications/cancelled` among them) and answers
    /// to the server's own requests are taken as they come meanwhile; a
    /// cancelled request still waiting is dropped unanswered.
    pub async fn serve_stream<R, W>(&self, mut reader: R, mut writer: W) -> std::io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let (outbox, mut notes) = Outbox::new(1024, None);
        let session = Arc::new(SessionState::default());
        let ctx = McpServer::context_with("stdio", Arc::clone(&session))
            .outbound(Arc::new(outbox))
            .build();
        debug_assert!(ctx.extension::<SessionHandle>().is_some());
        // However the loop ends (the input's end, an error, the future
        // dropped), requests the tools sent the client fail at once with
        // `PeerError::Closed` instead of waiting out their timeouts.
        let _closes_peer = ClosesPeer(ctx.peer().cloned());
        // The deadlines of the tools' requests to the client
        // (`Peer::request_with`), kept as the other transports keep them.
        let peer = ctx.peer().cloned();
        let mut peer_deadlines = crate::server::PeerDeadlines::default();
        let mut conn = self.dispatcher.connection(ctx);
        let mut changes = self.inner().changes.subscribe();
        let mut watching_changes = true;
        let mut framer = Lines::new();
        let mut input = BytesMut::with_capacity(8 * 1024);
        let mut replies = Vec::with_capacity(4 * 1024);
        let mut wire = Vec::with_capacity(4 * 1024);
        let mut eof = false;
        let mut deadline = None;
        let mut held = Held::new(self.dispatcher.inner.max_in_flight);
        // When the tools' requests are given up on: a grace after reading
        // stopped at the held bound with tools waiting for answers.
        let mut give_up_at = None;
        loop {
            // Requests held at the cap, as slots free.
            while conn.in_flight() < held.cap
                && let Some(line) = held.take()
            {
                self.answer_line(
                    &line,
                    &mut held,
                    &mut conn,
                    &mut replies,
                    &mut notes,
                    &mut wire,
                );
            }
            // Every complete line received.
            loop {
                match framer.next_frame(&input) {
                    Step::Frame { range, consumed } => {
                        let line = input.split_to(consumed).freeze().slice(range);
                        self.take_line(
                            line,
                            &mut held,
                            &mut conn,
                            &mut replies,
                            &mut notes,
                            &mut wire,
                        );
                    }
                    Step::NeedMore { consumed } => {
                        input.advance(consumed);
                        break;
                    }
                    Step::Garbage { consumed, error } => {
                        // An answer too large to read (a sampling result)
                        // ends the request it answers, and is not answered.
                        let answer = match (
                            error.limit(),
                            framer
                                .refused_start(&error, consumed)
                                .and_then(|at| input.get(at..)),
                        ) {
                            (Some(limit), Some(message)) => conn.refused_answer(message, limit),
                            _ => false,
                        };
                        input.advance(consumed);
                        if !answer {
                            error.write_reply(&mut wire);
                            wire.push(b'\n');
                        }
                    }
                    Step::Close(error) => {
                        error.write_reply(&mut wire);
                        wire.push(b'\n');
                        writer.write_all(&wire).await?;
                        writer.flush().await?;
                        return Ok(());
                    }
                }
            }
            // Calls that finish when first polled (most tools) are answered
            // now, not one trip through the select below later. A
            // no-op waker is enough: the select polls them again with this
            // task's waker before it waits.
            let dispatcher = &self.dispatcher;
            if conn.messages_in_flight() > 0
                && let Some(n) = futures_util::FutureExt::now_or_never(std::future::poll_fn(|cx| {
                    super::poll_drain(&mut conn, dispatcher, cx, &mut replies)
                }))
            {
                while let Ok(note) = notes.try_recv() {
                    push_line(&mut wire, &note);
                }
                frame_replies(&mut replies, n, &mut wire);
            }
            // Notifications first: a call's come before its reply.
            while let Ok(note) = notes.try_recv() {
                push_line(&mut wire, &note);
            }
            if !replies.is_empty() {
                frame_replies(&mut replies, usize::MAX, &mut wire);
            }
            if !wire.is_empty() {
                writer.write_all(&wire).await?;
                writer.flush().await?;
                wire.clear();
            }
            if eof {
                if conn.messages_in_flight() == 0 && held.is_empty() {
                    return Ok(());
                }
                let d = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + DRAIN_GRACE);
                if tokio::time::Instant::now() >= d {
                    self.give_up_at_the_end(
                        &mut held,
                        &mut conn,
                        &mut replies,
                        &mut notes,
                        &mut wire,
                    );
                    writer.write_all(&wire).await?;
                    writer.flush().await?;
                    return Ok(());
                }
            }
            if !held.is_empty() && conn.in_flight() < held.cap {
                // A slot freed meanwhile (a call cancelled): its request.
                continue;
            }
            // Calls sent as notifications (`tools/call` without an id) are
            // driven too: their wakes reach this task, and only this poll
            // moves them on.
            let busy = conn.messages_in_flight() > 0 || conn.in_flight() > 0 || !held.is_empty();
            let asking = conn.awaits_client_answers();
            let bound = if asking {
                HELD_BYTES_ASKING
            } else {
                HELD_BYTES
            };
            let reading = !eof && held.bytes < bound;
            if eof || !asking || reading {
                give_up_at = None;
            } else if give_up_at.is_none() {
                give_up_at = Some(tokio::time::Instant::now() + crate::server::HELD_STALL_GRACE);
            }
            tokio::select! {
                read = reader.read_buf(&mut input), if reading => {
                    if read? == 0 {
                        eof = true;
                        // No answer to a request sent to the client can
                        // come any more.
                        if let Some(peer) = conn.context().peer() {
                            peer.close();
                        }
                        deadline = Some(tokio::time::Instant::now() + DRAIN_GRACE);
                        // A last line without its newline is a message too
                        // (one cut short gets -32700).
                        if let Some(range) = framer.finish(&input) {
                            let line = input.split().freeze().slice(range);
                            framer.reset();
                            self.take_line(line, &mut held, &mut conn, &mut replies, &mut notes, &mut wire);
                        }
                    }
                }
                n = std::future::poll_fn(|cx| {
                    let answering = conn.messages_in_flight() > 0;
                    match conn.poll_replies(dispatcher, cx, &mut replies) {
                        // The last message waiting ended with no reply (a
                        // cancelled call writes none): the loop looks again.
                        std::task::Poll::Pending
                            if answering && conn.messages_in_flight() == 0 =>
                        {
                            std::task::Poll::Ready(0)
                        }
                        // A slot freed without a reply (a notification
                        // ended): the next held request's.
                        std::task::Poll::Pending
                            if !held.is_empty() && conn.in_flight() < held.cap =>
                        {
                            std::task::Poll::Ready(0)
                        }
                        other => other,
                    }
                }), if busy => {
                    // What the calls sent before they finished goes first.
                    while let Ok(note) = notes.try_recv() {
                        push_line(&mut wire, &note);
                    }
                    frame_replies(&mut replies, n, &mut wire);
                }
                Some(note) = notes.recv() => push_line(&mut wire, &note),
                changed = changes.recv(), if watching_changes => {
                    match changed {
                        Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            if session.is_initialized() {
                                push_line(&mut wire, br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => watching_changes = false,
                    }
                }
                _ = std::future::poll_fn(|cx| {
                    // Expires what is due (its cancel notices and the
                    // tools' wakes bring this loop round), then waits.
                    if let Some(peer) = &peer {
                        peer_deadlines.poll_peer(peer, cx);
                    }
                    std::task::Poll::<()>::Pending
                }) => {}
                _ = sleep_until(deadline), if eof => {}
                _ = sleep_until(give_up_at), if give_up_at.is_some() => {
                    give_up_at = None;
                    conn.give_up_on_answers();
                }
            }
        }
    }

    /// The grace after the input's end is over: every request not
    /// answered yet, running, waiting for a slot or held, is answered with
    /// -32800 saying so (the client may still read: it closed only its
    /// side), rather than left without an answer.
    fn give_up_at_the_end(
        &self,
        held: &mut Held,
        conn: &mut crate::Connection,
        replies: &mut Vec<u8>,
        notes: &mut Receiver<Bytes>,
        wire: &mut Vec<u8>,
    ) {
        const DATA: &[u8] =
            br#"{"reason":"the input ended and the request was not answered within 2 s"}"#;
        // What the calls sent before they are given up on comes first.
        while let Ok(note) = notes.try_recv() {
            push_line(wire, &note);
        }
        while let Some((line, id)) = held.lines.pop_front() {
            held.bytes -= line.len();
            match id {
                Some(id) => {
                    replies.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
                    replies.extend_from_slice(&id);
                    replies.extend_from_slice(
                        br#","error":{"code":-32800,"message":"Request cancelled","data":"#,
                    );
                    replies.extend_from_slice(DATA);
                    replies.extend_from_slice(b"}}");
                    frame_replies(replies, 1, wire);
                }
                // A call sent as a notification is owed nothing: not
                // started now, to be given up on at once.
                None if self.is_notification(&line) => {}
                // What is answered at once: a line that is no request, a
                // batch's refusal.
                None => self.answer_line(&line, held, conn, replies, notes, wire),
            }
        }
        let n = conn.cancel_all_answering(DATA, replies);
        frame_replies(replies, n, wire);
        // A batch's reply, complete now.
        let dispatcher = &self.dispatcher;
        if let Some(n) = futures_util::FutureExt::now_or_never(std::future::poll_fn(|cx| {
            super::poll_drain(conn, dispatcher, cx, replies)
        })) {
            frame_replies(replies, n, wire);
        }
        while let Ok(note) = notes.try_recv() {
            push_line(wire, &note);
        }
    }

    /// Starts `line`'s message, or holds it: a request waits while calls
    /// are at the cap, or others wait before it.
    fn take_line(
        &self,
        line: Bytes,
        held: &mut Held,
        conn: &mut crate::Connection,
        replies: &mut Vec<u8>,
        notes: &mut Receiver<Bytes>,
        wire: &mut Vec<u8>,
    ) {
        match self.takes_a_slot(&line, conn) {
            Slot::Takes(id) if !held.is_empty() || conn.in_flight() >= held.cap => {
                // A copy: the line is a slice of the chunk it was read
                // into, which it would keep whole (held lines up to 5 MiB
                // kept about 90 times that).
                held.hold(Bytes::copy_from_slice(&line), id);
            }
            _ => self.answer_line(&line, held, conn, replies, notes, wire),
        }
    }

    /// Starts `line`'s message; what it answers at once goes to `wire`
    /// now, after the messages its call sent (a call finishing next would
    /// be framed with it).
    fn answer_line(
        &self,
        line: &Bytes,
        held: &mut Held,
        conn: &mut crate::Connection,
        replies: &mut Vec<u8>,
        notes: &mut Receiver<Bytes>,
        wire: &mut Vec<u8>,
    ) {
        self.start_line(line, held, conn, replies);
        while let Ok(note) = notes.try_recv() {
            push_line(wire, &note);
        }
        // One message, so at most one reply.
        frame_replies(replies, 1, wire);
    }

    /// Whether `line` is a request without an id.
    fn is_notification(&self, line: &Bytes) -> bool {
        use crate::message::{Incoming, Message};
        let arena = bumpalo::Bump::new();
        let parsed = self.dispatcher.inner.parser.parse_incoming(line, &arena);
        matches!(parsed, Ok(Message::Single(Incoming::Request(r))) if r.id().is_none())
    }

    /// Whether a line waits for a slot when calls are at the cap: a
    /// request does (or what may be one: a batch, a line that is not
    /// JSON-RPC, answered in its turn), and a call sent as a notification
    /// (`tools/call` without an id runs as a call does, and past the cap
    /// would wait in the dispatcher's queue, unbounded); the protocol's
    /// notifications (`notifications/cancelled` among them), answers to
    /// the server's own requests, broken ones too, do not (a tool may be
    /// waiting for them), and neither does `ping`, which MCP says the
    /// receiver "MUST respond promptly" to: a client checking that the
    /// server is alive would otherwise wait for a running call to end.
    fn takes_a_slot(&self, line: &Bytes, conn: &crate::Connection) -> Slot {
        use crate::message::{Incoming, Message};
        let arena = bumpalo::Bump::new();
        match self.dispatcher.inner.parser.parse_incoming(line, &arena) {
            Ok(Message::Single(Incoming::Request(r))) => match r.id() {
                _ if r.method() == "ping" => Slot::Free,
                Some(id) => Slot::Takes(Some(id.as_bytes().into())),
                None if r.method().starts_with("notifications/") => Slot::Free,
                None => Slot::Takes(None),
            },
            Ok(Message::Single(Incoming::Response(_) | Incoming::InvalidResponse(_))) => Slot::Free,
            Ok(Message::Single(Incoming::Invalid(i))) => {
                // Against the ids given when it was read.
                conn.note_ids_given();
                if conn.given.is_bare_answer(&i) {
                    Slot::Free
                } else {
                    Slot::Takes(None)
                }
            }
            _ => Slot::Takes(None),
        }
    }

    /// Starts one line's message; answers written at once go to `replies`.
    /// A cancellation of a request still held takes it out unanswered, as
    /// one of a running call drops the call.
    fn start_line(
        &self,
        line: &Bytes,
        held: &mut Held,
        conn: &mut crate::Connection,
        replies: &mut Vec<u8>,
    ) {
        if is_batch(line) {
            write_batch_refusal(replies);
            return;
        }
        conn.start(&self.dispatcher, line, replies);
        for id in apply_cancels(conn) {
            held.forget(&id);
        }
    }
}

/// Whether a line waits for a slot at the cap ([`McpServer::takes_a_slot`]).
enum Slot {
    /// It does; the request's id, if it is a single request.
    Takes(Option<Box<[u8]>>),
    Free,
}

/// Requests read while calls were at the cap, in order, with their ids.
struct Held {
    lines: std::collections::VecDeque<(Bytes, Option<Box<[u8]>>)>,
    bytes: usize,
    /// The dispatcher's `max_in_flight`.
    cap: usize,
}

impl Held {
    fn new(cap: usize) -> Held {
        Held {
            lines: Default::default(),
            bytes: 0,
            cap,
        }
    }

    fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    fn hold(&mut self, line: Bytes, id: Option<Box<[u8]>>) {
        self.bytes += line.len();
        self.lines.push_back((line, id));
    }

    fn take(&mut self) -> Option<Bytes> {
        let (line, _) = self.lines.pop_front()?;
        self.bytes -= line.len();
        Some(line)
    }

    /// Takes out the first request held with id `id` (its JSON text).
    fn forget(&mut self, id: &[u8]) {
        if let Some(at) = self
            .lines
            .iter()
            .position(|(_, i)| i.as_deref() == Some(id))
        {
            let (line, _) = self.lines.remove(at).expect("found");
            self.bytes -= line.len();
        }
    }
}

/// Closes the connection's peer when dropped.
struct ClosesPeer(Option<crate::peer::Peer>);

impl Drop for ClosesPeer {
    fn drop(&mut self) {
        if let Some(peer) = &self.0 {
            peer.close();
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Appends `message` as one line: a message a tool wrote raw
/// (`Peer::notify_raw`), pretty-printed, would otherwise be cut in lines
/// that are not messages.
fn push_line(wire: &mut Vec<u8>, message: &[u8]) {
    Lines::new().encode(message, wire);
}

/// Moves `n` complete replies (written back to back) from `replies` to
/// `wire`, one per line.
fn frame_replies(replies: &mut Vec<u8>, n: usize, wire: &mut Vec<u8>) {
    if replies.is_empty() {
        return;
    }
    if n == 1 {
        push_line(wire, replies);
    } else {
        // Several replies back to back: find where each ends.
        let mut framer = Concatenated::new().max_frame(usize::MAX);
        let mut rest = &replies[..];
        while !rest.is_empty() {
            match framer.next_frame(rest) {
                Step::Frame { range, consumed } => {
                    push_line(wire, &rest[range]);
                    rest = &rest[consumed..];
                }
                _ => break,
            }
        }
    }
    replies.clear();
}
