//! Typed errors: the caller's are not retried on other servers, bad input is refused before
//! any call, a formatted tag is refused for internal ids but served as public ids.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idmint::sequence::time_zone;
use idmint::{IdFormat, Tag};
use idmint_client::{Client, ClientError, PublicIds, Transport};

use crate::support::{BlackHole, Extras, Node, client_runtime, dead_url};

#[test]
fn an_unknown_tag_is_not_retried_on_other_servers() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        let hole = BlackHole::start().await;
        // Were the error retried, the black hole would cost a whole timeout.
        let client = Client::builder()
            .endpoint(&node.url)
            .endpoint(&hole.url)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("client");
        let started = Instant::now();
        let error = client.next_id("ghost").await.expect_err("unknown");
        assert_eq!(error, ClientError::UnknownTag { tag: "ghost".to_string() });
        assert!(error.to_string().contains("idmint tag create ghost"), "{error}");
        let error = client.public_ids("ghost", 2).await.expect_err("unknown");
        assert_eq!(error, ClientError::UnknownTag { tag: "ghost".to_string() });
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(hole.accepted.load(Ordering::Relaxed), 0, "the next server was asked");
        // Created since, the tag is served on the next request.
        node.create_tag("ghost", 100).await;
        assert_eq!(client.next_id("ghost").await.expect("id"), 1);
        client.close().await;
    });
}

#[test]
fn bad_input_is_refused_before_any_call() {
    let runtime = client_runtime();
    runtime.block_on(async {
        let hole = BlackHole::start().await;
        let client = Client::connect([hole.url.clone()]).await.expect("client");
        let started = Instant::now();
        for bad in ["", " lead", "x\ny", "idmint.key.x", &"t".repeat(129)] {
            let error = client.next_id(bad).await.expect_err("bad tag");
            assert!(matches!(error, ClientError::BadTag { .. }), "{bad:?}: {error}");
            assert!(client.tag(bad).is_err());
        }
        for count in [0, idmint_core::limits::BATCH_COUNT_MAX + 1] {
            let error = client.public_ids("order", count).await.expect_err("bad count");
            assert!(
                matches!(&error, ClientError::InvalidArgument { code, .. } if code == "bad_count"),
                "{error}"
            );
        }
        assert!(client.stream_ids("order", 0).is_err());
        assert!(client.next_snowflake_ids(0).await.is_err());
        assert!(started.elapsed() < Duration::from_millis(100));
        assert_eq!(hole.accepted.load(Ordering::Relaxed), 0, "a server was called");

        let build =
            |b: idmint_client::ClientBuilder| async move { b.build().await.expect_err("refused") };
        assert_eq!(build(Client::builder()).await, ClientError::NoEndpoints);
        let https = build(Client::builder().endpoint("https://ids.example:443")).await;
        assert!(https.to_string().contains("terminate TLS"), "{https}");
        let path = build(Client::builder().endpoint("http://h:1/v1")).await;
        assert!(matches!(path, ClientError::BadEndpoint { .. }), "{path}");
        let lease = build(Client::builder().endpoint("http://h:1").min_lease(0)).await;
        assert!(matches!(lease, ClientError::BadConfig { field: "min_lease", .. }), "{lease}");
        let token = build(Client::builder().endpoint("http://h:1").token("s3cret token")).await;
        assert!(!token.to_string().contains("s3cret"), "the token was shown: {token}");
        let timeout = build(Client::builder().endpoint("http://h:1").timeout(Duration::ZERO)).await;
        assert!(matches!(timeout, ClientError::BadConfig { field: "timeout", .. }), "{timeout}");
    });
}

