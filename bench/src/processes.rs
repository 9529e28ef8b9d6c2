//! room-service as real processes (the `failover` and `presence`
//! scenarios): the binary beside the bench's own, as the memory scenario
//! takes it (`cargo xtask bench` builds it in release; a smoke run uses the
//! dev build the tests made), several instances over one fresh database, one
//! fake wallet and one Redis key prefix. A process can be killed with
//! SIGKILL and its CPU time read from `/proc/<pid>/stat`. Each instance's
//! output goes to `<out_dir>/logs/<node id>.log`.

use crate::{
    fixtures::{self, BenchEnv},
    memory_scenarios::binary,
    room_load::Target,
    scale_out_scenarios::delete_keys,
};
use hyapp_api::room::room_service_client::RoomServiceClient;
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The room-service binary the process scenarios run, if built.
pub fn room_service_binary() -> Option<PathBuf> {
    binary("room-service")
}

/// Whether `binary`'s configuration has `key` (a dotted name such as
/// `redis.liveness_ttl`): its `--dump-config` prints the key's last segment
/// under its section.
pub fn config_has_key(binary: &Path, key: &str) -> bool {
    let Some((section, name)) = key.rsplit_once('.') else {
        return false;
    };
    let dumped = Command::new(binary)
        .arg("--dump-config")
        .current_dir(binary.parent().unwrap_or(Path::new(".")))
        .output();
    let Ok(output) = dumped else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let section = section.rsplit('.').next().unwrap_or(section);
    text.contains(section) && text.contains(name)
}

/// One room-service process, killed by its own pid on drop.
#[derive(Debug)]
pub struct RoomProcess {
    child: Child,
    /// Client, node id and advertised address.
    pub target: Target,
}

impl RoomProcess {
    /// Starts `binary` with `env` (`ROOM__…` keys) on a free gRPC port and
    /// connects to it.
    async fn spawn(
        binary: &Path,
        node_id: &str,
        env: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let address = format!("http://127.0.0.1:{port}");
        std::fs::create_dir_all(log_dir)?;
        let log = std::fs::File::create(log_dir.join(format!("{node_id}.log")))?;
        let child = Command::new(binary)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .env("ROOM__NODE_ID", node_id)
            .env("ROOM__GRPC_LISTEN", format!("127.0.0.1:{port}"))
            .env("ROOM__HTTP_LISTEN", "127.0.0.1:0")
            .current_dir(binary.parent().unwrap_or(Path::new(".")))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let mut process = Self {
            child,
            target: Target {
                // Replaced once connected; a lazy channel needs no server.
                client: RoomServiceClient::new(
                    tonic::transport::Endpoint::from_shared(address.clone())?.connect_lazy(),
                ),
                node_id: node_id.to_owned(),
                address: address.clone(),
            },
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        process.target.client = loop {
            match RoomServiceClient::connect(address.clone()).await {
                Ok(client) => break client,
                Err(error) => {
                    if let Some(status) = process.child.try_wait()? {
                        anyhow::bail!(
                            "room-service {node_id} exited at start-up ({status}); see {}",
                            log_dir.join(format!("{node_id}.log")).display()
                        );
                    }
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "room-service {node_id} not up: {error}"
                    );
                    // Start-up: the process's listener is not bound yet.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        Ok(process)
    }

    /// Kills the process with SIGKILL, as `kill -9` does, and reaps it.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }

    /// CPU time (user + system, every thread) the process used so far.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        cpu_time_of(&format!("/proc/{}/stat", self.child.id()))
    }
}

impl Drop for RoomProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of the bench process itself (load generator, fake wallet).
pub fn own_cpu_time() -> anyhow::Result<Duration> {
    cpu_time_of("/proc/self/stat")
}

/// utime + stime of a `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`) file.
pub(crate) fn cpu_time_of(path: &str) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name, which may hold spaces: state is field
    // 3, utime 14 and stime 15 (proc(5)).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(index)
            .ok_or_else(|| anyhow::anyhow!("short {path}"))?
            .parse()?)
    };
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_secs_f64(total as f64 / clock_ticks()))
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// room-service processes over one fresh database, one fake wallet and one
/// Redis key prefix.
#[derive(Debug)]
pub struct ProcessCluster {
    /// The instances, in start order; a killed one stays (reaped).
    pub nodes: Vec<RoomProcess>,
    _wallet: fake_wallet::FakeWalletHandle,
    db: String,
    key_prefix: String,
}

impl ProcessCluster {
    /// Starts `count` instances of `binary`, each with the common settings
    /// and `extra` (`ROOM__…` keys).
    pub async fn start(
        env: &BenchEnv,
        binary: &Path,
        count: usize,
        extra: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let (pool, db) = fixtures::fresh_database(env).await?;
        pool.close().await;
        let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;
        // As in the in-process cluster: no key of another run can be seen.
        let key_prefix = db.clone();
        let mut common: Vec<(String, String)> = vec![
            ("ROOM__MYSQL__URL".into(), format!("{}/{db}", env.mysql)),
            ("ROOM__MYSQL__MAX_CONNECTIONS".into(), "32".into()),
            ("ROOM__REDIS__URL".into(), env.redis.clone()),
            ("ROOM__REDIS__KEY_PREFIX".into(), key_prefix.clone()),
            ("ROOM__WALLET__ENDPOINT".into(), wallet.endpoint()),
            ("ROOM__TENCENT_IM__ENABLED".into(), "false".into()),
            ("ROOM__OUTBOX_WORKER__ENABLED".into(), "false".into()),
        ];
        common.extend(
            extra
                .iter()
                .map(|(key, value)| (key.to_string(), value.clone())),
        );
        let log_dir = env.out_dir.join("logs");
        let mut nodes = Vec::with_capacity(count);
        for index in 0..count {
            let node_id = format!("{db}-{index}");
            nodes.push(RoomProcess::spawn(binary, &node_id, &common, &log_dir).await?);
        }
        Ok(Self {
            nodes,
            _wallet: wallet,
            db,
            key_prefix,
        })
    }

    /// Clients of every instance, the killed ones included.
    pub fn targets(&self) -> Vec<Target> {
        self.nodes.iter().map(|node| node.target.clone()).collect()
    }

    /// CPU time of all instances together.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        self.nodes.iter().map(RoomProcess::cpu_time).sum()
    }

    /// Kills every instance, deletes the prefix's Redis keys and drops the
    /// database.
    pub async fn stop(self, env: &BenchEnv) -> anyhow::Result<()> {
        drop(self.nodes);
        delete_keys(env, &self.key_prefix).await?;
        fixtures::drop_database(env, &self.db).await
    }
}
