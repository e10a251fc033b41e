//! A strict tag through two servers: the client learns from the answers which server owns
//! the tag and asks it directly, so the other server stops hearing from it (counted by a
//! proxy in front of each), over gRPC and over HTTP; the ids increase throughout.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idmint::Tag;
use idmint_client::{Client, Transport};

use crate::support::{CountingProxy, Extras, Node, client_runtime};

#[test]
fn a_strict_tag_is_asked_of_its_owner_directly() {
    let memory = Arc::new(idmint_store::MemoryStore::new());
    let a = Node::memory_with(Extras { strict: Some(Arc::clone(&memory)), ..Extras::default() });
    let b = Node::memory_with(Extras { strict: Some(memory), ..Extras::default() });
    let runtime = client_runtime();
    runtime.block_on(async {
        let node = Arc::clone(&a.node);
        let tag = Tag::parse("chat").expect("tag");
        a.run(async move { node.create_strict_tag(&tag, None).await.expect("created") }).await;
        // The owner, as the nodes name it: the other one is listed first.
        let owner = a.node.strict_owner("chat").expect("a owns the tag it created");
        let (owner, other) = if owner == idmint::strict::Owner::This { (&a, &b) } else { (&b, &a) };
        let mut last = 0;
        for transport in [Transport::Grpc, Transport::Http] {
            let (to_other, to_owner) =
                (CountingProxy::start(&other.url).await, CountingProxy::start(&owner.url).await);
            let client = Client::builder()
                .endpoints([to_other.url.clone(), to_owner.url.clone()])
                .transport(transport)
                .build()
                .await
                .expect("client");
            for _ in 0..3 {
                let id = client.next_id("chat").await.expect("id");
                assert!(id > last, "{transport:?}: {id} after {last}");
                last = id;
            }
            let (other_before, owner_before) =
                (to_other.sent.load(Ordering::Relaxed), to_owner.sent.load(Ordering::Relaxed));
            assert!(other_before > 0, "{transport:?}: the first take went to the first server");
            for _ in 0..50 {
                let id = client.next_id("chat").await.expect("id");
                assert!(id > last, "{transport:?}: {id} after {last}");
                last = id;
            }
            let ids = client.next_ids("chat", 3).await.expect("ids");
            assert_eq!(ids, vec![last + 1, last + 2, last + 3], "{transport:?}");
            last += 3;
            assert_eq!(
                to_other.sent.load(Ordering::Relaxed),
                other_before,
                "{transport:?}: the server that does not own the tag was asked again"
            );
            assert!(to_owner.sent.load(Ordering::Relaxed) > owner_before, "{transport:?}");
            client.close().await;
        }
    });
}
