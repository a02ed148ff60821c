//! Where a transport's server is, as its URL names it: one node (`redis://`, `rediss://`), the
//! master a set of Sentinels names (`redis+sentinel://`), or a Redis Cluster
//! (`redis+cluster://`); and how each is connected.

use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind,
    TlsCertificates, Value,
};
use tokio::sync::Mutex;

use super::{RedisOptions, ReplicaAcks};

/// The port of a Sentinel named without one.
const SENTINEL_PORT: u16 = 26379;
/// The port of a cluster node named without one.
const NODE_PORT: u16 = 6379;

/// The URLs a Redis transport takes, for errors that name them.
pub(super) const ACCEPTED: &str = "a Redis transport takes redis://host[:port][/db], \
     rediss://…, redis+sentinel://host:port[,host:port…]/service[/db] or \
     redis+cluster://host:port[,host:port…], each optionally with \
     ?wait_replicas=N&wait_timeout_ms=T";

/// The server of one transport.
pub(super) enum Endpoint {
    /// One node.
    Node(Client),
    /// The master the Sentinels name for a service, asked again after every failure, and how
    /// long asking them may take.
    Sentinel(Mutex<SentinelClient>, Duration),
    /// A cluster.
    Cluster(Box<ClusterClients>),
}

/// The clients of a cluster; the waiting one has the longer response timeout of a blocking
/// wait.
pub(super) struct ClusterClients {
    commands: ClusterClient,
    waiting: ClusterClient,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Endpoint::Node(_) => "Node",
            Endpoint::Sentinel(..) => "Sentinel",
            Endpoint::Cluster(_) => "Cluster",
        })
    }
}

impl Endpoint {
    /// The server `url` names and the replica acknowledgements its query asks for. The error
    /// says what is wrong with the URL.
    pub(super) fn parse(
        url: &str,
        options: &RedisOptions,
    ) -> Result<(Self, Option<ReplicaAcks>), String> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (acks, rest) = replica_acks(query)?;
        let (scheme, rest_of_url) = base.split_once("://").unwrap_or(("", base));
        let scheme = scheme.to_ascii_lowercase();
        let tls = &options.tls;
        let endpoint = match scheme.as_str() {
            "redis" | "rediss" => {
                tls.check_scheme(scheme == "rediss")
                    .map_err(str::to_owned)?;
                let url = if rest.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", rest.join("&"))
                };
                Endpoint::Node(node_client(&url, options).map_err(|error| error.to_string())?)
            }
            "redis+sentinel" | "redis+cluster" => {
                if tls.is_set() {
                    return Err(format!(
                        "{scheme}:// does not take TLS settings yet; reach the nodes over \
                         redis:// or rediss://"
                    ));
                }
                if let Some(unknown) = rest.first() {
                    return Err(format!(
                        "unknown query parameter {unknown:?}; {scheme}:// takes wait_replicas \
                         and wait_timeout_ms"
                    ));
                }
                if scheme == "redis+sentinel" {
                    Endpoint::Sentinel(
                        Mutex::new(sentinel_client(rest_of_url)?),
                        options.connection_timeout,
                    )
                } else {
                    cluster_clients(rest_of_url, options)?
                }
            }
            _ => return Err(ACCEPTED.to_owned()),
        };
        Ok((endpoint, acks))
    }

    /// Whether keys are spread over the slots of a cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Endpoint::Cluster(_))
    }

    /// A connection of its own, for blocking waits.
    pub(super) async fn open(&self, config: &AsyncConnectionConfig) -> RedisResult<Link> {
        match self {
            Endpoint::Node(client) => client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(Link::Node),
            Endpoint::Sentinel(sentinels, timeout) => {
                master(sentinels, *timeout, config).await.map(Link::Node)
            }
            Endpoint::Cluster(clients) => clients
                .waiting
                .get_async_connection()
                .await
                .map(Link::Cluster),
        }
    }

    /// The connection for commands and scripts: lazy and reconnecting on one node, opened now
    /// on a cluster (which follows its own topology), the master's on first use under Sentinel.
    pub(super) async fn commands(&self, options: &RedisOptions) -> RedisResult<Commands> {
        Ok(match self {
            Endpoint::Node(client) => Commands::Managed(ConnectionManager::new_lazy_with_config(
                client.clone(),
                // The reconnect backoff is capped at 1 s, as the AMQP client's is, so a worker
                // resumes within about a second of the server coming back, not after the
                // crate's uncapped doubling.
                ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(options.connection_timeout))
                    .set_response_timeout(Some(options.response_timeout))
                    .set_max_delay(Duration::from_secs(1)),
            )?),
            Endpoint::Sentinel(..) => Commands::Sentinel(Mutex::new(None)),
            Endpoint::Cluster(clients) => {
                Commands::Cluster(clients.commands.get_async_connection().await?)
            }
        })
    }
}

