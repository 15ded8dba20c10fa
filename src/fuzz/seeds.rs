//! Seeds only Rust can write: what Weir itself stores (manifests, change-log entries, source
//! positions, outbox records, Arrow IPC, relation definitions, aggregate values), encoded by
//! the same code that writes them, for the `stored` target; Protobuf messages of the
//! `protobuf` target's message, encoded by prost-reflect. The other targets' seeds come from
//! `tests/slt/` and hand-made records (`fuzz/seeds.py`).
//!
//! [`init`] runs when a target starts: with `WEIR_FUZZ_SEEDS=<dir>` it writes that target's
//! seeds into `<dir>` (what `scripts/fuzz.sh` points at the target's corpus).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::replay::{ChunkEntry, Position};
use crate::checkpoint::manifest::{FileEntry, Manifest, FORMAT};
use crate::state::record::RecordWriter;
use crate::types::change_batch::{ChangeBatch, Op};

/// Writes `target`'s built-in seeds into `$WEIR_FUZZ_SEEDS`, when it is set.
pub fn init(target: &str) {
    let Some(dir) = std::env::var_os("WEIR_FUZZ_SEEDS") else { return };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("the seeds' directory");
    for (i, seed) in seeds(target).into_iter().enumerate() {
        std::fs::write(dir.join(format!("builtin-{i:03}")), seed).expect("a seed written");
    }
}

/// `target`'s built-in seeds (none for targets seeded from text).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "stored" => stored(),
        "protobuf" => protobuf(),
        _ => vec![],
    }
}

fn tagged(which: u8, bytes: &[u8]) -> Vec<u8> {
    [&[which][..], bytes].concat()
}

fn stored() -> Vec<Vec<u8>> {
    let manifest = Manifest {
        format: FORMAT,
        epoch: 42,
        taken_at_micros: 1_780_000_000_000_000,
        catalog_version: 7,
        incarnation: "3f2a".into(),
        files: vec![FileEntry { name: "000012.sst".into(), object: "sst/000012.sst".into(), size: 4096, crc32: 1 }],
    };
    let encoded = manifest.encode();
    // The JSON without its checksum line (the `9` reader writes its own).
    let body = &encoded[..encoded[..encoded.len() - 1].iter().rposition(|&b| b == b'\n').expect("a checksum line")];
    let schema =
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true), Field::new("v", DataType::Utf8, true)]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
        Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).expect("a batch");
    let changes = ChangeBatch::new(batch.clone(), vec![Op::Insert, Op::Delete, Op::Insert]);
    let chunk = ChunkEntry {
        from: Position { records: 10, detail: vec![1, 2, 3] },
        to: Position { records: 20, detail: vec![4, 5, 6] },
        stamp: 99,
    };
    let mut log = RecordWriter::default();
    log.u64(2).u64(0).bytes(b"key").bytes(b"value").u64(2).bytes(b"from").bytes(b"to");
    log.u64(1).changes(&changes).expect("changes encode");
    let mut chunk_log = RecordWriter::default();
    chunk_log.u64(1).u64(1).bytes(b"gone").u64(2).bytes(&chunk.encode());
    let kafka = crate::connectors::kafka::offsets::position(5, &BTreeMap::from([(0, 17), (3, 4)]));
    let mut outbox = RecordWriter::default();
    outbox.u64(2).changes(&changes).expect("changes encode").changes(&changes).expect("changes encode");
    let mut keys = RecordWriter::default();
    keys.keys_by_time(&BTreeMap::from([(5, vec![b"a".to_vec(), b"bc".to_vec()]), (-3, vec![])]));
    let relation = serde_json::json!({
        "id": 1026, "name": "orders", "kind": "materialized_view",
        "definition": "CREATE MATERIALIZED VIEW orders AS SELECT k, v FROM t",
        "schema": serde_json::to_value(&*schema).expect("a schema serializes"),
        "primary_key": [0], "depends_on": [1025], "parallelism": 2, "owner": "ana"
    });
    let mut sum = crate::types::exact_sum::ExactSum::default();
    sum.add_f64(2.5, 1);
    sum.add_i64(-7, 1);
    let mut value = crate::state::value::ValueWriter::with_capacity(64);
    value.u8(1).exact_sum(&sum).bytes(b"abc");
    vec![
        tagged(0, &encoded),
        tagged(9, body),
        tagged(1, &log.finish()),
        tagged(1, &chunk_log.finish()),
        tagged(2, &chunk.encode()),
        tagged(3, &kafka.detail),
        tagged(4, &outbox.finish()),
        tagged(5, &keys.finish()),
        tagged(6, &crate::state::table::encode_ipc(&batch).expect("IPC encodes")),
        tagged(7, relation.to_string().as_bytes()),
        tagged(8, &value.finish()),
    ]
}

