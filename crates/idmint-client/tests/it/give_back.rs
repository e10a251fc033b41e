//! The give-back at close: the client's unused ids go back to the server that leased them,
//! which hands them out again; a replayed give-back is refused.

use idmint_client::{Client, Transport};
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_proto::v1::{NextRangeRequest, Range, ReturnRangeRequest};

use crate::support::{Node, client_runtime};

#[test]
fn at_close_the_server_continues_right_after_the_last_id_the_client_handed_out() {
    for transport in [Transport::Grpc, Transport::Http] {
        let node = Node::memory();
        let runtime = client_runtime();
        runtime.block_on(async {
            node.create_tag("order", 10_000).await;
            let client = Client::builder()
                .endpoint(&node.url)
                .transport(transport)
                .build()
                .await
                .expect("client");
            let mut last = 0;
            for _ in 0..10 {
                last = client.next_id("order").await.expect("id");
            }
            assert_eq!(last, 10, "{transport:?}");
            assert!(node.handed_out("order") >= 1000, "the client leased at least min_lease");
            client.close().await;
            assert_eq!(
                node.next_id("order").await,
                last + 1,
                "{transport:?}: lease not taken back"
            );
            let error = client.next_id("order").await.expect_err("closed");
            assert_eq!(error, idmint_client::ClientError::ShuttingDown);
        });
    }
}

#[test]
fn a_replayed_return_is_refused() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 10_000).await;
        let endpoint = tonic::transport::Endpoint::from_shared(node.url.clone()).expect("url");
        let mut raw = IdMintClient::new(endpoint.connect().await.expect("grpc"));
        let request = NextRangeRequest { tag: "order".to_string(), count: 100 };
        let ranges = raw.next_range(request).await.expect("lease").into_inner().ranges;
        assert_eq!(ranges.len(), 1);
        let lease: Range = ranges[0];
        let give_back = ReturnRangeRequest {
            tag: "order".to_string(),
            start: lease.start + 10,
            end: lease.end,
            leases: vec![lease],
        };
        let returned = raw.return_range(give_back.clone()).await.expect("return").into_inner();
        assert_eq!(returned.returned, 90);
        // The server hands the ids out again; the same give-back now is refused.
        assert_eq!(node.next_id("order").await, lease.start + 10);
        let replay = raw.return_range(give_back).await.expect("replay").into_inner();
        assert_eq!(replay.returned, 0);
        // A forged proof is refused outright.
        let forged = ReturnRangeRequest {
            tag: "order".to_string(),
            start: lease.start + 50,
            end: lease.end,
            leases: vec![Range { proof: lease.proof ^ 1, ..lease }],
        };
        assert!(raw.return_range(forged).await.is_err());
    });
}

#[test]
fn dropping_the_client_without_close_gives_back_when_the_runtime_lives() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 10_000).await;
        let client = Client::connect([node.url.clone()]).await.expect("client");
        let last = client.next_id("order").await.expect("id");
        drop(client);
        // The close runs on the runtime in the background.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let tag = idmint::Tag::parse("order").expect("tag");
            let status = node.node.segment_status(&tag);
            let next = status.and_then(|s| s.buffer.current).map(|c| c.next_id);
            if next == Some(last + 1) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "not given back on drop: {next:?}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(node.next_id("order").await, last + 1);
    });
}
