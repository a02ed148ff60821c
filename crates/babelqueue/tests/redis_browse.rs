//! Reading a Redis dead-letter queue without taking anything, removing one value and a selection
//! of thousands, and finding the dead-letter queues of both layouts, against the real server.

#![cfg(feature = "redis")]

mod redis_support;

use babelqueue::transport::Transport;
use babelqueue::transport::redis::{LaravelTransport, RedisOptions, RedisTransport};
use bytes::Bytes;
use polyq_testkit::brokers::DeleteRedisKeys;

fn bodies(count: usize) -> Vec<Bytes> {
    (0..count)
        .map(|n| Bytes::from(format!(r#"{{"job":"urn:babel:t:n","data":{{"n":{n}}}}}"#)))
        .collect()
}

#[tokio::test]
async fn the_default_layout_is_browsed_in_order_and_a_value_removed() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("bq-browse-default");
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let transport = RedisTransport::connect(&url, RedisOptions::new())
        .await
        .unwrap();
    let sent = bodies(50);
    for body in &sent {
        transport.push_stored(&dlq, body).await.unwrap();
    }
    // A framed value is returned as it is stored.
    transport
        .publish(
            &dlq,
            sent[0].clone(),
            &[("traceparent".into(), "00-x".into())],
        )
        .await
        .unwrap();
    let seen = transport.browse(&dlq, None).await.unwrap();
    assert_eq!(seen.len(), 51);
    assert_eq!(&seen[..50], &sent[..]);
    assert!(seen[50].starts_with(b"{\"__bq_frame\""), "{:?}", seen[50]);
    assert_eq!(transport.browse(&dlq, None).await.unwrap(), seen);
    assert_eq!(transport.browse(&dlq, Some(3)).await.unwrap(), &sent[..3]);
    assert!(transport.browse(&dlq, Some(0)).await.unwrap().is_empty());
    assert_eq!(transport.depth(&dlq).await.unwrap(), 51);

    assert_eq!(transport.remove_all(&dlq, &[&sent[7]]).await.unwrap(), 1);
    assert_eq!(transport.remove_all(&dlq, &[&sent[7]]).await.unwrap(), 0);
    let left = transport.browse(&dlq, None).await.unwrap();
    let expected: Vec<Bytes> = sent
        .iter()
        .enumerate()
        .filter(|(n, _)| *n != 7)
        .map(|(_, body)| body.clone())
        .chain([seen[50].clone()])
        .collect();
    assert_eq!(left, expected);

    let found = transport.dead_letter_queues().await.unwrap();
    assert!(found.contains(&dlq), "{found:?}");
    assert!(!found.contains(&queue), "{found:?}");

    assert_eq!(transport.purge(&dlq).await.unwrap(), 50);
    assert_eq!(transport.depth(&dlq).await.unwrap(), 0);
    assert_eq!(transport.purge(&dlq).await.unwrap(), 0);
}

/// What is left of `list` once each of `removed` has taken the first equal value from the head.
fn without(list: &[Bytes], removed: &[Bytes]) -> Vec<Bytes> {
    let mut wanted = removed.to_vec();
    list.iter()
        .filter(|value| {
            let Some(at) = wanted.iter().position(|w| w == *value) else {
                return true;
            };
            wanted.swap_remove(at);
            false
        })
        .cloned()
        .collect()
}

/// Thousands of values, some stored twice (equal bytes); a selection of a third of them with
/// one copy of each twin, one value no longer there, and a copy pushed after the selection was
/// read. Each value given takes one equal value from the head and no more, the rest keep their
/// order, and the copy pushed later stays.
async fn a_selection_of_thousands_is_removed_in_one_pass(
    remove_all: impl AsyncFn(&[Bytes]) -> u64,
    push: impl AsyncFn(&Bytes),
    browse: impl AsyncFn() -> Vec<Bytes>,
) {
    let mut stored = Vec::new();
    for (n, body) in bodies(3_000).into_iter().enumerate() {
        if n % 500 == 0 {
            stored.push(body.clone());
        }
        stored.push(body);
    }
    for value in &stored {
        push(value).await;
    }
    let mut selected: Vec<Bytes> = bodies(3_000).into_iter().step_by(3).collect();
    selected.push(Bytes::from_static(b"{\"job\":\"urn:babel:t:gone\"}"));
    // Pushed after the selection was read: equal to a selected value, behind its original.
    push(&selected[1]).await;
    stored.push(selected[1].clone());

    assert_eq!(remove_all(&selected).await, 1_000);
    let left = browse().await;
    assert_eq!(left.len(), stored.len() - 1_000);
    assert_eq!(left, without(&stored, &selected));
    assert_eq!(left.last(), Some(&selected[1]), "the later copy stays");
    let twins = left.iter().filter(|value| **value == stored[0]).count();
    assert_eq!(twins, 1, "one copy of a twin given once is removed");
    assert_eq!(remove_all(&[]).await, 0);
}

#[tokio::test]
async fn a_selection_of_thousands_leaves_the_rest_in_order_on_the_default_layout() {
    let url = polyq_testkit::redis_url();
    let dlq = format!("{}.dlq", polyq_testkit::unique_name("bq-remove-default"));
    let _keys = DeleteRedisKeys::new(&url, [&dlq]);
    let transport = RedisTransport::connect(&url, RedisOptions::new())
        .await
        .unwrap();
    a_selection_of_thousands_is_removed_in_one_pass(
        async |selected| transport.remove_all(&dlq, selected).await.unwrap(),
        async |value| transport.push_stored(&dlq, value).await.unwrap(),
        async || transport.browse(&dlq, None).await.unwrap(),
    )
    .await;
}

#[tokio::test]
async fn a_selection_of_thousands_leaves_the_rest_in_order_on_the_laravel_layout() {
    let url = polyq_testkit::redis_url();
    let dlq = format!("{}.dlq", polyq_testkit::unique_name("bq-remove-laravel"));
    let laravel = LaravelTransport::connect(&url, RedisOptions::new())
        .await
        .unwrap();
    let _keys = DeleteRedisKeys::new(&url, [&dlq]);
    a_selection_of_thousands_is_removed_in_one_pass(
        async |selected| laravel.remove_all(&dlq, selected).await.unwrap(),
        async |value| laravel.publish(&dlq, value.clone(), &[]).await.unwrap(),
        async || laravel.browse(&dlq, None).await.unwrap(),
    )
    .await;
}

#[tokio::test]
async fn the_laravel_layout_is_browsed_and_its_dead_letter_queues_found_apart() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("bq-browse-laravel");
    let dlq = format!("{queue}.dlq");
    let laravel = LaravelTransport::connect(&url, RedisOptions::new())
        .await
        .unwrap();
    let default = RedisTransport::connect(&url, RedisOptions::new())
        .await
        .unwrap();
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let sent = bodies(10);
    for body in &sent {
        laravel.publish(&dlq, body.clone(), &[]).await.unwrap();
    }
    assert_eq!(laravel.browse(&dlq, None).await.unwrap(), sent);
    assert_eq!(laravel.remove_all(&dlq, &[&sent[0]]).await.unwrap(), 1);
    assert_eq!(laravel.browse(&dlq, None).await.unwrap(), &sent[1..]);
    assert_eq!(laravel.purge(&dlq).await.unwrap(), 9);
    assert!(laravel.browse(&dlq, None).await.unwrap().is_empty());
    laravel.publish(&dlq, sent[0].clone(), &[]).await.unwrap();

    assert!(laravel.dead_letter_queues().await.unwrap().contains(&dlq));
    let default_found = default.dead_letter_queues().await.unwrap();
    assert!(
        !default_found.iter().any(|key| key.contains(&queue)),
        "{default_found:?}"
    );
}
