//! `trainer stream-instructions`: what one streamed event costs a gateway binary, counted by
//! cachegrind (issue 29). Per shape, three runs under cachegrind: one serving nothing, one serving
//! N streams of 1 content event, one serving N streams of `--events` content events (the mock's
//! own `[[mock:frames:K]]`, which overrides the payload's). The difference of the last two,
//! divided by N x (events - 1), is the cost of one more event in a stream: request handling,
//! the stream's head and its end cancel out. The 1-event run minus the idle run, divided by N, is
//! the cost of a whole stream of one event (the request, the first event, the terminal events).
//!
//! The mock paces its frames (`[[mock:frame_interval_ms:N]]`), so that events arrive apart, as a
//! model's tokens do; unpaced frames on loopback can arrive back to back and be read several at
//! a time, which would count the per-read work once for several events.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

use crate::drive::shapes;
use crate::measure::instructions::{self, Counts, PerRequest, RunArgs, Upstream};

#[derive(clap::Args, Debug)]
pub struct StreamInstructionsArgs {
    /// The gateway binary to measure (any build, or bench/nginx-as-gateway).
    #[arg(long)]
    pub gateway: PathBuf,
    /// Stream shape files (shapes/NAME-stream.json), each measured on its own.
    #[arg(long = "shape", required = true)]
    pub shapes: Vec<PathBuf>,
    /// Streams in each measured run.
    #[arg(long, default_value_t = 50)]
    pub streams: u64,
    /// Content events of a stream in the long run (the short run has 1).
    #[arg(long, default_value_t = 41)]
    pub events: u64,
    /// Streams open at once (keep-alive connections of the load driver).
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Pause of the mock before each frame after the first, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub frame_interval_ms: u64,
    /// valgrind, by absolute path.
    #[arg(long, default_value = "/usr/bin/valgrind")]
    pub valgrind: PathBuf,
    /// Also write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Clone, Debug)]
pub struct StreamMeasurement {
    pub gateway: String,
    pub shape: String,
    pub streams: u64,
    pub events: u64,
    pub frame_interval_ms: u64,
    pub idle: Counts,
    pub one_event: Counts,
    pub many_events: Counts,
    /// (many_events - one_event) / (streams x (events - 1)).
    pub per_event: PerRequest,
    /// (one_event - idle) / streams: a whole stream of one event.
    pub per_one_event_stream: PerRequest,
}

/// The three runs of one shape.
pub fn measure(
    gateway: &Path,
    shape: &shapes::Loaded,
    args: &StreamInstructionsArgs,
) -> Result<StreamMeasurement> {
    if !shape.shape.stream {
        bail!(
            "stream-instructions: shape {} does not stream",
            shape.shape.name
        );
    }
    let run = RunArgs {
        requests: args.streams,
        connections: args.connections,
        valgrind: args.valgrind.clone(),
        redis_server: None,
    };
    let one = format!(
        "[[mock:frames:1]][[mock:frame_interval_ms:{}]]",
        args.frame_interval_ms
    );
    let many = format!(
        "[[mock:frames:{}]][[mock:frame_interval_ms:{}]]",
        args.events, args.frame_interval_ms
    );
    let scratch = crate::drive::tempdir("trainer-stream-instructions")?;
    let result = (|| -> Result<StreamMeasurement> {
        let idle = instructions::run_once(
            gateway,
            shape,
            0,
            &run,
            instructions::AS_THE_PAYLOAD_ASKS,
            &scratch,
        )?;
        let streams_of = |directives: &str, label| {
            let upstream = Upstream {
                directives: Some(directives),
                label,
            };
            instructions::run_once(gateway, shape, args.streams, &run, upstream, &scratch)
        };
        let one_event = streams_of(&one, "one-event")?;
        let many_events = streams_of(&many, "many-events")?;
        if many_events.instructions < one_event.instructions {
            bail!(
                "{} streams of {} events counted fewer instructions ({}) than of 1 event ({})",
                args.streams,
                args.events,
                many_events.instructions,
                one_event.instructions
            );
        }
        Ok(StreamMeasurement {
            gateway: gateway.display().to_string(),
            shape: shape.shape.name.clone(),
            streams: args.streams,
            events: args.events,
            frame_interval_ms: args.frame_interval_ms,
            idle,
            one_event,
            many_events,
            per_event: instructions::per_request_signed(
                one_event,
                many_events,
                args.streams * (args.events - 1),
            ),
            per_one_event_stream: instructions::per_request(idle, one_event, args.streams)?,
        })
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result.with_context(|| {
        format!(
            "stream-instructions: {} on shape {}",
            gateway.display(),
            shape.shape.name
        )
    })
}

pub fn run(args: StreamInstructionsArgs) -> Result<()> {
    if args.streams == 0 || args.events < 2 {
        bail!("stream-instructions: --streams must be positive and --events at least 2");
    }
    if !args.valgrind.is_absolute() {
        bail!(
            "stream-instructions: --valgrind must be an absolute path, not {}",
            args.valgrind.display()
        );
    }
    let gateway = instructions::absolute_gateway(&args.gateway)?;
    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>14} {:>10}",
        "shape", "instr/evt", "I1m/evt", "Bcm/evt", "instr/stream1", "instr/req*"
    );
    let mut all = Vec::new();
    for path in &args.shapes {
        let shape = shapes::load(path)?;
        let m = measure(&gateway, &shape, &args)?;
        // A stream of `events` events, from the two figures: what a request of the shape costs.
        let whole = m.per_one_event_stream.instructions
            + m.per_event.instructions * (args.events - 1) as f64;
        println!(
            "{:<40} {:>10.0} {:>10.1} {:>10.1} {:>14.0} {:>10.0}",
            m.shape,
            m.per_event.instructions,
            m.per_event.i1_misses,
            m.per_event.mispredicted_branches,
            m.per_one_event_stream.instructions,
            whole
        );
        all.push(m);
    }
    println!(
        "instr/evt: one more content event; instr/stream1: a whole stream of 1 content event \
         (request, first event, end); instr/req*: a stream of {} events",
        args.events
    );
    if let Some(p) = &args.json {
        instructions::write_json(p, &all)?;
    }
    Ok(())
}