/// The command connection of a transport.
pub(super) enum Commands {
    Managed(ConnectionManager),
    Cluster(ClusterConnection),
    /// The current master's, opened on first use and after a failure, when the Sentinels may
    /// name another master.
    Sentinel(Mutex<Option<MultiplexedConnection>>),
}

impl Commands {
    /// The connection to send a command on.
    pub(super) async fn link(
        &self,
        endpoint: &Endpoint,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<Link> {
        match (self, endpoint) {
            (Commands::Managed(manager), _) => Ok(Link::Managed(manager.clone())),
            (Commands::Cluster(cluster), _) => Ok(Link::Cluster(cluster.clone())),
            (Commands::Sentinel(current), Endpoint::Sentinel(sentinels, timeout)) => {
                let mut current = current.lock().await;
                if let Some(connection) = current.as_ref() {
                    return Ok(Link::Node(connection.clone()));
                }
                let connection = master(sentinels, *timeout, config).await?;
                *current = Some(connection.clone());
                Ok(Link::Node(connection))
            }
            (Commands::Sentinel(_), _) => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a Sentinel connection without Sentinels",
            ))),
        }
    }

    /// Takes note of a failed command: under Sentinel, a connection that broke, or a node that
    /// is no longer the master, is dropped so that the next command asks the Sentinels again.
    pub(super) async fn failed(&self, error: &RedisError) {
        if let Commands::Sentinel(current) = self
            && needs_another_node(error)
        {
            *current.lock().await = None;
        }
    }
}

/// Whether `error` says the node is gone or no longer takes writes, so that asking which node
/// is the master again may help.
pub(super) fn needs_another_node(error: &RedisError) -> bool {
    error.is_unrecoverable_error()
        || error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

/// A connection of any kind, as the client's commands and scripts take it.
#[derive(Clone)]
pub(super) enum Link {
    Managed(ConnectionManager),
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Managed(connection) => connection.req_packed_command(cmd),
            Link::Node(connection) => connection.req_packed_command(cmd),
            Link::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Managed(connection) => connection.req_packed_commands(pipeline, offset, count),
            Link::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            Link::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Managed(connection) => connection.get_db(),
            Link::Node(connection) => connection.get_db(),
            Link::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The masters of a cluster, as `host:port`, from `CLUSTER NODES` (those not failing).
pub(super) async fn masters(cluster: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::FromRedisValue::from_redis_value(
        cluster
            .route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?,
    )?;
    Ok(parse_masters(&nodes))
}

/// The masters not failing in the text of `CLUSTER NODES`, as `host:port`.
fn parse_masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (address, flags) = (fields.nth(1)?, fields.next()?);
            let is_master = flags.split(',').any(|flag| flag == "master");
            let failing = flags.split(',').any(|flag| flag.starts_with("fail"));
            if !is_master || failing {
                return None;
            }
            let (host, port) = address.split('@').next()?.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// Runs `command` on the cluster node at `host:port`.
pub(super) async fn on_node<T: redis::FromRedisValue>(
    cluster: &mut ClusterConnection,
    command: Cmd,
    (host, port): &(String, u16),
) -> RedisResult<T> {
    let answer = cluster
        .route_command(
            command,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            }),
        )
        .await?;
    Ok(T::from_redis_value(answer)?)
}

