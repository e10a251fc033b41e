//! The HTTP transport: `Transport::Http` serves from the HTTP routes (with failover past a
//! dead port), and `Transport::Auto` falls back to them behind an HTTP/1-only proxy.

use std::sync::atomic::Ordering;

use idmint_client::{Client, PublicIds, Transport};

use crate::support::{
    Http1Proxy, Node, assert_increasing, assert_unique, client_runtime, dead_url,
};

#[test]
fn http_transport_serves_ids_past_a_dead_first_server() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 1000).await;
        let client = Client::builder()
            .endpoint(dead_url())
            .endpoint(&node.url)
            .transport(Transport::Http)
            .build()
            .await
            .expect("client");
        let mut ids = Vec::new();
        for _ in 0..5_000 {
            ids.push(client.next_id("order").await.expect("id"));
        }
        assert_increasing(&ids, "http");
        let public = client.public_ids("order", 10).await.expect("public ids");
        let PublicIds::Numbers(numbers) = public else { panic!("numbers expected") };
        assert_eq!(numbers.len(), 10);
        // A stream over HTTP: batches of BATCH_COUNT_MAX.
        let mut stream = client.stream_ids("order", 250_001).expect("stream");
        let mut streamed = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = stream.next().await {
            let PublicIds::Numbers(chunk) = chunk.expect("chunk") else { panic!("numbers") };
            streamed.extend(chunk);
            chunks += 1;
        }
        assert_eq!((streamed.len(), chunks), (250_001, 3));
        assert_eq!(assert_unique(&[ids, numbers, streamed]), 5_000 + 10 + 250_001);
        client.close().await;
    });
}

#[test]
fn auto_falls_back_to_http_behind_an_http1_only_proxy() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 1000).await;
        let proxy = Http1Proxy::start(&node.url).await;
        let client = Client::connect([proxy.url.clone()]).await.expect("client");
        let ids = client.next_ids("order", 3).await.expect("ids through the proxy");
        assert_eq!(ids, [1, 2, 3]);
        assert!(proxy.h2_refused.load(Ordering::Relaxed) >= 1, "gRPC was not tried first");
        assert!(proxy.forwarded.load(Ordering::Relaxed) >= 1, "HTTP was not used");
        // gRPC only: the proxy refuses it, and that is an unavailable error.
        let grpc = Client::builder()
            .endpoint(&proxy.url)
            .transport(Transport::Grpc)
            .build()
            .await
            .expect("client");
        let error = grpc.public_ids("order", 1).await.expect_err("no gRPC through the proxy");
        assert!(matches!(error, idmint_client::ClientError::Unavailable { .. }), "{error}");
        client.close().await;
    });
}

/// Tags in any characters a Leaf row holds go out as one percent-encoded path segment on
/// the HTTP transport (leases, public ids, give-back on close) and as themselves over gRPC:
/// each is served from its own row.
#[test]
fn tags_in_any_characters_are_served_over_both_transports() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        let names = ["user/login", "订单", "a b", "order@v2", "100%", "q?x#y"];
        for name in names {
            node.create_tag(name, 10).await;
        }
        for transport in [Transport::Http, Transport::Grpc] {
            let client = Client::builder()
                .endpoint(&node.url)
                .transport(transport)
                .build()
                .await
                .expect("client");
            for name in names {
                let ids = client.next_ids(name, 3).await.expect(name);
                assert_increasing(&ids, name);
                let public = client.public_ids(name, 2).await.expect(name);
                assert!(matches!(public, PublicIds::Numbers(ref n) if n.len() == 2), "{name}");
            }
            client.close().await;
        }
        for name in names {
            assert!(node.handed_out(name) >= 10, "{name}: {}", node.handed_out(name));
        }
    });
}
