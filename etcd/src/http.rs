//! The little HTTP/1.1 the etcd gateway needs: `POST` a JSON body, read a JSON answer, or read
//! a never-ending chunked stream of JSON messages (`/v3/watch`).
//!
//! Written on `std::net::TcpStream` rather than taken from an HTTP crate because the watch must
//! be stoppable from another thread at once: [`Conn::post`] shows the caller its socket as soon
//! as it is connected, and shutting that down wakes a read blocked on a quiet watch. ureq 3 keeps its sockets
//! behind a transport API it marks as not following semver; ureq 2's per-read timeout leaves
//! its chunk decoder in the middle of a chunk.
//!
//! Every read is bounded, and hitting a bound says which: the response head ([`MAX_HEAD`],
//! checked while a line is still arriving, not after it ends), a chunk-size line
//! ([`MAX_CHUNK_LINE`]), a unary body ([`MAX_BODY`]). Time is bounded by a deadline on the
//! [`Stream`]: a whole unary request must finish within the request timeout, however slowly the
//! bytes trickle in (a per-read timeout would be renewed by every byte). The parser
//! ([`Response`]) works on any `BufRead`, so the fuzz target feeds it bytes without a socket.

use crate::Error;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Largest response head accepted (status line and headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line accepted (the size in hex and any chunk extensions).
pub(crate) const MAX_CHUNK_LINE: usize = 1024;
/// Largest unary response body accepted (a range page is the largest).
pub(crate) const MAX_BODY: u64 = 256 * 1024 * 1024;

/// One `http://HOST:PORT` or `https://HOST:PORT` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    pub(crate) host: String,
    port: u16,
    pub(crate) https: bool,
}

impl Endpoint {
    /// Parses `http://HOST:PORT` or `https://HOST:PORT` (an optional trailing `/`; IPv6 as
    /// `[::1]:2379`).
    pub(crate) fn parse(url: &str) -> Result<Endpoint, Error> {
        let bad = |why: &str| Error::Config(format!("endpoint {url:?}: {why}"));
        let (rest, https) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(bad("expected http://HOST:PORT or https://HOST:PORT")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return Err(bad(
                "expected http(s)://HOST:PORT with no path, query or user",
            ));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => match v6.split_once("]:") {
                Some((host, port)) => (host, port),
                None => return Err(bad("expected [IPV6]:PORT")),
            },
            None => match authority.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && !host.contains(':') => (host, port),
                _ => return Err(bad("missing :PORT (etcd's client port is usually 2379)")),
            },
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("the port must be a number in 1..=65535"))?;
        Ok(Endpoint {
            url: url.to_string(),
            host: host.to_string(),
            port,
            https,
        })
    }

    /// The host as the `Host` header writes it (an IPv6 address in brackets).
    fn host_for_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

/// A connected socket, plain or TLS, with an optional deadline on reads.
pub(crate) struct Stream {
    tcp: TcpStream,
    tls: Option<Box<rustls::ClientConnection>>,
    deadline: Option<Deadline>,
}

/// Reads fail with `TimedOut` and `why` once `at` has passed.
#[derive(Debug, Clone)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    pub(crate) why: String,
}

impl Stream {
    /// Sets (or clears) the deadline for the reads to come.
    pub(crate) fn set_deadline(&mut self, deadline: Option<Deadline>) {
        self.deadline = deadline;
    }

    /// The deadline for the reads to come.
    pub(crate) fn deadline(&self) -> Option<&Deadline> {
        self.deadline.as_ref()
    }

    /// The socket as rustls sees it: every one of its reads is armed with what is left of the
    /// deadline (one `rustls::Stream` read, or the handshake inside the first write, is many
    /// socket reads, and a timeout set once before it would be renewed by each of them).
    fn timed(&mut self) -> (Option<&mut rustls::ClientConnection>, Timed<'_>) {
        let timed = Timed {
            tcp: &mut self.tcp,
            deadline: self.deadline.as_ref(),
        };
        (self.tls.as_deref_mut(), timed)
    }

    /// A timeout from the socket becomes the deadline's own message.
    fn expired(&self, e: io::Error) -> io::Error {
        match (&self.deadline, e.kind()) {
            (Some(d), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                io::Error::new(io::ErrorKind::TimedOut, d.why.clone())
            }
            _ => e,
        }
    }
}

/// The TCP socket under a deadline: before each read, its timeout is set to what is left of
/// the deadline (an error once it has passed); writes fail too once it has passed.
struct Timed<'a> {
    tcp: &'a mut TcpStream,
    deadline: Option<&'a Deadline>,
}

