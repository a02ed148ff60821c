//! A TCP proxy in front of a broker, to fail one client's network without touching anyone
//! else's: cut every connection and refuse new ones, stop passing on what clients send (so
//! their writes back up), or slow every chunk down. Runs on the caller's tokio runtime.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};

/// A TCP proxy to `upstream`; dropping it stops accepting, and cut connections stay cut.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polyq_testkit::proxy::TcpProxy;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let upstream = server.local_addr().unwrap();
/// tokio::spawn(async move {
///     let (mut socket, _) = server.accept().await.unwrap();
///     socket.write_all(b"hello").await.unwrap();
/// });
/// let proxy = TcpProxy::start(upstream).await;
/// let mut client = tokio::net::TcpStream::connect(proxy.address()).await.unwrap();
/// let mut greeting = [0u8; 5];
/// client.read_exact(&mut greeting).await.unwrap();
/// assert_eq!(&greeting, b"hello");
/// # }
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    address: SocketAddr,
    up: Arc<AtomicBool>,
    delay_micros: Arc<AtomicU64>,
    cut: broadcast::Sender<()>,
    refused: watch::Receiver<u64>,
    to_upstream: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy to `upstream` on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When it cannot listen.
    pub async fn start(upstream: SocketAddr) -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("an address"), upstream).await
    }

    /// Starts a proxy to `upstream` listening on `listen` (a port of one's own range).
    ///
    /// # Panics
    /// When it cannot listen there.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(listen)
            .await
            .unwrap_or_else(|error| panic!("the proxy cannot listen on {listen}: {error}"));
        let address = listener.local_addr().expect("local address");
        let up = Arc::new(AtomicBool::new(true));
        let delay_micros = Arc::new(AtomicU64::new(0));
        let (cut, _) = broadcast::channel(4);
        let (refused_tx, refused) = watch::channel(0u64);
        let (to_upstream, flowing) = watch::channel(true);
        let (accept_up, accept_cut, accept_delay) = (up.clone(), cut.clone(), delay_micros.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::Acquire) {
                    drop(inbound);
                    refused_tx.send_modify(|n| *n += 1);
                    continue;
                }
                let mut cut = accept_cut.subscribe();
                let flowing = flowing.clone();
                let delay = accept_delay.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (from_client, to_client) = inbound.into_split();
                    let (from_upstream, to_server) = outbound.into_split();
                    let (_, always) = watch::channel(true);
                    // Cut first: a stall lifted after a cut must not let the cut connection's
                    // buffered bytes through.
                    tokio::select! {
                        biased;
                        _ = cut.recv() => {}
                        _ = forward(from_client, to_server, flowing, delay.clone()) => {}
                        _ = forward(from_upstream, to_client, always, delay) => {}
                    }
                });
            }
        });
        Self {
            address,
            up,
            delay_micros,
            cut,
            refused,
            to_upstream,
            accepting,
        }
    }

    /// Where the proxy listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops passing on what clients send (the upstream's side still flows) until
    /// [`TcpProxy::resume`]; bytes already sent wait in the sockets' buffers.
    pub fn stall(&self) {
        self.to_upstream.send_replace(false);
    }

    /// Lets what clients send flow again after [`TcpProxy::stall`].
    pub fn resume(&self) {
        self.to_upstream.send_replace(true);
    }

    /// Cuts every proxied connection and refuses new ones until [`TcpProxy::restore`].
    pub fn cut(&self) {
        self.up.store(false, Ordering::Release);
        let _ = self.cut.send(());
    }

    /// Accepts connections again after [`TcpProxy::cut`].
    pub fn restore(&self) {
        self.up.store(true, Ordering::Release);
    }

    /// Holds every chunk, in both directions, for `delay` before passing it on: a slow,
    /// high-latency network. `Duration::ZERO` is full speed again.
    pub fn slow_down(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay_micros.store(micros, Ordering::Release);
    }

    /// How many connections were refused since the proxy started.
    pub fn refusals(&self) -> u64 {
        *self.refused.borrow()
    }

    /// Waits until a client has been refused `n` more times: proof that it knows its
    /// connection is down and keeps trying.
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub async fn await_refusals(&mut self, n: u64, limit: Duration) {
        let target = *self.refused.borrow_and_update() + n;
        tokio::time::timeout(limit, self.refused.wait_for(|count| *count >= target))
            .await
            .expect("the client retried in time")
            .expect("proxy alive");
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        let _ = self.cut.send(());
    }
}

/// Copies `from` to `to` while `flowing` says so, each chunk held for the current delay.
/// Reading stops as soon as `flowing` says not to, so that nothing sent during a stall gets
/// through.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut flowing: watch::Receiver<bool>,
    delay_micros: Arc<AtomicU64>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if flowing.wait_for(|flows| *flows).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // Reading is cancel-safe: nothing read is lost by looking at the flag again.
            _ = flowing.changed() => continue,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let delay = delay_micros.load(Ordering::Acquire);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_micros(delay)).await;
                }
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
