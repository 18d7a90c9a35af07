//! What `Balance` adds per request: the same hyper client sending GETs to one loopback server
//! (keep-alive, a 2-byte body), directly and through `BalanceLayer` over a one-node balancer,
//! in interleaved rounds (each going first every other round) so both see the same machine. Prints the median round of each, the
//! difference in microseconds and the ratio (BENCHMARKS.md, "Integrations").
//!
//!     cargo run --release -p liblb-tower --example overhead

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use liblb_core::{Algorithm, Balancer};
use liblb_tower::{BalanceLayer, HttpPolicy};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::{Layer, Service, ServiceExt};

const ROUNDS: usize = 15;
const PER_ROUND: usize = 2000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let address = serve().await?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let balancer = Arc::new(Balancer::new(
        Algorithm::RoundRobin,
        [address.as_str()],
        Default::default(),
    )?);
    let mut balanced = BalanceLayer::new(balancer, HttpPolicy::new()).layer(client.clone());
    let mut direct = client;
    let uri = format!("http://{address}/");
    let (mut plain, mut through) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        // Which one goes first alternates, so neither always runs on a warmer machine.
        let mut times = [Duration::ZERO; 2];
        for turn in 0..2 {
            let which = (round + turn) % 2;
            let start = Instant::now();
            for _ in 0..PER_ROUND {
                let response = if which == 0 {
                    let request = http::Request::get(&uri).body(Full::default())?;
                    direct.ready().await?.call(request).await?
                } else {
                    let request =
                        http::Request::get("http://svc.internal/").body(Full::default())?;
                    balanced.ready().await?.call(request).await?
                };
                response.into_body().collect().await?;
            }
            times[which] = start.elapsed();
        }
        if round > 0 {
            // Round 0 warms the connection pool and the allocator.
            plain.push(times[0]);
            through.push(times[1]);
        }
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() / PER_ROUND as f64 * 1e6
    };
    let (plain, through) = (median(&mut plain), median(&mut through));
    println!("hyper client, direct:            {plain:.2} µs/request");
    println!("hyper client, through Balance:   {through:.2} µs/request");
    println!(
        "overhead: {:+.2} µs/request, ratio {:.3}",
        through - plain,
        through / plain
    );
    Ok(())
}

/// A keep-alive server on 127.0.0.1 answering "ok".
async fn serve() -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler =
                hyper::service::service_fn(|_: http::Request<hyper::body::Incoming>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new();
                let _ = connection
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    Ok(address)
}
