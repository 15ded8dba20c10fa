//! `weir bench exchange`: what a network exchange costs (issue 46, ADR 39). Nexmark bids (7
//! columns, generated before the clock starts) cross one real exchange stream on loopback:
//! encoded to Arrow IPC, sent through Flight `DoExchange` over HTTP/2 against credits,
//! decoded into the consuming inbox, with a barrier every `barrier_rows` rows. Both ends run
//! in this process, so the CPU figure counts the producer's and the consumer's work together:
//! `cpu_seconds_per_million_rows` is what a million rows crossing between two nodes cost the
//! cluster. Prints one human line and one JSON line.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::nexmark::cpu_seconds;
use crate::connectors::nexmark::generator::{EventKind, Generator, GeneratorConfig};
use crate::error::{Result, WeirError};
use crate::exchange::frame::PROTOCOL_VERSION;
use crate::exchange::{outbound, service, Exchanges, Frame, Outbound, StreamHeader};
use crate::metrics;
use crate::types::{Barrier, BarrierKind, ChangeBatch};

pub struct ExchangeBenchOptions {
    pub rows: u64,
    /// Rows per change batch.
    pub batch: u64,
    /// Rows between two barriers.
    pub barrier_rows: u64,
    /// Frames a consumer's inbox holds (the producer's credits).
    pub window: u32,
}

pub async fn run(options: ExchangeBenchOptions) -> Result<()> {
    let generator = Generator::new(EventKind::Bid, GeneratorConfig::default());
    let schema = generator.schema().clone();
    // The bids, made before the clock starts: events of every kind are numbered together, so
    // ask for enough of them.
    let mut batches = Vec::new();
    let (mut rows, mut next) = (0u64, 0u64);
    while rows < options.rows {
        let data = generator.batch(next, next + options.batch * 50 / 46)?;
        next += options.batch * 50 / 46;
        rows += data.num_rows() as u64;
        batches.push(ChangeBatch::inserts(data));
    }

    let exchanges = Exchanges::new("/weir/bench/", "consumer", options.window);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| WeirError::io(e.to_string()))?;
    let address = listener.local_addr().map_err(|e| WeirError::io(e.to_string()))?.to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(service::serve(listener, exchanges.clone(), async {
        let _ = stopped.await;
    }));
    let mut inbox = exchanges.expect("bench/0", "producer", 1, schema.clone());
    let header = StreamHeader {
        version: PROTOCOL_VERSION,
        cluster: "/weir/bench/".into(),
        exchange: "bench/0".into(),
        from_node: "producer".into(),
        to_node: "consumer".into(),
        generation: 1,
    };
    let mut out = Outbound::open(outbound::channel(&address)?, header, &schema, Duration::from_secs(5)).await?;

    let bytes_before = metrics::EXCHANGE_BYTES_SENT_TOTAL.get();
    let waited_before = metrics::EXCHANGE_CREDIT_WAIT_SECONDS_TOTAL.get();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let barrier_rows = options.barrier_rows.max(1);
    let producer = tokio::spawn(async move {
        let (mut since_barrier, mut epoch) = (0u64, 1u64);
        for change in batches {
            since_barrier += change.data.num_rows() as u64;
            out.send(Frame::Data(change)).await?;
            if since_barrier >= barrier_rows {
                let barrier = Barrier { epoch, injected_at: Instant::now(), kind: BarrierKind::Flush, now: 0 };
                out.send(Frame::Barrier(barrier)).await?;
                (since_barrier, epoch) = (0, epoch + 1);
            }
        }
        out.finish().await
    });
    let (mut received, mut barriers) = (0u64, 0u64);
    loop {
        match inbox.recv().await? {
            Frame::Data(change) => received += change.data.num_rows() as u64,
            Frame::Barrier(_) => barriers += 1,
            Frame::Watermark(_) => {}
            Frame::End => break,
        }
    }
    producer.await.map_err(|e| WeirError::internal(e.to_string()))??;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let bytes = metrics::EXCHANGE_BYTES_SENT_TOTAL.get() - bytes_before;
    let waited = metrics::EXCHANGE_CREDIT_WAIT_SECONDS_TOTAL.get() - waited_before;
    let _ = stop.send(());
    if received != rows {
        return Err(WeirError::internal(format!("sent {rows} rows, received {received}")));
    }
    let rate = rows as f64 / seconds;
    let cpu_per_million = cpu / (rows as f64 / 1e6);
    println!(
        "exchange: {rows} bid rows over one loopback Flight stream in {seconds:.2} s = {:.0} rows/s, {:.1} MB/s, \
         {:.0} bytes/row, {cpu_per_million:.3} CPU s per million rows (producer and consumer), {barriers} barriers, \
         producer waited {waited:.2} s for credit (window {})",
        rate,
        bytes as f64 / seconds / 1e6,
        bytes as f64 / rows as f64,
        options.window
    );
    let json = serde_json::json!({
        "bench": "exchange",
        "rows": rows,
        "batch_rows": options.batch,
        "window": options.window,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "rows_per_second": rate.round(),
        "bytes_per_row": (bytes as f64 / rows as f64 * 10.0).round() / 10.0,
        "cpu_seconds_per_million_rows": (cpu_per_million * 1000.0).round() / 1000.0,
        "credit_wait_seconds": (waited * 1000.0).round() / 1000.0,
        "barriers": barriers,
    });
    println!("{json}");
    Ok(())
}