/// `weir.fuzz.Order` messages (bare, split by `0xFF 0xFE`, after the even byte that selects
/// them) and framings (after an odd byte).
fn protobuf() -> Vec<Vec<u8>> {
    use prost_reflect::prost::Message as _;
    use prost_reflect::{DescriptorPool, DynamicMessage, Value};
    let mut pool = DescriptorPool::global();
    pool.decode_file_descriptor_set(super::decoders::protobuf_descriptors().as_slice()).expect("the fuzz message");
    let order = pool.get_message_by_name("weir.fuzz.Order").expect("weir.fuzz.Order");
    let message = |name: &str| DynamicMessage::new(pool.get_message_by_name(name).expect("a known message"));
    let mut full = DynamicMessage::new(order.clone());
    let mut at = message("google.protobuf.Timestamp");
    at.set_field_by_name("seconds", Value::I64(-1));
    at.set_field_by_name("nanos", Value::I32(999_999_999));
    let mut note = message("google.protobuf.StringValue");
    note.set_field_by_name("value", Value::String("gift".into()));
    let mut count = message("google.protobuf.Int64Value");
    count.set_field_by_name("value", Value::I64(7));
    let mut address = message("weir.fuzz.Address");
    address.set_field_by_name("city", Value::String("Lyon".into()));
    address.set_field_by_name("zip", Value::I32(69001));
    for (name, value) in [
        ("id", Value::I64(1)),
        ("qty", Value::I32(-3)),
        ("name", Value::String("order 1".into())),
        ("price", Value::F64(9.5)),
        ("ratio", Value::F32(0.25)),
        ("ok", Value::Bool(true)),
        ("raw", Value::Bytes(vec![0, 1, 255].into())),
        ("count", Value::U32(u32::MAX)),
        ("big", Value::U64(u64::MAX)),
        ("signed", Value::I64(i64::MIN)),
        ("fixed", Value::U64(1)),
        ("state", Value::EnumNumber(2)),
        ("at", Value::Message(at.clone())),
        ("note", Value::Message(note)),
        ("tags", Value::List(vec![Value::String("a".into()), Value::String("b".into())])),
        ("times", Value::List(vec![Value::Message(at)])),
        ("counts", Value::List(vec![Value::Message(count)])),
        ("address", Value::Message(address.clone())),
        ("lines", Value::List(vec![Value::Message(address)])),
        ("number", Value::I64(42)),
    ] {
        full.set_field_by_name(name, value);
    }
    let mut attrs = std::collections::HashMap::new();
    attrs.insert(prost_reflect::MapKey::String("n".into()), Value::I64(5));
    full.set_field_by_name("attrs", Value::Map(attrs));
    let full = full.encode_to_vec();
    let empty = DynamicMessage::new(order).encode_to_vec();
    vec![
        tagged(0, &full),
        tagged(0, &[&full[..], &b"\xff\xfe"[..], &empty, &b"\xff\xfe"[..], &full[..full.len() / 2]].concat()),
        tagged(1, &[0, 0, 0, 1, 0, 4, 2, 0]),
        tagged(1, &[0, 0, 0, 0, 7, 0, 0x0a]),
    ]
}
