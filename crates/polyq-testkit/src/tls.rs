//! TLS in front of the real brokers: a throwaway certificate authority, a TLS-terminating proxy
//! to RabbitMQ (the shape of a TLS load balancer), and a Redis server of its own listening with
//! TLS only.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// A certificate authority made for one test, with a server certificate for `localhost` and
/// `127.0.0.1` and a client certificate, all in PEM.
pub struct TestPki {
    /// The authority's certificate: what a client must trust.
    pub ca_pem: String,
    /// The server's certificate, signed by the authority.
    pub server_cert_pem: String,
    /// The server's private key (PKCS#8).
    pub server_key_pem: String,
    /// A client certificate, signed by the authority.
    pub client_cert_pem: String,
    /// The client's private key (PKCS#8).
    pub client_key_pem: String,
}

impl TestPki {
    /// A new authority and its two certificates.
    ///
    /// # Panics
    /// When a key or certificate cannot be generated.
    pub fn new() -> Self {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "polyq test authority");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_pem = ca_params
            .self_signed(&ca_key)
            .expect("CA certificate")
            .pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |names: Vec<String>, purpose: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(names).expect("params");
            params.extended_key_usages = vec![purpose];
            params
                .distinguished_name
                .push(DnType::CommonName, "polyq test");
            let certificate = params.signed_by(&key, &issuer).expect("certificate");
            (certificate.pem(), key.serialize_pem())
        };
        let (server_cert_pem, server_key_pem) = leaf(
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert_pem, client_key_pem) = leaf(
            vec!["client".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        Self {
            ca_pem,
            server_cert_pem,
            server_key_pem,
            client_cert_pem,
            client_key_pem,
        }
    }

    /// Writes `ca.pem`, `server.pem`, `server.key` into `dir` (for servers that read files).
    ///
    /// # Panics
    /// When a file cannot be written.
    pub fn write_server_files(&self, dir: &Path) {
        for (name, text) in [
            ("ca.pem", &self.ca_pem),
            ("server.pem", &self.server_cert_pem),
            ("server.key", &self.server_key_pem),
        ] {
            std::fs::write(dir.join(name), text).expect("write a PEM file");
        }
    }

    fn server_config(&self, verify_clients: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = if verify_clients {
            let mut roots = RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
                roots.add(certificate.expect("CA PEM")).expect("CA root");
            }
            builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .expect("client verifier"),
            )
        } else {
            builder.with_no_client_auth()
        };
        let chain = CertificateDer::pem_slice_iter(self.server_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("server PEM");
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).expect("key PEM");
        Arc::new(
            builder
                .with_single_cert(chain, key)
                .expect("server certificate"),
        )
    }
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

/// A TLS-terminating proxy on 127.0.0.1 in front of a plain TCP server, on a thread of its own:
/// the client speaks TLS to the proxy, the proxy speaks plain TCP to the server. Stops when
/// dropped.
pub struct TlsProxy {
    addr: SocketAddr,
    sessions: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsProxy {
    /// Starts a proxy to `upstream` presenting `pki`'s server certificate; with
    /// `verify_clients`, a client must present a certificate `pki`'s authority signed.
    ///
    /// # Panics
    /// When the proxy cannot listen.
    pub fn start(upstream: SocketAddr, pki: &TestPki, verify_clients: bool) -> Self {
        let acceptor = TlsAcceptor::from(pki.server_config(verify_clients));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the TLS proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let sessions = Arc::new(AtomicUsize::new(0));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let counted = sessions.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("proxy listener");
                loop {
                    let client = tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => match accepted {
                            Ok((client, _)) => client,
                            Err(_) => continue,
                        },
                    };
                    let (acceptor, counted) = (acceptor.clone(), counted.clone());
                    tokio::spawn(async move {
                        // A client that fails the handshake (an untrusted certificate, none
                        // when one is required) is simply dropped, as a TLS server does.
                        let Ok(mut tls) = acceptor.accept(client).await else {
                            return;
                        };
                        counted.fetch_add(1, Ordering::SeqCst);
                        let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                    });
                }
            });
        });
        Self {
            addr,
            sessions,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many clients completed a TLS handshake with the proxy.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The address of the RabbitMQ the suite uses ([`crate::amqp_url`]).
///
/// # Panics
/// When RabbitMQ is not reachable, or its URL does not name an address.
pub fn rabbitmq_addr() -> SocketAddr {
    let url = url::Url::parse(&crate::amqp_url()).expect("the AMQP URL parses");
    (url.host_str().expect("a host"), url.port().unwrap_or(5672))
        .to_socket_addrs()
        .expect("RabbitMQ's address resolves")
        .next()
        .expect("RabbitMQ has an address")
}

/// The suite's RabbitMQ URL (credentials, virtual host) as `amqps://` to `proxy`.
///
/// # Panics
/// As [`rabbitmq_addr`].
pub fn amqps_url_through(proxy: &TlsProxy) -> String {
    let mut url = url::Url::parse(&crate::amqp_url()).expect("the AMQP URL parses");
    url.set_scheme("amqps").expect("amqp:// becomes amqps://");
    url.set_host(Some("127.0.0.1")).expect("a host");
    url.set_port(Some(proxy.addr().port())).expect("a port");
    url.to_string()
}

/// A `redis-server` of the test's own, listening with TLS only on a port of 127.0.0.1, keeping
/// nothing on disk. Killed when dropped.
pub struct RedisTlsServer {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl RedisTlsServer {
    /// Starts one with `pki`'s server certificate; with `verify_clients`, it requires a client
    /// certificate `pki`'s authority signed (`tls-auth-clients yes`).
    ///
    /// # Panics
    /// When `redis-server` cannot be started, with what it logged.
    pub fn start(pki: &TestPki, verify_clients: bool) -> Self {
        let dir = std::env::temp_dir().join(crate::unique_name("polyq-redis-tls"));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        pki.write_server_files(&dir);
        // The port is found free, then taken by the server: another process could take it
        // in between, so a server that does not come up is tried again on a new port.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new("redis-server")
                .args([
                    "--port",
                    "0",
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(dir.join("server.pem"))
                .arg("--tls-key-file")
                .arg(dir.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.pem"))
                .args([
                    "--tls-auth-clients",
                    if verify_clients { "yes" } else { "no" },
                ])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server runs (it is installed with the Redis this suite uses)");
            // The server logs to stdout, and says when it accepts connections; it exits,
            // closing stdout, when it cannot listen.
            let mut log = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
            let mut said = Vec::new();
            let ready = log.by_ref().map_while(Result::ok).any(|line| {
                let ready = line.contains("Ready to accept connections");
                said.push(line);
                ready
            });
            if ready {
                // Keep reading, so that the server never blocks on a full pipe.
                std::thread::spawn(move || log.for_each(drop));
                return Self { port, child, dir };
            }
            let _ = child.kill();
            let _ = child.wait();
            last_error = said.join("\n");
        }
        panic!("a TLS redis-server did not start: {last_error}");
    }

    /// The server's `rediss://` URL.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisTlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
