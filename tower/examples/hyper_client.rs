//! The quickstart of docs/tower.md, runnable: three HTTP servers on loopback (one answering
//! 500), a hyper client behind `BalanceLayer`, ten GETs. Every request succeeds: each 500 is
//! counted against its node and retried on another one.
//!
//!     cargo run -p liblb-tower --example hyper_client

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use liblb_core::{Algorithm, Balancer};
use liblb_tower::{BalanceLayer, HttpPolicy};
use std::sync::Arc;
use tower::{Layer, Service, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut nodes = Vec::new();
    for status in [200, 200, 500] {
        nodes.push(serve(status).await?);
    }

    // The quickstart: a balancer over "host:port" ids, a client, the layer between them.
    let balancer = Arc::new(Balancer::new(
        Algorithm::RoundRobin,
        nodes.iter().map(String::as_str),
        Default::default(),
    )?);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut service = BalanceLayer::new(balancer.clone(), HttpPolicy::new()).layer(client);
    for _ in 0..10 {
        let request = http::Request::get("http://api.internal/hello").body(Full::default())?;
        let response = service.ready().await?.call(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        println!("{status} {}", String::from_utf8_lossy(&body));
        assert!(status.is_success());
    }
    for node in balancer.stats() {
        println!(
            "{}: {} requests, {} failures",
            node.id, node.requests, node.failures
        );
    }
    Ok(())
}

/// A server on 127.0.0.1 (an OS-picked port) answering `status` and "served by <port> for
/// <Host>"; its "host:port".
async fn serve(status: u16) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let host = request.headers().get(http::header::HOST).cloned();
                    let host = host.as_ref().and_then(|h| h.to_str().ok()).unwrap_or("?");
                    let body = format!("served by {} for {host}", address.port());
                    let response = http::Response::builder()
                        .status(status)
                        .body(Full::new(Bytes::from(body)));
                    async move { response }
                });
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new();
                let _ = connection
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    Ok(address.to_string())
}
