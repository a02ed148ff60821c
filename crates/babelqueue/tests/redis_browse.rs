//! Reading a Redis dead-letter queue without taking anything, removing one value, and finding
//! the dead-letter queues of both layouts, against the real server.

#![cfg(feature = "redis")]

mod redis_support;

use babelqueue::transport::Transport;
use babelqueue::transport::redis::{LaravelTransport, RedisOptions, RedisTransport};
use bytes::Bytes;
use redis_support::Keys;

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
    let _keys = Keys {
        url: url.clone(),
        pattern: format!("{queue}*"),
    };
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

    assert!(transport.remove(&dlq, &sent[7]).await.unwrap());
    assert!(!transport.remove(&dlq, &sent[7]).await.unwrap());
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
    let _keys = Keys {
        url: url.clone(),
        pattern: format!("{}*", laravel.key(&queue)),
    };
    let sent = bodies(10);
    for body in &sent {
        laravel.publish(&dlq, body.clone(), &[]).await.unwrap();
    }
    assert_eq!(laravel.browse(&dlq, None).await.unwrap(), sent);
    assert!(laravel.remove(&dlq, &sent[0]).await.unwrap());
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