/// A connection to the master the Sentinels name now (the client checks that the node says
/// it is the master); asking them takes at most `timeout`.
async fn master(
    sentinels: &Mutex<SentinelClient>,
    timeout: Duration,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    let ask = async { sentinels.lock().await.async_get_client().await };
    let client = tokio::time::timeout(timeout, ask).await.map_err(|_| {
        RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no Sentinel named the master in time",
        ))
    })??;
    client
        .get_multiplexed_async_connection_with_config(config)
        .await
}

/// A client of one node, with the TLS settings of `options`.
fn node_client(url: &str, options: &RedisOptions) -> RedisResult<Client> {
    let tls = &options.tls;
    if !tls.is_set() {
        return Client::open(url);
    }
    Client::build_with_tls(
        url,
        TlsCertificates {
            client_tls: tls
                .client_certificate_pem()
                .map(|(certificate, key)| ClientTlsConfig {
                    client_cert: certificate.as_bytes().to_vec(),
                    client_key: key.as_bytes().to_vec(),
                }),
            root_cert: tls
                .root_certificates_pem()
                .map(|pem| pem.as_bytes().to_vec()),
        },
    )
}

/// `wait_replicas` and `wait_timeout_ms` out of a URL's query, and the other parameters.
fn replica_acks(query: &str) -> Result<(Option<ReplicaAcks>, Vec<&str>), String> {
    let (mut replicas, mut timeout, mut rest) = (None, None, Vec::new());
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| format!("{name} must be a whole number, not {value:?}"))
        };
        match name {
            "wait_replicas" => replicas = Some(number()?),
            "wait_timeout_ms" => timeout = Some(number()?),
            _ => rest.push(pair),
        }
    }
    let acks = match (replicas, timeout) {
        (None, None) | (Some(0), _) => None,
        (Some(replicas), Some(timeout)) => Some(ReplicaAcks::new(
            replicas,
            Duration::from_millis(u64::from(timeout)),
        )),
        _ => {
            return Err(
                "wait_replicas and wait_timeout_ms go together: how many replicas must \
                        acknowledge each push and settle, and for how long to wait for them"
                    .to_owned(),
            );
        }
    };
    Ok((acks, rest))
}

/// The nodes of `user:password@host:port,host:port` (credentials optional), each as the
/// connection the Redis client makes of `redis://user:password@host:port/db`, so credentials
/// are read (and percent-decoded) as in any Redis URL.
fn nodes(authority: &str, db: &str, default_port: u16) -> Result<Vec<ConnectionInfo>, String> {
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), authority),
    };
    if hosts.is_empty() {
        return Err("no host:port given".to_owned());
    }
    hosts
        .split(',')
        .map(|host| {
            let host = if host.contains(':') {
                host.to_owned()
            } else {
                format!("{host}:{default_port}")
            };
            format!("redis://{credentials}{host}/{db}")
                .into_connection_info()
                .map_err(|error| format!("{host:?} is not a host:port ({error})"))
        })
        .collect()
}

/// `[user:password@]host:port[,host:port…]/service[/db]`; the credentials and the database are
/// those of the master and its replicas, the Sentinels are reached without credentials.
fn sentinel_client(rest: &str) -> Result<SentinelClient, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (service, db) = path.split_once('/').unwrap_or((path, "0"));
    if service.is_empty() {
        return Err(
            "name the service the Sentinels watch: redis+sentinel://host:port/service".to_owned(),
        );
    }
    let db = if db.is_empty() { "0" } else { db };
    let sentinels = nodes(authority, db, SENTINEL_PORT)?;
    let settings = sentinels[0].redis_settings().clone();
    let mut builder = SentinelClientBuilder::new(
        sentinels.iter().map(|node| node.addr().clone()),
        service,
        SentinelServerType::Master,
    )
    .map_err(|error| error.to_string())?
    .set_client_to_redis_db(settings.db());
    if let Some(username) = settings.username() {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = settings.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    builder.build().map_err(|error| error.to_string())
}

