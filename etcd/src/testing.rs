//! Test helpers (feature `testing`): a real etcd server on loopback (plain, TLS or with
//! authentication), a TCP proxy that can cut every connection through it, and [`FakeEtcd`], a
//! scripted gateway serving hostile answers.
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
    /// Certificates when the client port speaks TLS.
    certs: Option<Certs>,
    /// Whether the server asks for client certificates (`--client-cert-auth`).
    client_cert_auth: bool,
    /// root's password once authentication is enabled.
    root_password: Option<String>,
}

/// Certificates made with the `openssl` command for a TLS test, in PEM files: a CA, a server
/// certificate for `IP:127.0.0.1` and a client certificate signed by it, and a second,
/// unrelated CA (the wrong one).
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client certificate the server trusts.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
}

impl Certs {
    /// Makes the certificates in `dir` with the `openssl` command (EC P-256, valid 2 days).
    pub fn generate(dir: &Path) -> Certs {
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let (key, pem, subject) = (
                format!("{ca}.key"),
                format!("{ca}.pem"),
                format!("/CN=liblb test {ca}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &pem,
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(&args);
        }
        // The server certificate is also a client one: etcd 3.4's gateway dials its own gRPC
        // port with it, and --client-cert-auth checks that connection too.
        for (name, usage) in [
            ("server", "serverAuth,clientAuth"),
            ("client", "clientAuth"),
        ] {
            let ext = format!("{name}.ext");
            std::fs::write(
                dir.join(&ext),
                format!(
                    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n\
                     keyUsage=critical,digitalSignature\n"
                ),
            )
            .expect("an extensions file");
            let (key, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            // No common name on the client certificate: with --client-cert-auth and auth both
            // on, etcd's gateway refuses a client certificate that has one (embed/serve.go,
            // "CommonName of client sending a request against gateway will be ignored").
            let subject = match name {
                "client" => "/O=liblb test client".to_string(),
                _ => format!("/CN=liblb test {name}"),
            };
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(&args);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Certs {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_ca: dir.join("other-ca.pem"),
        }
    }

    /// TLS settings a client the server trusts uses: this CA and the client certificate.
    pub fn client_tls(&self) -> crate::TlsConfig {
        crate::TlsConfig::with_ca(&self.ca).client_cert(&self.client_cert, &self.client_key)
    }
}

/// A TLS server on a loopback port with `certs`' server certificate, for one connection at a
/// time: it completes the handshake, reads the request, then sends `response` encrypted as
/// one TLS record whose bytes go out one at a time, `every` apart, and holds the connection.
/// A client must not wait for that record past its request deadline, however each byte renews
/// a read. Returns the `https://127.0.0.1:PORT` URL; the thread ends with the test process.
pub fn tls_trickle(certs: &Certs, response: Vec<u8>, every: Duration) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(&certs.server_cert)
        .expect("the server certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("the server certificate");
    let key = PrivateKeyDer::from_pem_file(&certs.server_key).expect("the server key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the server certificate and key");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("https://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let (Ok(mut tcp), config) = (tcp, config.clone()) else {
                continue;
            };
            let response = response.clone();
            std::thread::spawn(move || {
                let Ok(mut tls) = rustls::ServerConnection::new(config) else {
                    return;
                };
                // The handshake, then the request's first bytes.
                let mut request = [0u8; 4096];
                loop {
                    if tls.complete_io(&mut tcp).is_err() {
                        return;
                    }
                    if !tls.is_handshaking()
                        && matches!(tls.reader().read(&mut request), Ok(n) if n > 0)
                    {
                        break;
                    }
                }
                drop(tls.writer().write_all(&response));
                let mut record = Vec::new();
                while tls.wants_write() {
                    if tls.write_tls(&mut record).is_err() {
                        return;
                    }
                }
                for b in record {
                    std::thread::sleep(every);
                    if tcp.write_all(&[b]).is_err() {
                        return;
                    }
                }
                let mut buf = [0u8; 64];
                while matches!(tcp.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    url
}

impl EtcdServer {
    /// Starts a server, or returns `None` (after a loud message) when no etcd binary exists and
    /// `LB_REQUIRE_ETCD` is not `1`.
    pub fn start() -> Option<EtcdServer> {
        EtcdServer::start_with(false, false)
    }

    /// Starts a server whose client port speaks TLS (`https://`) with certificates made for
    /// it ([`EtcdServer::certs`]); with `client_cert_auth`, it also requires a client
    /// certificate signed by its CA, as Kubernetes' etcd does.
    pub fn start_tls(client_cert_auth: bool) -> Option<EtcdServer> {
        EtcdServer::start_with(true, client_cert_auth)
    }

    fn start_with(tls: bool, client_cert_auth: bool) -> Option<EtcdServer> {
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
        let certs = tls.then(|| Certs::generate(&dir));
        let mut server = EtcdServer {
            bin,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
            certs,
            client_cert_auth,
            root_password: None,
        };
        // The ports were free when picked, but another process (a parallel test, another
        // suite on the machine) may take one before etcd binds it: then pick new ones.
        for attempt in 1.. {
            match server.try_spawn() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("address already in use") => {
                    server.kill();
                    server.client_port = free_port();
                    server.peer_port = free_port();
                }
                Err(log) => panic!("etcd exited; its log:\n{log}"),
            }
        }
        Some(server)
    }

    /// `http://127.0.0.1:PORT` (or `https://` with TLS), the client URL.
    pub fn url(&self) -> String {
        let scheme = if self.certs.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The certificates of a TLS server.
    pub fn certs(&self) -> Option<&Certs> {
        self.certs.as_ref()
    }

    /// Turns on etcd's authentication: adds user `root` with `password` and the root role,
    /// then enables auth (what `etcdctl user add root` and `etcdctl auth enable` do, through
    /// the gateway). [`EtcdServer::client`] logs in as root from then on.
    pub fn enable_auth(&mut self, password: &str) {
        let c = self.client();
        let call = |path: &str, body: serde_json::Value| {
            c.request(path, &body)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        };
        call(
            "/v3/auth/user/add",
            serde_json::json!({"name": "root", "password": password}),
        );
        call("/v3/auth/role/add", serde_json::json!({"name": "root"}));
        call(
            "/v3/auth/user/grant",
            serde_json::json!({"user": "root", "role": "root"}),
        );
        call("/v3/auth/enable", serde_json::json!({}));
        self.root_password = Some(password.to_string());
    }

    /// Kills the server, empties its data directory and starts it again on the same ports:
    /// an etcd whose data was lost, at revision 1 again.
    pub fn wipe(&mut self) {
        self.kill();
        drop(std::fs::remove_dir_all(self.dir.join("data")));
        self.root_password = None;
        self.spawn();
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// A client for this server (with its CA and client certificate, and as root once auth is
    /// enabled).
    pub fn client(&self) -> Client {
        let mut client = Client::new(&[self.url()]).expect("a valid URL");
        if let Some(certs) = &self.certs {
            client = client
                .with_tls(&certs.client_tls())
                .expect("the test certificates");
        }
        if let Some(password) = &self.root_password {
            client = client.with_auth("root", password);
        }
        client
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
        if let Err(log) = self.try_spawn() {
            panic!("etcd exited; its log:\n{log}");
        }
    }

    /// Starts etcd and waits until it answers; `Err(its log)` if it exits first.
    fn try_spawn(&mut self) -> Result<(), String> {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("a log file");
        let mut tls = Vec::new();
        if let Some(certs) = &self.certs {
            tls.push(format!("--cert-file={}", certs.server_cert.display()));
            tls.push(format!("--key-file={}", certs.server_key.display()));
            tls.push(format!("--trusted-ca-file={}", certs.ca.display()));
            if self.client_cert_auth {
                tls.push("--client-cert-auth".into());
            }
        }
        let child = Command::new(&self.bin)
            .arg("--name=default")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .args(&tls)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        self.child = Some(child);
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = client.range_prefix(b"readiness") {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                return Err(format!("(exit {status})\n{log}"));
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not answer within 30 s ({e}); its log:\n{}",
                std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
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

/// What a [`FakeEtcd`] answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `200 OK` with this JSON body (a unary answer).
    Json(serde_json::Value),
    /// These bytes as they are, then the connection is closed.
    Raw(Vec<u8>),
    /// A chunked `200 OK` watch stream: each message one chunk with a newline, then the
    /// connection stays open until the client closes it (or the server is dropped).
    Watch(Vec<serde_json::Value>),
    /// `start`, then `repeat` over and over until the client gives up, or [`ENDLESS_CAP`]
    /// bytes were written (so a client without limits still ends, with its memory measured).
    Endless {
        /// Bytes sent once first.
        start: Vec<u8>,
        /// Bytes sent again and again.
        repeat: Vec<u8>,
    },
    /// `start` at once, then `bytes` one at a time, `every` apart; then the connection stays
    /// open.
    Trickle {
        /// Bytes sent at once first.
        start: Vec<u8>,
        /// Bytes sent one at a time.
        bytes: Vec<u8>,
        /// The pause between two of them.
        every: std::time::Duration,
    },
}

/// How much an [`Reply::Endless`] answer writes at most before closing.
pub const ENDLESS_CAP: u64 = 64 * 1024 * 1024;

/// A request a [`FakeEtcd`] received.
#[derive(Debug, Clone)]
pub struct Received {
    /// When it arrived.
    pub at: Instant,
    /// `/v3/kv/range`, `/v3/watch`, ...
    pub path: String,
    /// The `Authorization` header, if any.
    pub token: Option<String>,
    /// The `Grpc-Metadata-hasleader` header, if any.
    pub has_leader: Option<String>,
    /// The JSON body (`null` when it is not JSON).
    pub body: serde_json::Value,
}

type Handler = dyn Fn(&Received, usize) -> Reply + Send + Sync;

/// A scripted etcd gateway on a loopback port: each request (one per connection, as the
/// client sends them) is answered by the handler given to [`FakeEtcd::start`], with the
/// request and how many requests to the same path came before it. It serves the hostile
/// answers a real etcd never sends: lines that never end, trickles, malformed ranges, a
/// compaction on every watch, a wiped or different cluster. It counts the bytes it managed
/// to write, so a test can bound what a client accepted before it gave up.
pub struct FakeEtcd {
    port: u16,
    state: Arc<FakeState>,
    accept: Option<std::thread::JoinHandle<()>>,
}

struct FakeState {
    closing: AtomicBool,
    received: Mutex<Vec<Received>>,
    /// Bytes written to clients, over all connections (Relaxed: a statistic read after the fact).
    written: AtomicU64,
    open: Mutex<Vec<TcpStream>>,
    handler: Box<Handler>,
}

impl FakeEtcd {
    /// Starts the server; `handler(request, n)` answers the `n`th request (from 0) to
    /// `request.path`.
    pub fn start(handler: impl Fn(&Received, usize) -> Reply + Send + Sync + 'static) -> FakeEtcd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(FakeState {
            closing: AtomicBool::new(false),
            received: Mutex::new(Vec::new()),
            written: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
            handler: Box::new(handler),
        });
        let shared = state.clone();
        let accept = std::thread::spawn(move || {
            for socket in listener.incoming() {
                if shared.closing.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(socket) = socket else { continue };
                if let Ok(clone) = socket.try_clone() {
                    lock(&shared.open).push(clone);
                }
                let state = shared.clone();
                std::thread::spawn(move || serve(&state, socket));
            }
        });
        FakeEtcd {
            port,
            state,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state.received).clone()
    }

    /// The requests to `path` received so far.
    pub fn count(&self, path: &str) -> usize {
        self.received().iter().filter(|r| r.path == path).count()
    }

    /// Bytes written to clients so far (accepted by the kernel: at most a few MiB of socket
    /// buffers more than the clients read).
    pub fn written(&self) -> u64 {
        self.state.written.load(Ordering::Relaxed)
    }
}

impl Drop for FakeEtcd {
    fn drop(&mut self) {
        self.state.closing.store(true, Ordering::SeqCst);
        for s in lock(&self.state.open).drain(..) {
            drop(s.shutdown(Shutdown::Both));
        }
        drop(TcpStream::connect(("127.0.0.1", self.port)));
        if let Some(accept) = self.accept.take() {
            drop(accept.join());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads one request and answers it as the handler says.
fn serve(state: &FakeState, mut socket: TcpStream) {
    let Some(request) = read_request(&mut socket) else {
        return;
    };
    let n = {
        let mut received = lock(&state.received);
        let n = received.iter().filter(|r| r.path == request.path).count();
        received.push(request.clone());
        n
    };
    let reply = (state.handler)(&request, n);
    let mut write = |bytes: &[u8]| -> bool {
        if state.closing.load(Ordering::SeqCst) || socket.write_all(bytes).is_err() {
            return false;
        }
        state
            .written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        true
    };
    match reply {
        Reply::Json(body) => {
            let body = body.to_string();
            write(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
        Reply::Raw(bytes) => {
            write(&bytes);
        }
        Reply::Watch(messages) => {
            let mut ok = write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            for m in messages {
                let text = format!("{m}\n");
                ok = ok && write(format!("{:x}\r\n{text}\r\n", text.len()).as_bytes());
            }
            if ok {
                hold(&mut socket);
            }
        }
        Reply::Endless { start, repeat } => {
            let mut sent = start.len() as u64;
            let mut ok = write(&start);
            while ok && sent < ENDLESS_CAP {
                ok = write(&repeat);
                sent += repeat.len() as u64;
            }
        }
        Reply::Trickle {
            start,
            bytes,
            every,
        } => {
            let mut ok = write(&start);
            for b in bytes {
                std::thread::sleep(every);
                ok = ok && write(&[b]);
                if !ok {
                    return;
                }
            }
            hold(&mut socket);
        }
    }
    // The server keeps a clone of every socket (to shut them on drop): close it explicitly.
    drop(socket.shutdown(Shutdown::Both));
}

/// Keeps the connection open until the client closes it or the server is dropped.
fn hold(socket: &mut TcpStream) {
    let mut buf = [0u8; 64];
    while matches!(socket.read(&mut buf), Ok(n) if n > 0) {}
}

fn read_request(socket: &mut TcpStream) -> Option<Received> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut buf).ok().filter(|n| *n > 0)?;
        data.extend_from_slice(&buf[..n]);
        if data.len() > 1 << 20 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")?.parse().ok()?;
    while data.len() < head_end + length.min(1 << 20) {
        let n = socket.read(&mut buf).ok().filter(|n| *n > 0)?;
        data.extend_from_slice(&buf[..n]);
    }
    let path = head.split(' ').nth(1)?.to_string();
    Some(Received {
        at: Instant::now(),
        path,
        token: header("authorization"),
        has_leader: header("grpc-metadata-hasleader"),
        body: serde_json::from_slice(&data[head_end..]).unwrap_or(serde_json::Value::Null),
    })
}

/// Gateway JSON for a [`FakeEtcd`]'s answers.
pub mod gateway {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;
    use serde_json::{Value, json};

    /// A response header at `revision` of cluster `cluster_id`.
    pub fn header(revision: i64, cluster_id: u64) -> Value {
        json!({"cluster_id": cluster_id.to_string(), "member_id": "1",
               "revision": revision.to_string(), "raft_term": "2"})
    }

    /// A range answer with `kvs` (key, value), each modified at `revision`.
    pub fn range(revision: i64, cluster_id: u64, kvs: &[(&str, &str)], more: bool) -> Value {
        let kvs: Vec<Value> = kvs
            .iter()
            .map(|(k, v)| {
                json!({"key": B64.encode(k), "value": B64.encode(v),
                       "mod_revision": revision.to_string()})
            })
            .collect();
        let mut answer =
            json!({"header": header(revision, cluster_id), "count": kvs.len().to_string()});
        if !kvs.is_empty() {
            answer["kvs"] = Value::Array(kvs);
        }
        if more {
            answer["more"] = json!(true);
        }
        answer
    }

    /// The first message of a watch: created, with the store's `revision`.
    pub fn created(revision: i64, cluster_id: u64) -> Value {
        json!({"result": {"header": header(revision, cluster_id), "created": true}})
    }

    /// A watch message with one put of `key` = `value` at `revision`.
    pub fn put(revision: i64, cluster_id: u64, key: &str, value: &str) -> Value {
        json!({"result": {"header": header(revision, cluster_id), "events": [
            {"kv": {"key": B64.encode(key), "value": B64.encode(value),
                    "mod_revision": revision.to_string()}}]}})
    }

    /// A watch cancelled because `compact_revision` was compacted.
    pub fn compacted(revision: i64, cluster_id: u64, compact_revision: i64) -> Value {
        json!({"result": {"header": header(revision, cluster_id), "canceled": true,
                          "compact_revision": compact_revision.to_string()}})
    }
}

/// Every event a watcher reported, in order: `Watcher::start(config, balancer,
/// recorder.callback())`.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<crate::Event>>>);

impl Recorder {
    /// The callback to give the watcher.
    pub fn callback(&self) -> impl Fn(&crate::Event) + Send + 'static {
        let events = self.0.clone();
        move |e: &crate::Event| lock(&events).push(e.clone())
    }

    /// The events so far.
    pub fn events(&self) -> Vec<crate::Event> {
        lock(&self.0).clone()
    }

    /// The revisions applied so far.
    pub fn applied(&self) -> Vec<i64> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                crate::Event::Applied { revision, .. } => Some(*revision),
                _ => None,
            })
            .collect()
    }

    /// How many events match.
    pub fn count(&self, matches: impl Fn(&crate::Event) -> bool) -> usize {
        self.events().iter().filter(|e| matches(e)).count()
    }

    /// The errors of the Disconnected events so far.
    pub fn errors(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                crate::Event::Disconnected { error } => Some(error),
                _ => None,
            })
            .collect()
    }
}
