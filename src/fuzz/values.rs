//! The `values` target: COPY data in each of its formats (text, CSV with PostgreSQL's options,
//! binary) into table `t`, which has a column of every type: the text and binary value
//! decoders behind COPY, and behind the extended protocol's parameters.
//!
//! The first byte picks the format; the second where the data is cut in two, as it arrives in
//! two CopyData messages (the records whole in the first part are stored first, the rest waits
//! for the second, as the server does). Every 512 inputs the table is emptied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::{every_type, MAX_INPUT, RUNTIME};
use crate::bench::Harness;
use crate::frontend::handler::copy::copy_in;
use crate::frontend::Statement;

const FORMATS: [&str; 5] = [
    "",
    " (FORMAT csv)",
    " (FORMAT binary)",
    " (FORMAT csv, HEADER true, DELIMITER ';', QUOTE '''', ESCAPE '\\', NULL 'NULL')",
    " (FORMAT text, DELIMITER '|', NULL '')",
];

static SERVER: LazyLock<Mutex<Harness>> = LazyLock::new(|| {
    RUNTIME.block_on(async {
        let mut harness = Harness::new().await.expect("an in-process server");
        harness.run(concat!("CREATE TABLE t (", every_type!(), ")")).await.expect("the fuzzing table");
        Mutex::new(harness)
    })
});

static INPUTS: AtomicU64 = AtomicU64::new(0);

pub fn values(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let [format, cut, body @ ..] = data else { return };
    let mut server = SERVER.lock();
    RUNTIME.block_on(async {
        let sql = format!("COPY t FROM STDIN{}", FORMATS[*format as usize % FORMATS.len()]);
        let Ok(mut statements) = server.frontend.parse(&sql) else { unreachable!("{sql} parses") };
        let Statement::Sql(copy) = statements.remove(0) else { unreachable!("{sql} is COPY") };
        let copy = copy_in(&server.frontend, &copy).expect("COPY into the fuzzing table");
        let (first, second) = body.split_at((*cut as usize * body.len()) / 256);
        let mut started = false;
        let Ok((rows, used)) = copy.parse(first, false, &mut started) else { return };
        let rest = [&first[used..], second].concat();
        let Ok((mut more, _)) = copy.parse(&rest, true, &mut started) else { return };
        let mut all = rows;
        all.append(&mut more);
        if copy.format.header && !all.is_empty() && !copy.binary {
            all.remove(0);
        }
        drop(copy.insert(&server.frontend, all, None).await);
        if INPUTS.fetch_add(1, Ordering::Relaxed) % 512 == 511 {
            drop(server.run("DELETE FROM t").await);
        }
    });
}