#[test]
fn a_formatted_tag_refuses_internal_ids_and_serves_public_ones() {
    let mut formats = idmint::node::TagFormats::new();
    let format = IdFormat::new("C-{id}", time_zone("UTC").expect("zone"), None).expect("format");
    formats.insert(Tag::parse("code").expect("tag"), format);
    let node = Node::memory_with(Extras { formats, ..Extras::default() });
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("code", 100).await;
        let client = Client::connect([node.url.clone(), dead_url()]).await.expect("client");
        for _ in 0..2 {
            let error = client.next_id("code").await.expect_err("formatted");
            assert_eq!(error, ClientError::FormattedTag { tag: "code".to_string() });
        }
        let error = client.tag("code").expect("handle").next_ids(5).await.expect_err("formatted");
        assert_eq!(error, ClientError::FormattedTag { tag: "code".to_string() });
        let public = client.public_ids("code", 3).await.expect("public ids");
        assert_eq!(public, PublicIds::Texts(vec!["C-1".into(), "C-2".into(), "C-3".into()]));
        let mut stream = client.stream_ids("code", 25_000).expect("stream");
        let mut texts = Vec::new();
        while let Some(chunk) = stream.next().await {
            let PublicIds::Texts(chunk) = chunk.expect("chunk") else { panic!("texts") };
            texts.extend(chunk);
        }
        assert_eq!(texts.len(), 25_000);
        assert_eq!(texts[0], "C-4");
        client.close().await;
    });
}

#[test]
fn a_guarded_tag_needs_its_token_on_every_transport() {
    const SHOP: &str = "shop-token-0123456789";
    let shop = idmint_server::Client {
        name: "shop".to_string(),
        token: idmint_server::Token::parse(SHOP).expect("token"),
        tags: vec![Tag::parse("grpc").expect("tag"), Tag::parse("http").expect("tag")],
    };
    let auth = idmint_server::Auth::new(None, vec![shop]);
    let node = Node::memory_with(Extras { auth: Some(auth), ..Extras::default() });
    let runtime = client_runtime();
    runtime.block_on(async {
        let hole = BlackHole::start().await;
        // A tag per transport (a server takes ids back once), with segments larger than a
        // lease, so the give-back lands in the server's current segment.
        for (transport, tag) in [(Transport::Grpc, "grpc"), (Transport::Http, "http")] {
            node.create_tag(tag, 10_000).await;
            let build = |token: Option<&str>| {
                let builder = Client::builder()
                    .endpoint(&node.url)
                    .endpoint(&hole.url)
                    .transport(transport)
                    .timeout(Duration::from_secs(2));
                match token {
                    Some(token) => builder.token(token).build(),
                    None => builder.build(),
                }
            };
            let started = Instant::now();
            let anonymous = build(None).await.expect("client");
            let error = anonymous.next_id(tag).await.expect_err("no token");
            assert!(matches!(error, ClientError::Unauthenticated { .. }), "{transport:?}: {error}");
            assert!(error.to_string().contains("401") && error.to_string().contains("token"));
            let wrong = build(Some("not-the-token-000")).await.expect("client");
            let error = wrong.public_ids(tag, 1).await.expect_err("wrong token");
            assert!(
                matches!(error, ClientError::PermissionDenied { .. }),
                "{transport:?}: {error}"
            );
            assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
            assert_eq!(hole.accepted.load(Ordering::Relaxed), 0, "an auth error was retried");
            let client = build(Some(SHOP)).await.expect("client");
            let first = client.next_id(tag).await.expect("id with the token");
            client.close().await;
            // The give-back carried the token too.
            assert_eq!(node.next_id(tag).await, first + 1, "{transport:?}");
        }
    });
}

/// A strict tag: the server refuses it ranges, and the client then asks every id of it of
/// the servers, never caching one: ids taken through the client and on the node itself, in
/// turn, increase.
#[test]
fn a_strict_tag_is_asked_of_the_servers_never_cached() {
    let memory = std::sync::Arc::new(idmint_store::MemoryStore::new());
    let node = Node::memory_with(Extras { strict: Some(memory), ..Extras::default() });
    let runtime = client_runtime();
    runtime.block_on(async {
        let owner = std::sync::Arc::clone(&node.node);
        let tag = Tag::parse("chat").expect("tag");
        node.run(async move { owner.create_strict_tag(&tag, None).await.expect("created") }).await;
        let client = Client::connect([node.url.clone()]).await.expect("client");
        let mut last = 0;
        for round in 0..20 {
            let id = if round % 2 == 0 {
                client.next_id("chat").await.expect("client id")
            } else {
                node.next_id("chat").await
            };
            assert!(id > last, "round {round}: {id} after {last}");
            last = id;
        }
        assert_eq!(
            client.next_ids("chat", 3).await.expect("ids"),
            vec![last + 1, last + 2, last + 3]
        );
        client.close().await;
    });
}
