//! Many tasks on one client, on a multi-thread runtime: every id unique, each task's ids
//! increasing.

use idmint_client::{Client, Tag};

use crate::support::{Node, assert_increasing, assert_unique, client_runtime};

const TASKS: usize = 4;
const PER_TASK: usize = 1_000_000;

#[test]
fn four_tasks_take_a_million_ids_each_unique_and_increasing_per_task() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 1000).await;
        let client = Client::connect([node.url.clone()]).await.expect("client");
        let tag = Tag::parse("order").expect("tag");
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let (client, tag) = (client.clone(), tag.clone());
                tokio::spawn(async move {
                    let mut ids = Vec::with_capacity(PER_TASK);
                    for _ in 0..PER_TASK {
                        ids.push(
                            client
                                .next_id(&tag)
                                .await
                                .unwrap_or_else(|e| panic!("task {task}: {e}")),
                        );
                    }
                    ids
                })
            })
            .collect();
        let mut lists = Vec::new();
        for (task, handle) in tasks.into_iter().enumerate() {
            let ids = handle.await.expect("task");
            assert_increasing(&ids, &format!("task {task}"));
            lists.push(ids);
        }
        assert_eq!(assert_unique(&lists), TASKS * PER_TASK);
        // Every id came from the server's leases (plus the tails still in the buffer).
        let handed_out = node.handed_out("order");
        assert!(handed_out >= (TASKS * PER_TASK) as u64, "{handed_out}");
        client.close().await;
    });
}
