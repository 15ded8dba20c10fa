//! Network exchanges over real loopback TCP: a Flight service on 127.0.0.1 and producers
//! opening streams to it, as two nodes do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tokio::sync::oneshot;

use super::frame::PROTOCOL_VERSION;
use super::*;
use crate::types::change_batch::Op;
use crate::types::{Barrier, BarrierKind, ChangeBatch};

const CLUSTER: &str = "/weir/test/";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("s", DataType::Utf8, true)]))
}

fn rows(from: i64, n: i64) -> ChangeBatch {
    let keys: Vec<i64> = (from..from + n).collect();
    let text: Vec<Option<String>> = keys.iter().map(|k| (k % 3 != 0).then(|| format!("row {k}"))).collect();
    let data =
        RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(keys)), Arc::new(StringArray::from(text))])
            .unwrap();
    let ops = (0..n).map(|i| if i % 5 == 4 { Op::Delete } else { Op::Insert }).collect();
    ChangeBatch::new(data, ops)
}

fn keys_of(change: &ChangeBatch) -> Vec<i64> {
    change.data.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
}

/// A node's exchange service on a loopback port; stops when dropped.
struct Node {
    exchanges: Arc<Exchanges>,
    address: String,
    _stop: oneshot::Sender<()>,
}

async fn node(id: &str, window: u32) -> Node {
    let exchanges = Exchanges::new(CLUSTER, id, window);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(service::serve(listener, exchanges.clone(), async {
        let _ = stopped.await;
    }));
    Node { exchanges, address, _stop: stop }
}

fn header(exchange: &str, from: &str, to: &str, generation: u64) -> StreamHeader {
    StreamHeader {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER.into(),
        exchange: exchange.into(),
        from_node: from.into(),
        to_node: to.into(),
        generation,
    }
}

async fn open(to: &Node, h: StreamHeader, deadline: Duration) -> crate::error::Result<Outbound> {
    Outbound::open(outbound::channel(&to.address).unwrap(), h, &schema(), deadline).await
}

#[tokio::test]
async fn frames_arrive_in_the_producers_order_with_their_ops() {
    let n2 = node("n2", 8).await;
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 3, schema());
    let mut out = open(&n2, header("v1/4", "n1", "n2", 3), Duration::from_secs(5)).await.unwrap();
    let injected_at = Instant::now();
    out.send(Frame::Data(rows(0, 10))).await.unwrap();
    out.send(Frame::Watermark(1_000)).await.unwrap();
    out.send(Frame::Barrier(Barrier { epoch: 7, injected_at, kind: BarrierKind::Checkpoint, now: 42 })).await.unwrap();
    out.send(Frame::Data(rows(10, 3))).await.unwrap();
    let finished = tokio::spawn(out.finish());

    let Frame::Data(first) = inbox.recv().await.unwrap() else { panic!("data first") };
    assert_eq!(first.data, rows(0, 10).data);
    assert_eq!(first.ops, rows(0, 10).ops);
    assert!(matches!(inbox.recv().await.unwrap(), Frame::Watermark(1_000)));
    let Frame::Barrier(b) = inbox.recv().await.unwrap() else { panic!("then the barrier") };
    assert_eq!((b.epoch, b.kind, b.now), (7, BarrierKind::Checkpoint, 42));
    let Frame::Data(second) = inbox.recv().await.unwrap() else { panic!() };
    assert_eq!(keys_of(&second), vec![10, 11, 12]);
    assert!(matches!(inbox.recv().await.unwrap(), Frame::End));
    finished.await.unwrap().expect("finish returns once the consumer took the end");
    assert_eq!(inbox.from_node(), "n1");
}

