//! One native chat stream event through the gateway's own per-event code, without a server: the
//! SSE splitter and the native stream transform (the frame's check and its copy with the model
//! renamed), on the frame the trainer's mock sends for `shapes/chat-minimal-stream.json`. A
//! measurement aid for issue 29 (docs/bench-results/streams.md), not a product: under valgrind,
//! the difference of two runs is the cost of the gateway's own part of an event, apart from hyper
//! and tokio, in seconds instead of the minutes of `bench/stream-instructions`:
//!
//!     cargo build --release -p gateway --example native_event
//!     for n in 1 10001; do valgrind --tool=cachegrind --cache-sim=no \
//!         --cachegrind-out-file=/dev/null target/release/examples/native_event $n; done
//!     # (Ir of the second - Ir of the first) / 10000 = instructions per event
//!
//! `native_event N drop` measures a stream whose client did not ask for usage (the usage chunk is
//! looked for in every event).

use bytes::{Bytes, BytesMut};
use gateway::dialect::native::NativeStream;
use gateway::dialect::transform::StreamTransform;
use gateway::dialect::Dialect;
use gateway::sse::SseSplitter;

/// The mock's content chunk (`trainer/src/mock/wire.rs`, `chat_sse`), as the upstream sends it.
const FRAME: &[u8] = br#"data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1700000000,"model":"mock-gpt-2024-07-18","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" lorem"},"logprobs":null,"finish_reason":null}]}

"#;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let drop_usage = args.next().as_deref() == Some("drop");
    let mut t = NativeStream::new(Dialect::Chat, Bytes::from_static(b"\"gpt-4o-mini\""));
    t.drop_usage = drop_usage;
    let mut splitter = SseSplitter::default();
    let mut out = BytesMut::with_capacity(1024);
    // Stands for hyper's read buffer, from which a chunk's data is split off as a `Bytes`.
    let mut read_buf = BytesMut::with_capacity(8192);
    let mut sent = 0usize;
    for _ in 0..n {
        read_buf.extend_from_slice(std::hint::black_box(FRAME));
        splitter.push_bytes(read_buf.split().freeze());
        while let Some(ev) = splitter.next_event() {
            t.on_event(&ev, &mut out)
                .expect("the mock's frame is valid");
        }
        sent += out.split().freeze().len();
    }
    std::hint::black_box(sent);
}
