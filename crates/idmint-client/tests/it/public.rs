//! The direct calls: snowflake ids from the local cache and in batches, and a sequence call
//! to a node that serves none.

use std::collections::HashSet;

use idmint_client::{Client, ClientError};

use crate::support::{Extras, Node, client_runtime};

#[test]
fn snowflake_ids_come_from_a_cache_that_refills_ahead() {
    let node = Node::memory_with(Extras { snowflake: true, ..Extras::default() });
    let runtime = client_runtime();
    runtime.block_on(async {
        let client = Client::connect([node.url.clone()]).await.expect("client");
        let mut ids = Vec::new();
        for _ in 0..20_000 {
            ids.push(client.next_snowflake_id().await.expect("snowflake id"));
        }
        ids.extend(client.next_snowflake_ids(1_000).await.expect("snowflake ids"));
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 21_000);
        // The node without sequences says so; no retry turns that into an id.
        let error = client.next_sequence_ids("invoice", 3).await.expect_err("no sequences");
        assert!(matches!(error, ClientError::Unavailable { .. }), "{error}");
        client.close().await;
        assert_eq!(client.next_snowflake_id().await, Err(ClientError::ShuttingDown));
    });
}

#[test]
fn a_grpc_stream_holds_more_than_a_batch() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 1000).await;
        let client = Client::builder()
            .endpoint(&node.url)
            .transport(idmint_client::Transport::Grpc)
            .build()
            .await
            .expect("client");
        let count = idmint_core::limits::BATCH_COUNT_MAX + 50_001;
        let mut stream = client.stream_ids("order", count).expect("stream");
        let mut ids = Vec::new();
        while let Some(chunk) = stream.next().await {
            let idmint_client::PublicIds::Numbers(chunk) = chunk.expect("chunk") else {
                panic!("numbers expected")
            };
            assert!(chunk.len() as u64 <= idmint_client::STREAM_CHUNK_IDS);
            ids.extend(chunk);
        }
        assert_eq!(ids.len() as u64, count);
        crate::support::assert_increasing(&ids, "one server's stream");
        client.close().await;
    });
}
