//! A `redis-server` of the campaign's own, persisting every write before it answers
//! (`appendonly yes`, `appendfsync always`), so that a restart, even after SIGKILL, keeps
//! whatever it acknowledged. The machine's shared Redis is never touched.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// How long a start may take before it counts as failed.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A `redis-server` child process on 127.0.0.1 with its data in a directory of its own;
/// stopped and the directory removed on drop.
#[derive(Debug)]
pub struct OwnRedis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one on `port` and waits until it answers.
    ///
    /// # Errors
    /// When `redis-server` cannot run or does not answer in time.
    pub async fn start(port: u16) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("polyq-chaos-redis-{port}"));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            port,
            dir,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it with SIGKILL (no shutdown, no last save) and waits for it to be gone.
    ///
    /// # Errors
    /// When the process cannot be killed.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts it again on its data directory and returns when it answers: the moment the
    /// broker is back.
    ///
    /// # Errors
    /// As [`OwnRedis::start`].
    pub async fn restart(&mut self) -> anyhow::Result<Instant> {
        self.kill()?;
        self.spawn().await
    }

    async fn spawn(&mut self) -> anyhow::Result<Instant> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--save", "", "--daemonize", "no"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server (is Redis installed?)")?;
        self.child = Some(child);
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + START_LIMIT;
        loop {
            // PING answers only once the append-only file is loaded.
            let answered = async {
                let mut connection = client.get_multiplexed_async_connection().await?;
                redis::cmd("PING")
                    .query_async::<String>(&mut connection)
                    .await
            }
            .await;
            if answered.is_ok() {
                return Ok(Instant::now());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "redis-server on port {} did not answer within {START_LIMIT:?}; its log is in {}",
                    self.port,
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Err(error) = self.kill() {
            eprintln!("could not stop redis-server on port {}: {error}", self.port);
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
