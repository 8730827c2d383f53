//! One client connection as its worker sees it: the state the sweep and the drain act on, the
//! socket hyper reads and writes, and the watch for a client that hangs up while its request is
//! in flight.
//!
//! hyper is built with `half_close(true)`, so it does not read from a connection while a request
//! is in flight. Its own hang-up check was such a read, and the read first grew hyper's read
//! buffer: the request still held slices of it (its head and body), so the buffer could not be
//! reused in place, and a new one was allocated and then promoted to a shared one when the next
//! head was split off, two allocations per request. The worker looks for the hang-up itself
//! instead ([`ConnState::poll_hung_up`]): a one-byte peek, woken by the same readiness hyper's
//! read waited on, that allocates nothing. The semantics are hyper's: an end of stream (or a
//! reset) while the request is in flight closes the connection, which drops the request's future
//! and body and so cancels the upstream call; bytes hyper has not read yet (a pipelined next
//! request) end the watch for this request, as they end hyper's.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::HttpService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::http::body::GwBody;

/// What the sweep or the shutdown asks of a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    None,
    /// It waited too long for a request's head: close it.
    Close,
    /// The worker is draining: finish the request in flight, then close.
    Drain,
}

/// One client connection's state: shared by its task, its service (the requests it serves) and the
/// worker's sweep, all on the worker's thread. The socket is not part of it: the sweep keeps a
/// state until its next tick, and the socket must close when the connection's task ends.
pub struct ConnState {
    /// A request is being served: from its head to the end of its response body.
    pub busy: Cell<bool>,
    /// The sweep tick at which it was accepted or its last response ended.
    pub idle_since: Cell<u32>,
    signal: Cell<Signal>,
    waker: RefCell<Option<Waker>>,
    /// Its task has ended (the sweep forgets it).
    pub done: Cell<bool>,
    /// The worker's sweep tick.
    tick: Rc<Cell<u32>>,
    /// The request in flight has seen bytes hyper has not read yet (the next request's): its
    /// hang-up watch is over.
    next_seen: Cell<bool>,
}

impl ConnState {
    pub fn new(tick: Rc<Cell<u32>>) -> Self {
        ConnState {
            busy: Cell::new(false),
            idle_since: Cell::new(tick.get()),
            signal: Cell::new(Signal::None),
            waker: RefCell::new(None),
            done: Cell::new(false),
            tick,
            next_seen: Cell::new(false),
        }
    }

    pub fn send(&self, s: Signal) {
        self.signal.set(s);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// The signal sent since the last call, registering the task to be woken by the next one.
    pub fn poll_signal(&self, cx: &Context<'_>) -> Signal {
        let s = self.signal.replace(Signal::None);
        if s == Signal::None {
            let mut w = self.waker.borrow_mut();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        s
    }

    /// A request has started (its head was read).
    pub fn begin_request(&self) {
        self.busy.set(true);
        self.next_seen.set(false);
    }

    /// The response has ended (hyper dropped its body).
    fn end_request(&self) {
        self.busy.set(false);
        self.idle_since.set(self.tick.get());
    }

    /// Whether the client hung up on `socket` while a request is in flight; otherwise the task is
    /// woken when the client sends or closes. Called after hyper's connection returned pending, so
    /// that whatever of the request hyper could read has been read and what is left to see is the
    /// client's next move. Costs no system call while the socket is known to have nothing new
    /// (tokio's readiness; a short read clears it).
    pub fn poll_hung_up(&self, socket: &ClientSocket, cx: &mut Context<'_>) -> bool {
        if !self.busy.get() || self.next_seen.get() {
            return false;
        }
        let mut one = [0u8; 1];
        let mut buf = ReadBuf::new(&mut one);
        match socket.borrow().poll_peek(cx, &mut buf) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(_)) => {
                // A pipelined request: hyper reads it when this one is done. Its readiness stays
                // set, so watching further would only spin.
                self.next_seen.set(true);
                false
            }
            Poll::Pending => false,
        }
    }
}

/// The client's socket, shared by hyper's I/O ([`ClientIo`]) and the connection task's hang-up
/// watch. Never borrowed across an await, so the two never overlap; it closes when both are gone,
/// at the end of the task.
pub type ClientSocket = Rc<RefCell<TcpStream>>;

/// The client socket as hyper's I/O: tokio's own reads and writes on it.
pub struct ClientIo(pub ClientSocket);

impl hyper::rt::Read for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: tokio's ReadBuf only writes initialised bytes into the uninitialised part and
        // reports how many; hyper's cursor is advanced by exactly that many.
        let n = unsafe {
            let mut tbuf = ReadBuf::uninit(buf.as_mut());
            let mut s = self.0.borrow_mut();
            match Pin::new(&mut *s).poll_read(cx, &mut tbuf) {
                Poll::Ready(Ok(())) => tbuf.filled().len(),
                other => return other,
            }
        };
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_shutdown(cx)
    }
}

/// A response body that marks its connection idle again when hyper is done with it.
pub struct ServedBody {
    pub body: GwBody,
    pub conn: Rc<ConnState>,
}

impl Drop for ServedBody {
    fn drop(&mut self) {
        self.conn.end_request();
    }
}

impl Body for ServedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A client connection's task: hyper's connection, run until it ends, the sweep closes it, or the
/// client hangs up while a request is in flight; when the worker drains, it finishes the request in
/// flight and closes. A struct rather than an async block: an async block that moves the
/// connection it captured into a pinned local keeps room for it twice (the captured value and the
/// local, 0.6 KB each), and the task is allocated for as long as the connection is open.
pub struct ConnTask<S: HttpService<Incoming>> {
    conn: http1::Connection<ClientIo, S>,
    st: Rc<ConnState>,
    socket: ClientSocket,
    /// The worker's count of open connections, less one when this task ends.
    open: Rc<Cell<usize>>,
    draining: bool,
}

impl<S: HttpService<Incoming>> ConnTask<S> {
    pub fn new(
        conn: http1::Connection<ClientIo, S>,
        st: Rc<ConnState>,
        socket: ClientSocket,
        open: Rc<Cell<usize>>,
    ) -> Self {
        ConnTask {
            conn,
            st,
            socket,
            open,
            draining: false,
        }
    }

    fn end(&self) -> Poll<()> {
        self.st.done.set(true);
        self.open.set(self.open.get() - 1);
        Poll::Ready(())
    }
}

impl<S> Future for ConnTask<S>
where
    S: HttpService<Incoming, ResBody = ServedBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // hyper's connection is `Unpin`, and so is the rest.
        let this = self.get_mut();
        loop {
            match this.st.poll_signal(cx) {
                // Dropping the connection (when the task ends) closes it.
                Signal::Close => return this.end(),
                Signal::Drain if !this.draining => {
                    this.draining = true;
                    Pin::new(&mut this.conn).graceful_shutdown();
                }
                _ => {
                    return match Pin::new(&mut this.conn).poll(cx) {
                        Poll::Ready(_) => this.end(),
                        // Dropping the connection cancels the request.
                        Poll::Pending if this.st.poll_hung_up(&this.socket, cx) => this.end(),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}
