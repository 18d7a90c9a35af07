//! The little HTTP/1.1 the etcd gateway needs: `POST` a JSON body, read a JSON answer, or read
//! a never-ending chunked stream of JSON messages (`/v3/watch`).
//!
//! Written on `std::net::TcpStream` rather than taken from an HTTP crate because the watch must
//! be stoppable from another thread at once: [`Conn::post`] shows the caller its socket as soon
//! as it is connected, and shutting that down wakes a read blocked on a quiet watch. ureq 3 keeps its sockets
//! behind a transport API it marks as not following semver; ureq 2's per-read timeout leaves
//! its chunk decoder in the middle of a chunk. Plain HTTP only: the gateway on loopback or a
//! private network (TLS would bring rustls; see the crate docs).

use crate::Error;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest response head accepted (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Largest unary response body accepted (a range over a big prefix is the largest).
const MAX_BODY: u64 = 256 * 1024 * 1024;

/// One `http://HOST:PORT` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    host: String,
    port: u16,
}

impl Endpoint {
    /// Parses `http://HOST:PORT` (an optional trailing `/`; IPv6 as `[::1]:2379`).
    pub(crate) fn parse(url: &str) -> Result<Endpoint, Error> {
        let bad = |why: &str| Error::Config(format!("endpoint {url:?}: {why}"));
        let rest = match url.strip_prefix("http://") {
            Some(rest) => rest,
            None if url.starts_with("https://") => {
                return Err(bad(
                    "https is not supported; use plain http to the gateway (loopback, a private \
                     network, or a local TLS-terminating proxy)",
                ));
            }
            None => return Err(bad("expected http://HOST:PORT")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return Err(bad("expected http://HOST:PORT with no path, query or user"));
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
        })
    }
}

/// An open connection with a request sent and the response head read.
pub(crate) struct Conn {
    reader: BufReader<TcpStream>,
    /// Bytes left in the current chunk; `None` before a chunk-size line.
    chunk_left: Option<u64>,
    /// `Some(n)`: a `Content-Length` body with `n` bytes left; `None`: chunked.
    length_left: Option<u64>,
    finished: bool,
}

impl Conn {
    /// Connects, sends `POST path` with `body`, and reads the status and headers. `read_timeout`
    /// bounds each socket read (`None`: block until data or shutdown). `on_connect` sees the
    /// socket before anything is sent, so another thread can shut it while this one waits.
    pub(crate) fn post(
        endpoint: &Endpoint,
        path: &str,
        body: &[u8],
        (connect_timeout, read_timeout): (Duration, Option<Duration>),
        on_connect: &dyn Fn(&TcpStream),
    ) -> Result<Conn, Error> {
        let io_err = |source| Error::Io {
            endpoint: endpoint.url.clone(),
            source,
        };
        let stream = connect(endpoint, connect_timeout).map_err(io_err)?;
        on_connect(&stream);
        stream.set_read_timeout(read_timeout).map_err(io_err)?;
        stream
            .set_write_timeout(Some(connect_timeout.max(Duration::from_secs(1))))
            .map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            endpoint.host,
            endpoint.port,
            body.len()
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        (&stream).write_all(&request).map_err(io_err)?;
        let mut reader = BufReader::new(stream);
        let (status, chunked, length) = read_head(&mut reader).map_err(io_err)?;
        let mut conn = Conn {
            reader,
            chunk_left: None,
            length_left: if chunked { None } else { length },
            finished: false,
        };
        if !chunked && length.is_none() {
            // Neither chunked nor sized: the body runs to the end of the connection.
            conn.length_left = Some(u64::MAX);
        }
        if status != 200 {
            let mut text = String::new();
            drop(conn.by_ref().take(4096).read_to_string(&mut text));
            return Err(Error::Http {
                endpoint: endpoint.url.clone(),
                status,
                body: text.trim().to_string(),
            });
        }
        Ok(conn)
    }

    /// Reads the whole body (unary calls).
    pub(crate) fn read_all(mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        self.by_ref().take(MAX_BODY).read_to_end(&mut body)?;
        Ok(body)
    }

    /// Reads one chunk-size line; 0 ends the body.
    fn next_chunk(&mut self) -> io::Result<u64> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(eof("the connection closed before the last chunk"));
        }
        let size = line.trim_end().split(';').next().unwrap_or("").trim();
        u64::from_str_radix(size, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size line"))
    }
}

impl Read for Conn {
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

/// Reads the status line and headers: (status, chunked, content length).
fn read_head(reader: &mut BufReader<TcpStream>) -> io::Result<(u16, bool, Option<u64>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut line = String::new();
    let mut total = 0;
    let mut status = None;
    let (mut chunked, mut length) = (false, None);
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        total += n;
        if n == 0 {
            return Err(eof("the connection closed before the response head ended"));
        }
        if total > MAX_HEAD {
            return Err(bad("response head too large"));
        }
        let text = line.trim_end();
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
                    return Err(bad("malformed response header"));
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
            ("https://h:2379", "https is not supported"),
            ("h:2379", "expected http://HOST:PORT"),
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
        Conn::post(e, "/x", b"{}", (Duration::from_secs(2), None), &|_| {})
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
}
