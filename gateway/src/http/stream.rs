//! The client-facing SSE body. It polls the upstream body itself (no task, no channel): when the
//! client goes away hyper drops the body, which drops the upstream response and so cancels the
//! upstream request, and back-pressure flows from the client socket to the upstream socket for
//! free. Each complete upstream event goes through the route's [`StreamTransform`]. The upstream
//! connection goes back to its pool when the upstream stream has ended cleanly.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Incoming};

use crate::dialect::error::GwError;
use crate::dialect::transform::StreamTransform;
use crate::http::client::Conn;
use crate::sse::SseSplitter;

pub struct SseBody {
    upstream: Incoming,
    /// The upstream connection, released when `upstream` has ended cleanly.
    conn: Option<Conn>,
    splitter: SseSplitter,
    transform: Box<dyn StreamTransform>,
    out: BytesMut,
    /// Upstream silence longer than this ends the stream with a timeout error event.
    idle: Duration,
    /// Armed for `last_data + idle`, but only moved when it fires: re-registering a timer for
    /// every frame would cost more than the frame.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The waker the timer was last polled with.
    timer_waker: Option<Waker>,
    last_data: tokio::time::Instant,
    upstream_done: bool,
    done: bool,
}

impl SseBody {
    pub fn new(
        upstream: Incoming,
        conn: Conn,
        transform: Box<dyn StreamTransform>,
        idle: Duration,
    ) -> Self {
        SseBody {
            upstream,
            conn: Some(conn),
            splitter: SseSplitter::default(),
            transform,
            out: BytesMut::with_capacity(1024),
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            timer_waker: None,
            last_data: tokio::time::Instant::now(),
            upstream_done: false,
            done: false,
        }
    }

    fn fail(&mut self, err: GwError) {
        self.transform.on_error(&err, &mut self.out);
        self.upstream_done = true;
    }

    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if !self.out.is_empty() {
                return Poll::Ready(Some(self.out.split().freeze()));
            }
            if self.upstream_done || self.done {
                self.done = true;
                return Poll::Ready(None);
            }
            match Pin::new(&mut self.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    self.last_data = tokio::time::Instant::now();
                    self.splitter.push_bytes(data);
                    while let Some(ev) = self.splitter.next_event() {
                        if let Err(e) = self.transform.on_event(&ev, &mut self.out) {
                            self.fail(e);
                            break;
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.fail(GwError::bad_upstream(format!("upstream stream broke: {e}")));
                }
                Poll::Ready(None) => {
                    self.upstream_done = true;
                    if let Some(c) = self.conn.take() {
                        c.release();
                    }
                    let r = match self.splitter.finish() {
                        Some(ev) => self.transform.on_event(&ev, &mut self.out),
                        None => Ok(()),
                    };
                    let r = r.and_then(|()| self.transform.on_end(&mut self.out));
                    if let Err(e) = r {
                        self.fail(e);
                    }
                }
                Poll::Pending => {
                    // Polling the timer registers this task's waker with it; while the waker is
                    // the same and the timer has not fired, that registration stands.
                    let registered = self
                        .timer_waker
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()));
                    if registered && !self.timer.is_elapsed() {
                        return Poll::Pending;
                    }
                    while self.timer.as_mut().poll(cx).is_ready() {
                        let due = self.last_data + self.idle;
                        if due <= tokio::time::Instant::now() {
                            self.fail(GwError::timeout());
                            break;
                        }
                        self.timer.as_mut().reset(due);
                    }
                    // Recorded only if that last poll registered the waker: once the task's
                    // cooperative budget is spent, tokio's Sleep answers Pending without
                    // registering anything (a Pending poll that did register spends no budget).
                    self.timer_waker =
                        tokio::task::coop::has_budget_remaining().then(|| cx.waker().clone());
                    if self.upstream_done {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
