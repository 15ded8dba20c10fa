//! The data directory's file system failing under a running server, for real: a size-limited
//! tmpfs filled up by a file beside the data, and a loop-mounted ext4 the kernel turns
//! read-only (as it does on an error, `errors=remount-ro`). Writes are refused with 53100 and a
//! clear message, reads go on, nothing acknowledged is lost, and writing resumes when space
//! returns (with no restart), or once the file system is repaired and the server started again.
//! Mounting needs root: as another user these tests say so and pass over (CI runs as root).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;

/// A tmpfs of `mib` MiB mounted on a temporary directory, unmounted on drop.
struct Mount {
    dir: tempfile::TempDir,
    /// An ext4 file system's image and where it is mounted (a tmpfs is mounted on `dir`).
    image: Option<PathBuf>,
    mountpoint: Option<PathBuf>,
}

impl Mount {
    fn tmpfs(mib: u64) -> Option<Mount> {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: the disk-fault tests need to mount a tmpfs, and pass over");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "weir-test", dir.path().to_str().unwrap()])
            .status()
            .expect("mount");
        assert!(status.success(), "mounting a tmpfs failed");
        Some(Mount { dir, image: None, mountpoint: None })
    }

    /// An ext4 file system of `mib` MiB in a file, loop-mounted with `errors=remount-ro`: what
    /// turns read-only under a running server when the kernel meets an error on it.
    fn ext4(mib: u64) -> Option<Mount> {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: the disk-fault tests need to mount a file system, and pass over");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mountpoint = dir.path().join("fs");
        std::fs::create_dir(&mountpoint).unwrap();
        std::fs::File::create(&image).unwrap().set_len(mib << 20).unwrap();
        let made = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image).status().expect("mkfs.ext4");
        assert!(made.success(), "mkfs.ext4 failed");
        let mount = Mount { dir, image: Some(image), mountpoint: Some(mountpoint) };
        mount.mount_image();
        Some(mount)
    }

    fn mount_image(&self) {
        let (image, mountpoint) = (self.image.as_ref().unwrap(), self.mountpoint.as_ref().unwrap());
        let status = Command::new("mount")
            .args(["-o", "loop,errors=remount-ro"])
            .arg(image)
            .arg(mountpoint)
            .status()
            .expect("mount");
        assert!(status.success(), "mounting {} failed", image.display());
    }

    /// What the kernel does on an ext4 error with `errors=remount-ro`: the file system turns
    /// read-only at once, files open for writing or not (ext4's own test knob).
    fn fail_ext4(&self) {
        let source = Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(self.path()).output().expect("findmnt");
        let device = String::from_utf8(source.stdout).unwrap();
        let device = Path::new(device.trim()).file_name().unwrap().to_str().unwrap().to_string();
        std::fs::write(format!("/sys/fs/ext4/{device}/trigger_fs_error"), "1").expect("ext4's trigger_fs_error");
    }

    /// What an operator does next: unmount, check and repair, mount again.
    fn repair_ext4(&self) {
        let mountpoint = self.mountpoint.as_ref().unwrap();
        assert!(Command::new("umount").arg(mountpoint).status().unwrap().success(), "umount");
        let checked = Command::new("e2fsck").args(["-f", "-y"]).arg(self.image.as_ref().unwrap()).status().unwrap();
        assert!(checked.code().is_some_and(|c| c <= 1), "e2fsck: {checked}");
        self.mount_image();
    }

    fn path(&self) -> &Path {
        self.mountpoint.as_deref().unwrap_or(self.dir.path())
    }
}

/// Keeps the file system full, as other writers on a full disk would: a file beside the data
/// grown until a write fails for want of space, and grown again whenever space comes back
/// (RocksDB gives back what it had reserved for a file when it finishes or deletes it, which
/// would otherwise let writes through again at a moment the test cannot choose). `release`
/// stops it and removes the file: space returns.
struct Filler {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Filler {
    fn start(path: PathBuf) -> Filler {
        let mut file = std::fs::File::create(&path).unwrap();
        fill_up(&mut file);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                fill_up(&mut file);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Filler { path, stop, thread: Some(thread) }
    }