impl Timed<'_> {
    /// What is left of the deadline (`None`: no deadline); `TimedOut` once it has passed.
    fn left(&self) -> io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                deadline.why.clone(),
            ));
        }
        Ok(Some(left))
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.tcp.set_read_timeout(left)?;
        self.tcp.read(out)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.left()?;
        self.tcp.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

impl Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let result = match self.timed() {
            (Some(tls), mut tcp) => rustls::Stream::new(tls, &mut tcp).read(out),
            (None, mut tcp) => tcp.read(out),
        };
        result.map_err(|e| self.expired(e))
    }
}

impl Write for Stream {
    // Under the deadline too: the TLS handshake reads the server's answers inside the first
    // write.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let result = match self.timed() {
            (Some(tls), mut tcp) => rustls::Stream::new(tls, &mut tcp).write(data),
            (None, mut tcp) => tcp.write(data),
        };
        result.map_err(|e| self.expired(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = match self.timed() {
            (Some(tls), mut tcp) => rustls::Stream::new(tls, &mut tcp).flush(),
            (None, mut tcp) => tcp.flush(),
        };
        result.map_err(|e| self.expired(e))
    }
}

/// How a request is sent: timeouts, TLS, extra headers.
pub(crate) struct Request<'a> {
    pub(crate) path: &'a str,
    pub(crate) body: &'a [u8],
    pub(crate) connect_timeout: Duration,
    /// Deadline for the response head (and, for unary calls, the whole body).
    pub(crate) deadline: Option<Deadline>,
    pub(crate) tls: Option<&'a std::sync::Arc<rustls::ClientConfig>>,
    /// `Authorization` header value (an etcd auth token).
    pub(crate) token: Option<&'a str>,
    /// Sends `Grpc-Metadata-hasleader: true`: etcd then refuses the call when the member has
    /// no leader, and cancels a stream when it loses it (v3rpc/interceptor.go; the gateway
    /// passes `Grpc-Metadata-*` headers on as gRPC metadata).
    pub(crate) require_leader: bool,
}

/// An open connection with a request sent and the response head read.
pub(crate) type Conn = Response<BufReader<Stream>>;

impl Conn {
    /// Connects, sends `POST path` with `body`, and reads the status and headers within the
    /// request's deadline. `on_connect` sees the socket before anything is sent, so another
    /// thread can shut it while this one waits. A status other than 200 is an
    /// [`Error::Http`] with the start of the body.
    pub(crate) fn post(
        endpoint: &Endpoint,
        request: &Request<'_>,
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Conn, Error> {
        let io_err = |source| Error::Io {
            endpoint: endpoint.url.clone(),
            source,
        };
        let tcp = connect(endpoint, request.connect_timeout).map_err(io_err)?;
        on_connect(&tcp);
        tcp.set_write_timeout(Some(request.connect_timeout.max(Duration::from_secs(1))))
            .map_err(io_err)?;
        tcp.set_nodelay(true).map_err(io_err)?;
        let tls = match request.tls {
            Some(config) => Some(Box::new(crate::tls::connect(config, &endpoint.host)?)),
            None => None,
        };
        let mut stream = Stream {
            tcp,
            tls,
            deadline: request.deadline.clone(),
        };
        let mut auth = match request.token {
            Some(token) => format!("Authorization: {token}\r\n"),
            None => String::new(),
        };
        if request.require_leader {
            auth.push_str("Grpc-Metadata-hasleader: true\r\n");
        }
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n{auth}\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            request.path,
            endpoint.host_for_header(),
            endpoint.port,
            request.body.len()
        );
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(request.body);
        stream
            .write_all(&bytes)
            .and_then(|()| stream.flush())
            .map_err(|e| crate::tls::explain(e, endpoint))?;
        let mut conn =
            Response::new(BufReader::new(stream)).map_err(|e| crate::tls::explain(e, endpoint))?;
        if conn.status != 200 {
            let mut text = String::new();
            drop(conn.by_ref().take(4096).read_to_string(&mut text));
            return Err(Error::Http {
                endpoint: endpoint.url.clone(),
                status: conn.status,
                body: text.trim().to_string(),
            });
        }
        Ok(conn)
    }

    /// The socket's stream, to move its deadline.
    pub(crate) fn stream(&mut self) -> &mut Stream {
        self.reader.get_mut()
    }
}

/// A response whose head has been read: its status, and its body through `Read` (chunked,
/// sized, or to the end of the connection), with every line bounded.
pub(crate) struct Response<R> {
    reader: R,
    pub(crate) status: u16,
    /// Bytes left in the current chunk; `None` before a chunk-size line.
    chunk_left: Option<u64>,
    /// `Some(n)`: a `Content-Length` body with `n` bytes left; `None`: chunked.
    length_left: Option<u64>,
    finished: bool,
}

