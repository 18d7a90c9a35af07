//! Test helpers (feature `testing`): a real etcd server on loopback, and a TCP proxy that can
//! cut every connection through it.
//!
//! [`EtcdServer::start`] runs the `etcd` binary named by `ETCD_BIN` (or found on `PATH`; see
//! `scripts/etcd-install.sh`) with a temporary data directory and free loopback ports, and
//! waits until it answers. [`EtcdServer::restart`] stops it and starts it again on the same
//! ports and data directory, as an operator's restart would. Dropping it kills the server and
//! removes the directory. Without an etcd binary, `start` prints a loud SKIPPED message and
//! returns `None`, unless `LB_REQUIRE_ETCD=1`, when it panics: CI sets that.

use crate::Client;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The etcd binary: `ETCD_BIN`, else `etcd` on `PATH`.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ETCD_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

/// A free loopback port (bound and released; etcd binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A real etcd server on loopback, killed on drop.
pub struct EtcdServer {
    bin: PathBuf,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts a server, or returns `None` (after a loud message) when no etcd binary exists and
    /// `LB_REQUIRE_ETCD` is not `1`.
    pub fn start() -> Option<EtcdServer> {
        let Some(bin) = etcd_binary() else {
            if std::env::var("LB_REQUIRE_ETCD").as_deref() == Ok("1") {
                panic!(
                    "LB_REQUIRE_ETCD=1 but no etcd binary: set ETCD_BIN or put etcd on PATH \
                     (scripts/etcd-install.sh installs Debian's etcd-server)"
                );
            }
            // Written to the stderr handle, not with eprintln!, which the test harness
            // captures (and hides) for passing tests.
            drop(writeln!(
                std::io::stderr(),
                "\n!!!!! SKIPPED: no etcd binary (set ETCD_BIN or run scripts/etcd-install.sh); \
                 the etcd tests did not run !!!!!\n"
            ));
            return None;
        };
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "liblb-etcd-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        drop(std::fs::remove_dir_all(&dir));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut server = EtcdServer {
            bin,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
        };
        server.spawn();
        Some(server)
    }

    /// `http://127.0.0.1:PORT`, the client URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client::new(&[self.url()]).expect("a valid URL")
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server (SIGKILL: what a crash or a host restart looks like to clients) and
    /// waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.kill());
            drop(child.wait());
        }
    }

    /// Starts the server again on the same ports and data directory, and waits until it
    /// answers. Kills it first if it is running.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("a log file");
        let child = Command::new(&self.bin)
            .arg("--name=default")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        self.child = Some(child);
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.range_prefix(b"readiness").is_err() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "etcd exited with {status}; its log:\n{}",
                    std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not answer within 30 s; its log:\n{}",
                std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        drop(std::fs::remove_dir_all(&self.dir));
    }
}

/// A TCP proxy on a loopback port in front of `target`; [`Proxy::cut`] shuts every connection
/// through it and refuses new ones until [`Proxy::resume`]. Lets a test disconnect a watcher
/// while etcd stays up (to compact behind its back, say).
pub struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
    accept: Option<std::thread::JoinHandle<()>>,
}

struct ProxyState {
    /// While set, new connections are closed at once (SeqCst: plain flags, rarely touched).
    cut: AtomicBool,
    closing: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(ProxyState {
            cut: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        let accept = std::thread::spawn(move || {
            for downstream in listener.incoming() {
                if shared.closing.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(downstream) = downstream else { continue };
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    continue;
                };
                // Checked under the lock `cut` takes: a connection is either refused here or
                // registered before `cut` drains the list.
                let mut open = shared.open.lock().unwrap_or_else(|e| e.into_inner());
                if shared.cut.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection close
                }
                for s in [&downstream, &upstream] {
                    if let Ok(clone) = s.try_clone() {
                        open.push(clone);
                    }
                }
                drop(open);
                pipe(&downstream, &upstream);
                pipe(&upstream, &downstream);
            }
        });
        Proxy {
            port,
            state,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`, the proxy's URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Shuts every open connection and refuses new ones.
    pub fn cut(&self) {
        let mut open = self.state.open.lock().unwrap_or_else(|e| e.into_inner());
        self.state.cut.store(true, Ordering::SeqCst);
        for s in open.drain(..) {
            drop(s.shutdown(Shutdown::Both));
        }
    }

    /// Lets connections through again.
    pub fn resume(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        drop(to.shutdown(Shutdown::Both));
        drop(from.shutdown(Shutdown::Both));
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.state.closing.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees `closing`.
        drop(TcpStream::connect(("127.0.0.1", self.port)));
        if let Some(accept) = self.accept.take() {
            drop(accept.join());
        }
    }
}

/// Polls `condition` every few milliseconds until it holds; panics with `what` after
/// `timeout`. For waiting on another process or thread, never as a timing assertion.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