/// `[user:password@]host:port[,host:port…]`: the nodes to learn the cluster's topology from.
fn cluster_clients(rest: &str, options: &RedisOptions) -> Result<Endpoint, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path.is_empty() && path != "0" {
        return Err("a Redis Cluster has only database 0".to_owned());
    }
    let nodes = nodes(authority, "0", NODE_PORT)?;
    let client = |response_timeout: Duration| {
        // A few quick retries carry a command over a failover; the caller retries beyond.
        ClusterClientBuilder::new(nodes.clone())
            .connection_timeout(options.connection_timeout)
            .response_timeout(response_timeout)
            .retries(4)
            .min_retry_wait(100)
            .max_retry_wait(1_000)
            .build()
            .map_err(|error| error.to_string())
    };
    Ok(Endpoint::Cluster(Box::new(ClusterClients {
        commands: client(options.response_timeout)?,
        waiting: client(options.response_timeout + options.block_slice)?,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match Endpoint::parse(url, &RedisOptions::new()) {
            Err(reason) => reason,
            Ok((endpoint, _)) => panic!("{url} was taken as {endpoint:?}"),
        }
    }

    #[test]
    fn each_scheme_names_its_endpoint() {
        let options = RedisOptions::new();
        let (node, acks) = Endpoint::parse("redis://127.0.0.1:6379/0", &options).unwrap();
        assert!(matches!(node, Endpoint::Node(_)) && acks.is_none());
        let (sentinel, _) = Endpoint::parse(
            "redis+sentinel://:secret@127.0.0.1:7110,127.0.0.1:7111/polyq/2",
            &options,
        )
        .unwrap();
        assert!(matches!(sentinel, Endpoint::Sentinel(..)));
        let (cluster, acks) = Endpoint::parse(
            "redis+cluster://127.0.0.1:7120,127.0.0.1:7121?wait_replicas=1&wait_timeout_ms=250",
            &options,
        )
        .unwrap();
        assert!(cluster.is_cluster());
        assert_eq!(acks, Some(ReplicaAcks::new(1, Duration::from_millis(250))));
    }

    #[test]
    fn the_query_keeps_what_the_client_reads() {
        let (_, acks) = Endpoint::parse(
            "redis://127.0.0.1/0?protocol=resp3&wait_replicas=2&wait_timeout_ms=1000",
            &RedisOptions::new(),
        )
        .unwrap();
        assert_eq!(acks, Some(ReplicaAcks::new(2, Duration::from_secs(1))));
        let (_, none) =
            Endpoint::parse("redis://127.0.0.1/0?wait_replicas=0", &RedisOptions::new()).unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn the_masters_are_those_not_failing() {
        let nodes = "\
a 127.0.0.1:7121@17121 master - 0 1 2 connected 5461-10922
b 127.0.0.1:7123@17123 slave a 0 1 2 connected
c 127.0.0.1:7120@17120 myself,master - 0 1 1 connected 0-5460
d 127.0.0.1:7122@17122 master,fail - 0 1 3 disconnected
e 127.0.0.1:7125@17125 master - 0 1 7 connected 10923-16383
";
        assert_eq!(
            parse_masters(nodes),
            [
                ("127.0.0.1".to_owned(), 7121),
                ("127.0.0.1".to_owned(), 7120),
                ("127.0.0.1".to_owned(), 7125)
            ]
        );
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        assert!(refused("redis://h/0?wait_replicas=1").contains("go together"));
        assert!(refused("redis://h/0?wait_replicas=x&wait_timeout_ms=1").contains("whole number"));
        assert!(refused("redis+sentinel://127.0.0.1:7110").contains("service"));
        assert!(refused("redis+sentinel://127.0.0.1:7110/s?db=1").contains("unknown query"));
        assert!(refused("redis+cluster://127.0.0.1:7120/3").contains("database 0"));
        assert!(refused("redis+cluster:///").contains("no host"));
        assert!(refused("http://h").contains("redis+sentinel://"));
    }
}
