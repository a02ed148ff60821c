//! The scenarios of the campaign, and the brokers of its own they run on.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use polyq_testkit::proxy::TcpProxy;
use polyq_testkit::rabbitmq_node::OwnNode;

use crate::binding::Binding;
use crate::kill_loop::KillLoop;
use crate::load::{FaultReport, Load, Progress};
use crate::outcome::Outcome;
use crate::redis_server::OwnRedis;

/// One fault on one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The worker process killed with SIGKILL again and again.
    Kill(Binding),
    /// The broker (a node or server of the campaign's own) restarted under load.
    Restart(Binding),
    /// The network to the broker cut, through a proxy, then restored.
    Cut(Binding),
    /// The network to the broker slowed down, through a proxy, then back to speed.
    Slow(Binding),
    /// A memory alarm on a RabbitMQ node of the campaign's own, held, then cleared.
    MemoryAlarm(Binding),
    /// A disk alarm likewise.
    DiskAlarm(Binding),
}

impl Scenario {
    /// Every scenario, in the campaign's order.
    pub fn all() -> Vec<Scenario> {
        let mut all = Vec::new();
        let each = |make: fn(Binding) -> Scenario| Binding::ALL.into_iter().map(make);
        all.extend(each(Scenario::Kill));
        all.extend(each(Scenario::Restart));
        all.extend(each(Scenario::Cut));
        all.extend(each(Scenario::Slow));
        let rabbitmq = [Binding::AcemqRabbitmq, Binding::BabelRabbitmq];
        all.extend(rabbitmq.map(Scenario::MemoryAlarm));
        all.extend(rabbitmq.map(Scenario::DiskAlarm));
        all
    }

    fn parts(self) -> (&'static str, Binding) {
        match self {
            Scenario::Kill(b) => ("kill", b),
            Scenario::Restart(b) => ("restart", b),
            Scenario::Cut(b) => ("cut", b),
            Scenario::Slow(b) => ("slow", b),
            Scenario::MemoryAlarm(b) => ("memory-alarm", b),
            Scenario::DiskAlarm(b) => ("disk-alarm", b),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (fault, binding) = self.parts();
        write!(f, "{fault}-{binding}")
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Scenario::all()
            .into_iter()
            .find(|scenario| scenario.to_string() == name)
            .ok_or_else(|| format!("unknown scenario `{name}`; `polyq-chaos list` prints them all"))
    }
}

/// Where the campaign's own brokers and proxies listen; `None` takes a free port.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ports {
    /// The RabbitMQ node: AMQP and Erlang distribution ports.
    pub rabbitmq: Option<(u16, u16)>,
    /// The Redis server.
    pub redis: Option<u16>,
    /// The first proxy; each scenario takes the next.
    pub proxy: Option<u16>,
}

/// How big and how long each scenario is.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Messages of a kill loop.
    pub kill_messages: u64,
    /// Kills of a kill loop.
    pub kills: u32,
    /// The longest a kill loop may take.
    pub kill_limit: Duration,
    /// Messages per second under the other faults.
    pub rate: u64,
    /// How long the traffic of a restart, cut or slow-down lasts.
    pub load: Duration,
    /// Traffic before the fault starts.
    pub lead: Duration,
    /// How long a broker stays down, or the network cut or slow.
    pub outage: Duration,
    /// How long an alarm is held.
    pub alarm: Duration,
    /// The program whose `worker` command runs a worker process (this one).
    pub worker_program: PathBuf,
    /// The campaign's ports.
    pub ports: Ports,
}

impl Settings {
    /// The campaign's sizes: 50,000 messages and 20 kills per kill loop, 30 s alarms, on the
    /// fault campaign's port range.
    pub fn campaign(worker_program: PathBuf) -> Self {
        Self {
            kill_messages: 50_000,
            kills: 20,
            kill_limit: Duration::from_secs(900),
            rate: 500,
            load: Duration::from_secs(20),
            lead: Duration::from_secs(5),
            outage: Duration::from_secs(3),
            alarm: Duration::from_secs(30),
            worker_program,
            ports: Ports {
                rabbitmq: Some((5720, 25720)),
                redis: Some(7300),
                proxy: Some(7400),
            },
        }
    }

    /// Seconds-long sizes for the test suite, on free ports.
    pub fn quick(worker_program: PathBuf) -> Self {
        Self {
            kill_messages: 2_000,
            kills: 2,
            kill_limit: Duration::from_secs(120),
            rate: 200,
            load: Duration::from_secs(4),
            lead: Duration::from_secs(1),
            outage: Duration::from_secs(1),
            alarm: Duration::from_secs(2),
            worker_program,
            ports: Ports::default(),
        }
    }
}

