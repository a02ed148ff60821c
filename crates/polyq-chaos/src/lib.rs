//! The fault campaign: each scenario runs one family's publishers and workers on real brokers
//! through one fault (a worker killed with SIGKILL, a broker restarted, the network cut or
//! slowed, a resource alarm held), bounded in messages and time, and reports what the broker
//! confirmed, what no worker processed (lost), what was processed twice, and how long
//! processing took to resume. `scripts/chaos` runs them all; the short forms run as tests.
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> anyhow::Result<()> {
//! use polyq_chaos::{Binding, Campaign, Scenario, Settings};
//!
//! let program = std::env::current_exe()?;
//! let mut campaign = Campaign::new(Settings::quick(program));
//! let outcome = campaign.run(Scenario::Kill(Binding::BabelRedis)).await?;
//! assert_eq!(outcome.lost, 0, "{outcome}");
//! # Ok(())
//! # }
//! ```

mod binding;
mod kill_loop;
mod ledger;
mod load;
mod outcome;
mod redis_server;
mod scenario;
mod timeline;

pub use binding::{Binding, Publisher};
pub use kill_loop::KillLoop;
pub use ledger::{Ledger, LedgerTail, Tally};
pub use load::{FaultReport, Load, Progress};
pub use outcome::Outcome;
pub use redis_server::OwnRedis;
pub use scenario::{Campaign, Ports, Scenario, Settings};
pub use timeline::Timeline;