    fn release(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().expect("the filler");
        std::fs::remove_file(&self.path).unwrap();
    }
}

/// Writes to `file` until a write fails for want of space.
fn fill_up(file: &mut std::fs::File) {
    use std::io::Write;
    let chunk = vec![0xABu8; 1 << 16];
    loop {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the file system: {e}"),
        }
    }
    // What a page or two is left of, too.
    while file.write_all(&[0u8; 512]).is_ok() {}
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

const SCHEMA: &str = "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer INT, amount BIGINT);
     CREATE MATERIALIZED VIEW per_customer AS
       SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer;";

async fn insert(c: &tokio_postgres::Client, id: i64) -> Result<(), tokio_postgres::Error> {
    c.execute("INSERT INTO orders VALUES ($1, $2, $3)", &[&id, &((id % 7) as i32), &(id % 100)]).await.map(drop)
}

/// The table holds exactly the acknowledged ids, and the view equals its query.
async fn assert_exactly(c: &tokio_postgres::Client, acknowledged: &[i64]) {
    c.batch_execute("FLUSH").await.unwrap();
    let ids = common::rows(c, "SELECT id FROM orders ORDER BY id").await;
    let mut want: Vec<String> = acknowledged.iter().map(|id| id.to_string()).collect();
    want.sort();
    assert_eq!(ids, want, "the table holds the acknowledged rows, and only those");
    assert_eq!(
        common::rows(c, "SELECT customer, n, total FROM per_customer ORDER BY customer").await,
        common::rows(c, "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer ORDER BY customer").await
    );
}

/// A server on `data` with the orders schema and 200 acknowledged rows (ids 0..200), flushed:
/// the server, a client, the next id and the acknowledged ids.
async fn start_with_orders(data: &Path, args: &[&str]) -> (TestServer, tokio_postgres::Client, i64, Vec<i64>) {
    let server = TestServer::start_on(data, args);
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    let (mut next, mut acknowledged) = (0, Vec::new());
    insert_acknowledged(&c, &mut next, &mut acknowledged, 200).await;
    c.batch_execute("FLUSH").await.unwrap();
    (server, c, next, acknowledged)
}

/// Inserts `n` rows from id `next` on, each of which must be acknowledged.
async fn insert_acknowledged(c: &tokio_postgres::Client, next: &mut i64, acknowledged: &mut Vec<i64>, n: usize) {
    for _ in 0..n {
        insert(c, *next).await.unwrap();
        acknowledged.push(*next);
        *next += 1;
    }
}

/// `refused` is 53100 saying the file system is `what` ("full", "read-only"); three seconds
/// on, writes are still refused, the server still runs (its views wait rather than stop it),
/// and reads answer with exactly the acknowledged rows.
async fn assert_refused_while_reads_go_on(
    server: &mut TestServer,
    c: &tokio_postgres::Client,
    refused: tokio_postgres::Error,
    what: &str,
    acknowledged: &[i64],
) {
    let db = refused.as_db_error().expect("an error from the server");
    assert_eq!(db.code().code(), "53100", "{db:?}");
    assert!(db.message().contains(what), "{}", db.message());
    tokio::time::sleep(Duration::from_secs(3)).await;
    common::assert_sqlstate(c, "INSERT INTO orders VALUES (-1, 0, 0)", "53100").await;
    let count: i64 = c.query_one("SELECT count(*) FROM orders", &[]).await.unwrap().get(0);
    assert_eq!(count, acknowledged.len() as i64);
    assert!(!common::rows(c, "SELECT * FROM per_customer").await.is_empty());
    assert!(server.exit_status(Duration::from_millis(10)).is_none(), "the server stopped serving reads");
}

/// Inserts from `next` on until one is refused: its error. Acknowledged ids go to `acknowledged`.
async fn insert_until_refused(
    c: &tokio_postgres::Client,
    next: &mut i64,
    acknowledged: &mut Vec<i64>,
) -> tokio_postgres::Error {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no insert was refused");
        match insert(c, *next).await {
            Ok(()) => acknowledged.push(*next),
            Err(e) => {
                *next += 1;
                return e;
            }
        }
        *next += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_serves_reads_and_resumes_when_space_returns() {
    let Some(mount) = Mount::tmpfs(384) else { return };
    let data: PathBuf = mount.path().join("data");
    let (mut server, c, mut next, mut acknowledged) =
        start_with_orders(&data, &["--checkpoint-interval", "500ms"]).await;

    let filler = Filler::start(mount.path().join("filler"));
    let refused = insert_until_refused(&c, &mut next, &mut acknowledged).await;
    assert_refused_while_reads_go_on(&mut server, &c, refused, "full", &acknowledged).await;
    common::assert_sqlstate(&c, "CREATE TABLE other (x INT)", "53100").await;

    // Space returns: writing resumes without a restart.
    filler.release();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match insert(&c, next).await {
            Ok(()) => {
                acknowledged.push(next);
                next += 1;
                break;
            }
            Err(e) => {
                assert_eq!(e.code().map(|s| s.code()), Some("53100"), "{e:?}");
                assert!(Instant::now() < deadline, "writes did not resume once space returned");
                next += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    insert_acknowledged(&c, &mut next, &mut acknowledged, 100).await;
    assert_exactly(&c, &acknowledged).await;
    // And after a crash.
    drop(c);
    let c = server.sigkill_and_reconnect().await;
    assert_exactly(&c, &acknowledged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_system_turned_read_only_refuses_writes_serves_reads_and_loses_nothing() {
    let Some(mount) = Mount::ext4(256) else { return };
    let data: PathBuf = mount.path().join("data");
    // What the kernel had not written when the file system failed is gone, as after a power
    // loss: writes are on disk when acknowledged only with an fsync each (operations.md).
    let config = mount.dir.path().join("weir.toml");
    std::fs::write(&config, "[storage]\nsync_writes = true\n").unwrap();
    let args = ["--config", config.to_str().unwrap(), "--checkpoint-interval", "500ms"];
    let (mut server, c, mut next, mut acknowledged) = start_with_orders(&data, &args).await;

    // The kernel turns the file system read-only under the running server.
    mount.fail_ext4();
    let refused = insert_until_refused(&c, &mut next, &mut acknowledged).await;
    assert_refused_while_reads_go_on(&mut server, &c, refused, "read-only", &acknowledged).await;

    // The operator stops it, repairs the file system and starts it again: nothing acknowledged
    // is lost, and it takes writes.
    drop(c);
    server.kill();
    mount.repair_ext4();
    server.start_again();
    let c = server.connect().await;
    insert_acknowledged(&c, &mut next, &mut acknowledged, 50).await;
    assert_exactly(&c, &acknowledged).await;
}
