//! `polyq demo`: AceMQ and BabelQueue at work, as a timeline, on the embedded broker by
//! default or on a real one with `--url`.
//!
//! Every line is `+<seconds>s <part> <event> <detail>`; the sequence of events is the same on
//! every run and every broker, so it can be tested, while the details (ids, times) vary.

mod acemq;
mod babel;
mod timeline;

use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};

use super::babel::Layout;
pub(crate) use timeline::Timeline;

/// The embedded broker the demo runs on when no URL is given.
const EMBEDDED: &str = "memory://polyq-demo";

/// `polyq demo` arguments.
#[derive(Debug, Args)]
pub(crate) struct Demo {
    #[command(subcommand)]
    part: Option<Part>,
    /// The broker: the embedded one by default; amqp:// (both parts) or redis:// (BabelQueue).
    #[arg(long, global = true, default_value = EMBEDDED)]
    url: String,
    /// The Redis key layout of the BabelQueue part on redis://.
    #[arg(long, global = true, value_enum, default_value_t = Layout::Default)]
    layout: Layout,
}

/// Which part to run; both when none is named.
#[derive(Debug, Clone, Copy, Subcommand)]
enum Part {
    /// AceMQ: a retried message, one exhausting its retries into .dlq, a malformed body parked.
    Acemq,
    /// BabelQueue: a retried job, an unknown URN dead-lettered, a poison body, a redrive.
    Babel,
}

/// Runs the demo.
pub(crate) async fn run(demo: Demo) -> anyhow::Result<ExitCode> {
    let is_redis = babelqueue::transport::redis::is_redis_url(&demo.url);
    let (acemq_part, babel_part) = match demo.part {
        None => (true, true),
        Some(Part::Acemq) => (true, false),
        Some(Part::Babel) => (false, true),
    };
    if acemq_part && is_redis {
        bail!(
            "--url {}: AceMQ runs on RabbitMQ or the embedded broker; run `polyq demo babel --url ...` for Redis",
            polyq_amqp::redact_url(&demo.url)
        );
    }
    let timeline = Timeline::start();
    if acemq_part {
        acemq::run(&demo.url, &timeline).await?;
    }
    if babel_part {
        babel::run(&demo.url, demo.layout, &timeline).await?;
    }
    timeline.event(
        "demo",
        "done",
        "every step ran; queues the demo declared are removed",
    );
    Ok(ExitCode::SUCCESS)
}

/// A name no other run uses, so a demo on a shared broker touches nothing else.
fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("polyq-demo.{prefix}.{}", &id[..8])
}