/// Runs scenarios, starting the brokers of its own when one first needs them and removing
/// them when dropped.
#[derive(Debug)]
pub struct Campaign {
    settings: Settings,
    node: Option<OwnNode>,
    redis: Option<OwnRedis>,
    proxies: u16,
}

impl Campaign {
    /// A campaign with `settings`; nothing is started yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            node: None,
            redis: None,
            proxies: 0,
        }
    }

    /// Runs `scenario`.
    ///
    /// # Errors
    /// When it cannot be carried out (a broker that does not start, a queue that cannot be
    /// filled); what it measured is in the [`Outcome`] otherwise.
    pub async fn run(&mut self, scenario: Scenario) -> anyhow::Result<Outcome> {
        let s = &self.settings;
        // Beyond every bound inside: the traffic, the alarm, publishers' retries, the drain.
        let limit = match scenario {
            Scenario::Kill(_) => s.kill_limit + Duration::from_secs(60),
            _ => s.lead + s.load + s.alarm + Load::LONGEST_TAIL + Duration::from_secs(60),
        };
        tokio::time::timeout(limit, self.run_unbounded(scenario))
            .await
            .map_err(|_| anyhow::anyhow!("did not finish within {limit:?}"))?
    }

    async fn run_unbounded(&mut self, scenario: Scenario) -> anyhow::Result<Outcome> {
        let name = scenario.to_string();
        let s = self.settings.clone();
        match scenario {
            Scenario::Kill(binding) => {
                KillLoop {
                    binding,
                    url: binding.shared_url(),
                    messages: s.kill_messages,
                    kills: s.kills,
                    worker_program: s.worker_program,
                    limit: s.kill_limit,
                }
                .run()
                .await
            }
            Scenario::Restart(binding) if binding.is_redis() => {
                let redis = self.redis().await?;
                let load = traffic(&s, binding, redis.url(), redis.url());
                load.run(&name, |progress| async move {
                    progress.until_confirmed(lead_messages(&s)).await;
                    let began = Instant::now();
                    redis.kill()?;
                    tokio::time::sleep(s.outage).await;
                    let ended = redis.restart().await?;
                    Ok(FaultReport {
                        began,
                        ended,
                        details: vec![format!(
                            "redis-server killed with SIGKILL, down {:.0}s",
                            s.outage.as_secs_f64()
                        )],
                        failure: None,
                    })
                })
                .await
            }
            Scenario::Restart(binding) => {
                let node = self.node().await?;
                let url = node.url();
                let load = traffic(&s, binding, url.clone(), url);
                let port = node.port();
                load.run(&name, |progress| async move {
                    progress.until_confirmed(lead_messages(&s)).await;
                    let began = Instant::now();
                    ctl(node, &["stop_app"])?;
                    tokio::time::sleep(s.outage).await;
                    ctl(node, &["start_app"])?;
                    let ended = accepting(port).await?;
                    Ok(FaultReport {
                        began,
                        ended,
                        details: vec![format!(
                            "stop_app, {:.0}s, start_app",
                            s.outage.as_secs_f64()
                        )],
                        failure: None,
                    })
                })
                .await
            }
            Scenario::Cut(binding) | Scenario::Slow(binding) => {
                let shared = binding.shared_url();
                let proxy = self.proxy(&shared).await?;
                let load = traffic(&s, binding, through(&shared, proxy.address())?, shared);
                let cut = matches!(scenario, Scenario::Cut(_));
                // Borrowed by the fault, so that it outlives the traffic.
                let proxy = &proxy;
                load.run(&name, |progress| async move {
                    progress.until_confirmed(lead_messages(&s)).await;
                    let before = progress.confirmed();
                    let began = Instant::now();
                    let detail = if cut {
                        proxy.cut();
                        tokio::time::sleep(s.outage).await;
                        proxy.restore();
                        format!("cut {:.0}s", s.outage.as_secs_f64())
                    } else {
                        proxy.slow_down(SLOW_DELAY);
                        tokio::time::sleep(s.outage * 2).await;
                        proxy.slow_down(Duration::ZERO);
                        format!(
                            "every chunk held {}ms for {:.0}s, {} confirmed meanwhile",
                            SLOW_DELAY.as_millis(),
                            (s.outage * 2).as_secs_f64(),
                            progress.confirmed() - before
                        )
                    };
                    Ok(FaultReport {
                        began,
                        ended: Instant::now(),
                        details: vec![detail],
                        failure: None,
                    })
                })
                .await
            }
            Scenario::MemoryAlarm(binding) | Scenario::DiskAlarm(binding) => {
                let memory = matches!(scenario, Scenario::MemoryAlarm(_));
                let node = self.node().await?;
                let url = node.url();
                let mut load = traffic(&s, binding, url.clone(), url);
                // Traffic before, during and after the alarm.
                load.messages = s.rate * (s.lead + s.alarm + s.load).as_secs();
                load.run(&name, |progress| async move {
                    progress.until_confirmed(lead_messages(&s)).await;
                    let (raise, clear): (&[&str], &[&str]) = if memory {
                        (
                            &["set_vm_memory_high_watermark", "0.0000001"],
                            &["set_vm_memory_high_watermark", "0.4"],
                        )
                    } else {
                        (
                            &["set_disk_free_limit", "1000000GB"],
                            &["set_disk_free_limit", "50MB"],
                        )
                    };
                    let raised = Instant::now();
                    ctl(node, raise)?;
                    let blocked = until(&progress, Duration::from_secs(60)).await;
                    let at_block = progress.confirmed();
                    tokio::time::sleep(s.alarm).await;
                    let while_blocked = progress.confirmed() - at_block;
                    ctl(node, clear)?;
                    let ended = Instant::now();
                    let failure = match blocked {
                        None => Some("the publishers were never blocked".to_owned()),
                        // Publishes the broker had read before it blocked may still confirm.
                        Some(_) if while_blocked > PUBLISHING_LANES => Some(format!(
                            "{while_blocked} publishes confirmed while the alarm was held"
                        )),
                        Some(_) => None,
                    };
                    Ok(FaultReport {
                        began: raised,
                        ended,
                        details: vec![format!(
                            "publishers blocked {} after the alarm, held {:.0}s, {while_blocked} confirmed meanwhile",
                            blocked.map_or_else(
                                || "never".to_owned(),
                                |at| format!("{:.2}s", (at - raised).as_secs_f64())
                            ),
                            s.alarm.as_secs_f64()
                        )],
                        failure,
                    })
                })
                .await
            }
        }
    }

    async fn node(&mut self) -> anyhow::Result<&OwnNode> {
        if self.node.is_none() {
            let ports = self.settings.ports.rabbitmq;
            let node = tokio::task::spawn_blocking(move || match ports {
                Some((port, dist)) => OwnNode::start_on("chaos", port, dist),
                None => OwnNode::start("chaos"),
            })
            .await
            .context("starting a RabbitMQ node")?;
            self.node = Some(node);
        }
        Ok(self.node.as_ref().expect("started above"))
    }

    async fn redis(&mut self) -> anyhow::Result<&mut OwnRedis> {
        if self.redis.is_none() {
            let port = match self.settings.ports.redis {
                Some(port) => port,
                None => free_port()?,
            };
            self.redis = Some(OwnRedis::start(port).await?);
        }
        Ok(self.redis.as_mut().expect("started above"))
    }

    async fn proxy(&mut self, upstream_url: &str) -> anyhow::Result<TcpProxy> {
        let upstream = url::Url::parse(upstream_url)?
            .socket_addrs(|| None)?
            .into_iter()
            .next()
            .context("the broker's address")?;
        let port = self
            .settings
            .ports
            .proxy
            .map_or(0, |first| first + self.proxies);
        self.proxies += 1;
        Ok(TcpProxy::start_on(SocketAddr::from(([127, 0, 0, 1], port)), upstream).await)
    }
}

