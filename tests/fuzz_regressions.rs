//! The fuzz targets' bodies (`weir::fuzz`) in the ordinary test build: every input a fuzzer
//! once crashed Weir with (`fuzz/regressions/<target>/`, kept with the fix) and each target's
//! built-in seeds, replayed. A panic fails the test; the in-process servers must still answer
//! afterwards. `scripts/fuzz.sh` runs the fuzzers themselves.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let mut found: Vec<(String, Vec<u8>)> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.expect("a regression input").path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).expect("a regression input reads")))
            .collect(),
        Err(_) => vec![],
    };
    found.sort();
    for (i, seed) in weir::fuzz::seeds(target).into_iter().enumerate() {
        found.push((format!("{target}'s built-in seed {i}"), seed));
    }
    found
}

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let inputs = inputs(target);
    for (name, bytes) in &inputs {
        eprintln!("{target}: {name}");
        body(bytes);
        // A panic in one of the in-process servers' tasks (which tokio would only log).
        assert_eq!(weir::fuzz::panics(), 0, "{target}: {name} made Weir panic");
    }
    inputs.len()
}

#[test]
fn stored() {
    assert!(replay("stored", weir::fuzz::stored) >= 11, "the built-in seeds of every reader");
}

#[test]
fn records() {
    replay("records", weir::fuzz::records);
    weir::fuzz::records(b"\0{\"id\": 1, \"doc\": {\"a\": 1}}\n");
}

#[test]
fn avro() {
    replay("avro", weir::fuzz::avro);
    weir::fuzz::avro(b"");
}

#[test]
fn protobuf() {
    assert!(replay("protobuf", weir::fuzz::protobuf) >= 4, "the built-in seeds");
    weir::fuzz::protobuf(b"");
}

#[test]
fn values() {
    replay("values", weir::fuzz::values);
    weir::fuzz::values(b"\0\x80id\n");
}

#[test]
fn sql() {
    replay("sql", weir::fuzz::sql);
    weir::fuzz::sql(b"SELECT k, count(*) FROM t GROUP BY k; EXPLAIN CREATE MATERIALIZED VIEW x AS SELECT * FROM ev");
}

#[test]
fn wire() {
    replay("wire", weir::fuzz::wire);
    // The server still answers a well-formed session.
    let mut session = vec![0u8];
    let sql = b"SELECT count(*) FROM t\0";
    session.push(b'Q');
    session.extend_from_slice(&((sql.len() + 4) as u32).to_be_bytes());
    session.extend_from_slice(sql);
    let answers = weir::fuzz::exchange(&session);
    assert!(
        answers.windows(14).any(|w| w == b"C\0\0\0\x0dSELECT 1\0"),
        "a SELECT after the replays completes: {}",
        String::from_utf8_lossy(&answers)
    );
}