impl<R: BufRead> Response<R> {
    /// Reads the status line and the headers.
    pub(crate) fn new(mut reader: R) -> io::Result<Response<R>> {
        let (status, chunked, length) = read_head(&mut reader)?;
        Ok(Response {
            reader,
            status,
            chunk_left: None,
            // Neither chunked nor sized: the body runs to the end of the connection.
            length_left: if chunked {
                None
            } else {
                Some(length.unwrap_or(u64::MAX))
            },
            finished: false,
        })
    }

    /// Reads the whole body (unary calls), refusing one larger than [`MAX_BODY`].
    pub(crate) fn read_all(mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        self.by_ref().take(MAX_BODY + 1).read_to_end(&mut body)?;
        if body.len() as u64 > MAX_BODY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the answer is larger than {} MiB, the limit for one answer",
                    MAX_BODY >> 20
                ),
            ));
        }
        Ok(body)
    }

    /// Reads one chunk-size line; 0 ends the body.
    fn next_chunk(&mut self) -> io::Result<u64> {
        let mut line = Vec::new();
        let too_long = || {
            bad(&format!(
                "chunk-size line longer than {MAX_CHUNK_LINE} bytes"
            ))
        };
        if read_line(&mut self.reader, &mut line, MAX_CHUNK_LINE, &too_long)? == 0 {
            return Err(eof("the connection closed before the last chunk"));
        }
        let line = String::from_utf8_lossy(&line);
        let size = line.trim_end().split(';').next().unwrap_or("").trim();
        u64::from_str_radix(size, 16)
            .ok()
            .filter(|_| !size.starts_with('+'))
            .ok_or_else(|| bad(&format!("bad chunk-size line {:?}", cut(&line))))
    }
}

impl<R: BufRead> Read for Response<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.finished || out.is_empty() {
            return Ok(0);
        }
        if let Some(left) = self.length_left {
            if left == 0 {
                self.finished = true;
                return Ok(0);
            }
            let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = self.reader.read(&mut out[..want])?;
            if n == 0 {
                if left != u64::MAX {
                    return Err(eof("the connection closed inside the body"));
                }
                self.finished = true;
            }
            if left != u64::MAX {
                self.length_left = Some(left - n as u64);
                self.finished = left == n as u64;
            }
            return Ok(n);
        }
        let left = match self.chunk_left {
            Some(left) if left > 0 => left,
            _ => {
                if self.chunk_left == Some(0) {
                    // The CRLF that closes the chunk just read.
                    let mut crlf = [0u8; 2];
                    self.reader.read_exact(&mut crlf)?;
                    if crlf != *b"\r\n" {
                        return Err(bad("a chunk is not followed by CRLF"));
                    }
                }
                let size = self.next_chunk()?;
                if size == 0 {
                    self.finished = true;
                    return Ok(0);
                }
                size
            }
        };
        let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.reader.read(&mut out[..want])?;
        if n == 0 {
            return Err(eof("the connection closed inside a chunk"));
        }
        self.chunk_left = Some(left - n as u64);
        Ok(n)
    }
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// At most 60 characters of `text`, for an error message.
fn cut(text: &str) -> String {
    text.chars().take(60).collect()
}

/// Reads one line (up to and including `\n`) into `line`, refusing (with `too_long()`) to hold
/// more than `limit` bytes: the check runs as bytes arrive, so a line that never ends costs at
/// most `limit`. Returns the bytes read (0 at the end of the stream).
pub(crate) fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit: usize,
    too_long: &dyn Fn() -> io::Error,
) -> io::Result<usize> {
    let start = line.len();
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(line.len() - start);
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if line.len() - start + take > limit {
            return Err(too_long());
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return Ok(line.len() - start);
        }
    }
}