#[tokio::test]
async fn a_consumer_that_does_not_read_stops_its_producer_after_its_window() {
    let window = 4;
    let n2 = node("n2", window).await;
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let mut out = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let producer = tokio::spawn(async move {
        for i in 0..40 {
            out.send(Frame::Data(rows(i * 10, 10))).await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
        }
        out.finish().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sent.load(Ordering::SeqCst), window as usize, "the producer holds no credit past the window");
    // Reading frees places: the producer goes on, still never more than the window ahead.
    let mut keys = Vec::new();
    for _ in 0..10 {
        let Frame::Data(change) = inbox.recv().await.unwrap() else { panic!() };
        keys.extend(keys_of(&change));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sent.load(Ordering::SeqCst), 10 + window as usize);
    loop {
        match inbox.recv().await.unwrap() {
            Frame::Data(change) => keys.extend(keys_of(&change)),
            Frame::End => break,
            other => panic!("{other:?}"),
        }
    }
    producer.await.unwrap();
    assert_eq!(keys, (0..400).collect::<Vec<i64>>(), "every row once, in order");
}

#[tokio::test]
async fn a_producer_under_an_older_generation_is_fenced_at_once() {
    let n2 = node("n2", 8).await;
    let _inbox = n2.exchanges.expect("v1/4", "n1", 5, schema());
    let started = Instant::now();
    let err = open(&n2, header("v1/4", "n1", "n2", 4), Duration::from_secs(10)).await.err().expect("refused");
    assert!(err.to_string().contains("fenced"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "a fenced producer is not retried");
}

#[tokio::test]
async fn a_producer_ahead_of_the_consumer_waits_for_its_job_under_the_new_generation() {
    let n2 = node("n2", 8).await;
    let old = n2.exchanges.expect("v1/4", "n1", 5, schema());
    let opening = tokio::spawn({
        let address = n2.address.clone();
        async move {
            Outbound::open(
                outbound::channel(&address).unwrap(),
                header("v1/4", "n1", "n2", 6),
                &schema(),
                Duration::from_secs(10),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!opening.is_finished(), "the stream waits while the job here is at generation 5");
    // The job here restarts under generation 6: the stream is taken into its new inbox.
    drop(old);
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 6, schema());
    let mut out = opening.await.unwrap().unwrap();
    out.send(Frame::Watermark(9)).await.unwrap();
    assert!(matches!(inbox.recv().await.unwrap(), Frame::Watermark(9)));
}

#[tokio::test]
async fn streams_for_another_node_a_taken_inbox_or_other_columns_are_refused() {
    let n2 = node("n2", 8).await;
    let _inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let err = open(&n2, header("v1/4", "n1", "n3", 1), Duration::from_secs(5)).await.err().unwrap();
    assert!(err.to_string().contains("for node n3"), "{err}");
    let _held = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    let err = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.err().unwrap();
    assert!(err.to_string().contains("connected already"), "{err}");

    let _other = n2.exchanges.expect("v1/5", "n1", 1, schema());
    let wrong = Schema::new(vec![Field::new("k", DataType::Utf8, false), Field::new("s", DataType::Utf8, true)]);
    let channel = outbound::channel(&n2.address).unwrap();
    let err =
        Outbound::open(channel, header("v1/5", "n1", "n2", 1), &wrong, Duration::from_secs(5)).await.err().unwrap();
    assert!(err.to_string().contains("expects"), "{err}");
}

#[tokio::test]
async fn a_producer_that_dies_mid_stream_leaves_an_error_never_a_silent_end() {
    let n2 = node("n2", 8).await;
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let mut out = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    out.send(Frame::Data(rows(0, 5))).await.unwrap();
    // Frames still on their way when a producer dies may be lost with it (the job restarts
    // from the last checkpoint); what arrives is in order, and the stream ends in an error.
    drop(out);
    let err = loop {
        match inbox.recv().await {
            Ok(Frame::Data(change)) => assert_eq!(keys_of(&change), vec![0, 1, 2, 3, 4]),
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("without its end") || err.to_string().contains("broke"), "{err}");
}

#[tokio::test]
async fn a_consumer_that_stops_ends_its_producers_stream() {
    let n2 = node("n2", 2).await;
    let inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let mut out = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    drop(inbox);
    let mut failed = None;
    for i in 0..10 {
        if let Err(e) = out.send(Frame::Data(rows(i, 1))).await {
            failed = Some(e);
            break;
        }
    }
    let err = failed.expect("sending into a stopped job fails");
    assert!(err.to_string().contains("consuming job stopped"), "{err}");
    assert_eq!(n2.exchanges.expected_count(), 0);
}

#[tokio::test]
async fn a_batch_larger_than_a_frame_arrives_whole_in_several_frames() {
    let n2 = node("n2", 4).await;
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let mut out = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    let big = rows(0, 300_000);
    assert!(big.data.get_array_memory_size() > 2 * outbound::FRAME_BYTES);
    let sender = tokio::spawn(async move {
        out.send(Frame::Data(big)).await.unwrap();
        out.finish().await.unwrap();
    });
    let (mut keys, mut frames) = (Vec::new(), 0);
    loop {
        match inbox.recv().await.unwrap() {
            Frame::Data(change) => {
                frames += 1;
                keys.extend(keys_of(&change));
            }
            Frame::End => break,
            other => panic!("{other:?}"),
        }
    }
    sender.await.unwrap();
    assert!(frames > 2, "{frames} frames");
    assert_eq!(keys, (0..300_000).collect::<Vec<i64>>());
}

#[tokio::test]
async fn nothing_listening_is_retried_until_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let started = Instant::now();
    let channel = outbound::channel(&address).unwrap();
    let err = Outbound::open(channel, header("v1/4", "n1", "n2", 1), &schema(), Duration::from_millis(600))
        .await
        .err()
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(600), "retried until the deadline");
    assert_eq!(err.state.code(), "08001", "{err}");
}

#[tokio::test]
async fn an_outbox_never_makes_its_job_wait_and_holds_it_back_at_the_mark() {
    let n2 = node("n2", 2).await;
    let mut inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let out = open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap();
    let outbox = Outbox::start(out);
    // The consumer does not read: pushes return at once all the same.
    let pushed = Instant::now();
    for i in 0..50 {
        outbox.push(Frame::Data(rows(i * 100, 100))).unwrap();
    }
    assert!(pushed.elapsed() < Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let queued = outbox.queued_bytes();
    assert!(queued > 0, "frames past the consumer's window wait in the outbox");
    // The job would wait here before reading more input, until the consumer catches up.
    let mark = queued / 2;
    assert!(tokio::time::timeout(Duration::from_millis(300), outbox.drained_below(mark)).await.is_err());
    let reader = tokio::spawn(async move {
        let mut keys = Vec::new();
        loop {
            match inbox.recv().await.unwrap() {
                Frame::Data(change) => keys.extend(keys_of(&change)),
                Frame::End => return keys,
                other => panic!("{other:?}"),
            }
        }
    });
    outbox.drained_below(mark).await.unwrap();
    outbox.finish().await.unwrap();
    assert_eq!(reader.await.unwrap(), (0..5000).collect::<Vec<i64>>(), "in push order, once each");
}

#[tokio::test]
async fn an_outbox_reports_its_streams_failure_to_every_later_push() {
    let n2 = node("n2", 2).await;
    let inbox = n2.exchanges.expect("v1/4", "n1", 1, schema());
    let outbox = Outbox::start(open(&n2, header("v1/4", "n1", "n2", 1), Duration::from_secs(5)).await.unwrap());
    drop(inbox);
    for i in 0..10 {
        let _ = outbox.push(Frame::Data(rows(i, 1)));
    }
    let err = outbox.drained_below(0).await.expect_err("the consumer stopped");
    assert!(err.to_string().contains("consuming job stopped"), "{err}");
    assert!(outbox.push(Frame::Watermark(1)).is_err());
}