/// How long the proxy holds each chunk in a slow-down.
const SLOW_DELAY: Duration = Duration::from_millis(50);
/// Publishing tasks of a load; as many publishes may be confirmed after a block.
const PUBLISHING_LANES: u64 = 16;

fn traffic(settings: &Settings, binding: Binding, url: String, admin_url: String) -> Load {
    Load {
        binding,
        url,
        admin_url,
        rate: settings.rate,
        messages: settings.rate * settings.load.as_secs(),
    }
}

fn lead_messages(settings: &Settings) -> u64 {
    settings.rate * settings.lead.as_secs().max(1)
}

/// Waits until the publishers are blocked, for up to `limit`; when they were.
async fn until(progress: &Arc<Progress>, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if progress.blocked() {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn ctl(node: &OwnNode, args: &[&str]) -> anyhow::Result<()> {
    // rabbitmqctl takes seconds; the runtime's other workers go on meanwhile.
    tokio::task::block_in_place(|| node.try_ctl(args))
        .map(drop)
        .map_err(anyhow::Error::msg)
}

/// Waits until 127.0.0.1:`port` accepts connections; when it did.
async fn accepting(port: u16) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(Instant::now());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "nothing accepted connections on port {port} within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `url` pointed at `proxy` instead of its broker.
fn through(url: &str, proxy: SocketAddr) -> anyhow::Result<String> {
    let mut parsed = url::Url::parse(url)?;
    parsed
        .set_port(Some(proxy.port()))
        .map_err(|()| anyhow::anyhow!("the broker URL takes no port"))?;
    parsed.set_host(Some(&proxy.ip().to_string()))?;
    Ok(parsed.to_string())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