fn connect(endpoint: &Endpoint, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name resolved to nothing");
    for addr in (endpoint.host.as_str(), endpoint.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Reads the status line and headers, at most [`MAX_HEAD`] bytes in all: (status, chunked,
/// content length).
fn read_head(reader: &mut impl BufRead) -> io::Result<(u16, bool, Option<u64>)> {
    let mut line = Vec::new();
    let mut total = 0;
    let mut status = None;
    let (mut chunked, mut length) = (false, None);
    loop {
        line.clear();
        let too_long = || bad(&format!("response head longer than {MAX_HEAD} bytes"));
        let n = read_line(reader, &mut line, MAX_HEAD - total, &too_long)?;
        total += n;
        if n == 0 {
            return Err(eof("the connection closed before the response head ended"));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        match status {
            None => {
                let mut parts = text.split(' ');
                let version = parts.next().unwrap_or("");
                let code = parts.next().and_then(|c| c.parse().ok());
                match code {
                    Some(code) if version.starts_with("HTTP/1.") => status = Some(code),
                    _ => return Err(bad("not an HTTP/1.x response")),
                }
            }
            Some(_) if text.is_empty() => break,
            Some(_) => {
                let Some((name, value)) = text.split_once(':') else {
                    return Err(bad(&format!("malformed response header {:?}", cut(text))));
                };
                let value = value.trim();
                if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                } else if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse().map_err(|_| bad("bad Content-Length"))?);
                }
            }
        }
    }
    Ok((status.unwrap_or(0), chunked, length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn endpoints_parse_or_say_why_not() {
        let e = Endpoint::parse("http://127.0.0.1:2379").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 2379));
        let e = Endpoint::parse("http://[::1]:2379/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 2379));
        let e = Endpoint::parse("http://etcd.local:12379/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("etcd.local", 12379));
        for (url, why) in [
            ("h:2379", "expected http://HOST:PORT or https://HOST:PORT"),
            ("http://h", "missing :PORT"),
            ("http://h:0", "1..=65535"),
            ("http://h:99999", "1..=65535"),
            ("http://h:2379/v3", "no path"),
            ("http://", "no path"),
            ("http://[::1]", "[IPV6]:PORT"),
        ] {
            let e = Endpoint::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    /// Serves one canned response on a loopback port.
    fn serve(response: &'static [u8]) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            s.write_all(response).unwrap();
        });
        Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap()
    }

    fn post(e: &Endpoint) -> Result<Conn, Error> {
        let request = Request {
            path: "/x",
            body: b"{}",
            connect_timeout: Duration::from_secs(2),
            deadline: None,
            tls: None,
            token: None,
            require_leader: false,
        };
        Conn::post(e, &request, &|_| {})
    }

    #[test]
    fn chunked_sized_and_unsized_bodies_decode() {
        let e = serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
        assert_eq!(post(&e).unwrap().read_all().unwrap(), b"abcde");
        let e = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nwxyzIGNORED");
        assert_eq!(post(&e).unwrap().read_all().unwrap(), b"wxyz");
        let e = serve(b"HTTP/1.0 200 OK\r\n\r\nto the end");
        assert_eq!(post(&e).unwrap().read_all().unwrap(), b"to the end");
    }

    #[test]
    fn errors_name_the_status_or_the_truncation() {
        let e = serve(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
        let err = post(&e).err().unwrap().to_string();
        assert!(err.contains("404") && err.contains("not found"), "{err}");
        let e = serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
        let err = post(&e).unwrap().read_all().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let e = serve(b"SSH-2.0-OpenSSH\r\n\r\n");
        let err = post(&e).err().unwrap().to_string();
        assert!(err.contains("not an HTTP/1.x response"), "{err}");
    }

    /// A response read from bytes, without a socket.
    fn response(
        bytes: &'static [u8],
    ) -> io::Result<Response<io::BufReader<io::Cursor<&'static [u8]>>>> {
        Response::new(io::BufReader::new(io::Cursor::new(bytes)))
    }

    #[test]
    fn every_line_and_body_has_a_limit_that_names_itself() {
        // A body that never ends stops at 256 MiB and says so (it read "not JSON: EOF").
        let head = io::Cursor::new(&b"HTTP/1.1 200 OK\r\n\r\n"[..]);
        let endless = io::BufReader::new(head.chain(io::repeat(b' ')));
        let e = Response::new(endless).unwrap().read_all().unwrap_err();
        assert!(
            e.to_string()
                .contains("larger than 256 MiB, the limit for one answer"),
            "{e}"
        );
        let long = Box::leak(
            format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD)).into_boxed_str(),
        );
        let e = response(long.as_bytes()).err().unwrap();
        assert!(
            e.to_string()
                .contains("response head longer than 65536 bytes"),
            "{e}"
        );
        let long = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{}\r\n",
                "1".repeat(2000)
            )
            .into_boxed_str(),
        );
        let e = response(long.as_bytes()).unwrap().read_all().unwrap_err();
        assert!(
            e.to_string()
                .contains("chunk-size line longer than 1024 bytes"),
            "{e}"
        );
        for (bytes, why) in [
            (
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n"[..],
                "not followed by CRLF",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n",
                "bad chunk-size line",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
                "bad chunk-size line",
            ),
        ] {
            let e = response(bytes).unwrap().read_all().unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
    }
}
