//! The checkpoint protocol's decisions, as pure functions over names, sizes and manifests; the
//! I/O that carries them out is in [`super::checkpointer`] and [`super::recovery`]. Each is
//! unit-tested here.
//!
//! Object layout under the checkpoint root:
//! ```text
//! manifests/<epoch, 20 digits>.json    one per complete checkpoint, written last
//! files/<incarnation>/<name>           SST and blob files: immutable, shared by checkpoints
//! epochs/<epoch, 20 digits>/<name>     the rest of a snapshot (MANIFEST, CURRENT, OPTIONS)
//! ```
//! An incarnation names one life of the local store: it changes whenever the store is replaced
//! by a restored checkpoint, since RocksDB may then number new files as the lost life did.

use std::collections::{BTreeSet, HashMap};

use super::manifest::{FileEntry, Manifest};
use crate::types::Epoch;

/// The key of checkpoint `epoch`'s manifest.
pub fn manifest_key(epoch: Epoch) -> String {
    format!("manifests/{epoch:020}.json")
}

/// The epoch a manifest key names (None for anything else under `manifests/`).
pub fn manifest_epoch(key: &str) -> Option<Epoch> {
    let name = key.rsplit('/').next()?;
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

/// Whether a snapshot file never changes once written, so that one upload serves every
/// checkpoint that holds it (RocksDB's table and blob files).
pub fn is_immutable(name: &str) -> bool {
    name.ends_with(".sst") || name.ends_with(".blob")
}

/// Where file `name` of checkpoint `epoch`, taken by incarnation `incarnation`, goes.
pub fn object_key(incarnation: &str, epoch: Epoch, name: &str) -> String {
    if is_immutable(name) {
        format!("files/{incarnation}/{name}")
    } else {
        format!("epochs/{epoch:020}/{name}")
    }
}

/// A file of a local snapshot: its name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    pub name: String,
    pub size: u64,
}

/// What uploading a snapshot takes: the files to upload (with their object keys) and the
/// entries of files the object store already holds (an immutable file of the same name and
/// size that an earlier checkpoint of this store uploaded).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UploadPlan {
    pub upload: Vec<(LocalFile, String)>,
    pub reuse: Vec<FileEntry>,
}

/// Decides which files of the snapshot of `epoch` to upload, given the entries already in the
/// object store by name (`uploaded`: the files of the last checkpoint this store uploaded or
/// was restored from).
pub fn plan_upload(
    files: &[LocalFile],
    uploaded: &HashMap<String, FileEntry>,
    incarnation: &str,
    epoch: Epoch,
) -> UploadPlan {
    let mut plan = UploadPlan::default();
    for file in files {
        match uploaded.get(&file.name) {
            Some(entry) if is_immutable(&file.name) && entry.size == file.size => plan.reuse.push(entry.clone()),
            _ => plan.upload.push((file.clone(), object_key(incarnation, epoch, &file.name))),
        }
    }
    plan
}

/// What to delete after a new checkpoint: manifests beyond the newest `keep`, then every
/// object that only they named.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub manifests: Vec<Epoch>,
    pub objects: Vec<String>,
}

/// The local snapshots to keep of `local` (epochs): the newest `kept`, and `uploading` (0:
/// none) until its upload ends.
pub fn local_snapshots_kept(local: &[u64], kept: usize, uploading: u64) -> Vec<u64> {
    let mut epochs = local.to_vec();
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    epochs.truncate(kept.max(1));
    if uploading != 0 && local.contains(&uploading) && !epochs.contains(&uploading) {
        epochs.push(uploading);
    }
    epochs
}

/// Keeps the newest `keep` (at least one) of `manifests` and names the rest for deletion,
/// with the objects no kept manifest names. Manifests are deleted before their objects, so a
/// crash between the two leaves only unreferenced objects, never a manifest missing its files.
pub fn retention(manifests: &[Manifest], keep: usize) -> Retention {
    let mut by_epoch: Vec<&Manifest> = manifests.iter().collect();
    by_epoch.sort_by_key(|m| std::cmp::Reverse(m.epoch));
    let keep = keep.max(1);
    let (kept, dropped) = by_epoch.split_at(keep.min(by_epoch.len()));
    let live: BTreeSet<&str> = kept.iter().flat_map(|m| m.files.iter().map(|f| f.object.as_str())).collect();
    let objects: BTreeSet<String> = dropped
        .iter()
        .flat_map(|m| m.files.iter().map(|f| f.object.as_str()))
        .filter(|o| !live.contains(o))
        .map(String::from)
        .collect();
    Retention { manifests: dropped.iter().map(|m| m.epoch).collect(), objects: objects.into_iter().collect() }
}

/// The objects under `files/` and `epochs/` that no manifest names: left by an upload that a
/// crash cut short, or by a life of the store whose checkpoints were all deleted. Only right
/// while no upload runs (the caller holds the upload slot).
pub fn orphans(listed: &[String], manifests: &[Manifest]) -> Vec<String> {
    let named: BTreeSet<&str> = manifests.iter().flat_map(|m| m.files.iter().map(|f| f.object.as_str())).collect();
    listed
        .iter()
        .filter(|o| o.starts_with("files/") || o.starts_with("epochs/"))
        .filter(|o| !named.contains(o.as_str()))
        .cloned()
        .collect()
}

/// The order in which to try checkpoints at recovery: newest first. Epochs of manifests that
/// could not be read are skipped by the caller, which falls back to the next.
pub fn recovery_order(mut epochs: Vec<Epoch>) -> Vec<Epoch> {
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    epochs.dedup();
    epochs
}

/// Whether a downloaded file, of `size` bytes with checksum `crc32`, is the one the manifest
/// names.
pub fn verify(entry: &FileEntry, size: u64, crc32: u32) -> Result<(), String> {
    if size != entry.size {
        return Err(format!("{} has {size} bytes, the manifest says {}", entry.object, entry.size));
    }
    if crc32 != entry.crc32 {
        return Err(format!("{} does not match its checksum", entry.object));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_snapshots_keep_the_newest_and_the_one_uploading() {
        assert_eq!(local_snapshots_kept(&[3, 9, 5, 7], 2, 0), vec![9, 7]);
        assert_eq!(local_snapshots_kept(&[3, 9, 5, 7], 2, 3), vec![9, 7, 3]);
        assert_eq!(local_snapshots_kept(&[3, 9], 2, 9), vec![9, 3]);
        assert_eq!(local_snapshots_kept(&[3], 0, 0), vec![3], "at least one");
        assert_eq!(local_snapshots_kept(&[], 2, 4), Vec::<u64>::new(), "a snapshot that is gone is not kept");
    }
    use crate::checkpoint::manifest::FORMAT;

    fn entry(name: &str, object: &str, size: u64) -> FileEntry {
        FileEntry { name: name.into(), object: object.into(), size, crc32: 0 }
    }

    fn manifest(epoch: Epoch, objects: &[&str]) -> Manifest {
        Manifest {
            format: FORMAT,
            epoch,
            taken_at_micros: 0,
            catalog_version: 0,
            incarnation: "a".into(),
            files: objects.iter().map(|o| entry(o.rsplit('/').next().unwrap(), o, 1)).collect(),
        }
    }

    fn local(name: &str, size: u64) -> LocalFile {
        LocalFile { name: name.into(), size }
    }

    #[test]
    fn manifest_keys_sort_by_epoch_and_parse_back() {
        assert_eq!(manifest_key(7), "manifests/00000000000000000007.json");
        assert!(manifest_key(9) < manifest_key(10));
        assert_eq!(manifest_epoch(&manifest_key(123)), Some(123));
        assert_eq!(manifest_epoch("manifests/x.json"), None);
        assert_eq!(manifest_epoch("manifests/00000000000000000007.json.tmp"), None);
    }

    #[test]
    fn only_new_or_changed_files_are_uploaded() {
        let uploaded: HashMap<String, FileEntry> = [
            ("000010.sst".to_string(), entry("000010.sst", "files/a/000010.sst", 100)),
            ("MANIFEST-000005".to_string(), entry("MANIFEST-000005", "epochs/1/MANIFEST-000005", 50)),
            ("000011.sst".to_string(), entry("000011.sst", "files/a/000011.sst", 7)),
        ]
        .into();
        let files =
            [local("000010.sst", 100), local("000011.sst", 8), local("000012.sst", 5), local("MANIFEST-000005", 50)];
        let plan = plan_upload(&files, &uploaded, "b", 2);
        // The unchanged SST is reused; one whose size differs is not trusted; MANIFEST is per epoch.
        assert_eq!(plan.reuse, vec![entry("000010.sst", "files/a/000010.sst", 100)]);
        let keys: Vec<&str> = plan.upload.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(keys, ["files/b/000011.sst", "files/b/000012.sst", "epochs/00000000000000000002/MANIFEST-000005"]);
    }

    #[test]
    fn retention_keeps_the_newest_and_deletes_only_unshared_objects() {
        let ms = [
            manifest(1, &["files/a/1.sst", "epochs/1/M"]),
            manifest(3, &["files/a/1.sst", "files/a/3.sst", "epochs/3/M"]),
            manifest(2, &["files/a/1.sst", "files/a/2.sst", "epochs/2/M"]),
        ];
        let r = retention(&ms, 2);
        assert_eq!(r.manifests, vec![1]);
        assert_eq!(r.objects, vec!["epochs/1/M".to_string()]);
        let r = retention(&ms, 1);
        assert_eq!(r.manifests, vec![2, 1]);
        assert_eq!(r.objects, ["epochs/1/M", "epochs/2/M", "files/a/2.sst"].map(String::from).to_vec());
        // Never the only checkpoint, whatever `keep` says.
        assert_eq!(retention(&ms[..1], 0), Retention::default());
        assert_eq!(retention(&[], 3), Retention::default());
    }

    #[test]
    fn orphans_are_the_objects_no_manifest_names() {
        let ms = [manifest(5, &["files/old/1.sst", "epochs/00000000000000000005/M"])];
        let listed: Vec<String> = [
            "files/old/1.sst",
            "files/old/2.sst",
            "files/me/9.sst",
            "epochs/00000000000000000005/M",
            "epochs/00000000000000000004/M",
            "epochs/00000000000000000006/M",
            "manifests/00000000000000000005.json",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            orphans(&listed, &ms),
            ["files/old/2.sst", "files/me/9.sst", "epochs/00000000000000000004/M", "epochs/00000000000000000006/M"]
                .map(String::from)
                .to_vec()
        );
    }

    #[test]
    fn recovery_tries_newest_first_and_verification_catches_damage() {
        assert_eq!(recovery_order(vec![3, 9, 1, 9]), vec![9, 3, 1]);
        let bytes = b"hello";
        let good = FileEntry { name: "x".into(), object: "o".into(), size: 5, crc32: crc32fast::hash(bytes) };
        assert!(verify(&good, 5, crc32fast::hash(bytes)).is_ok());
        assert!(verify(&good, 4, crc32fast::hash(b"hell")).unwrap_err().contains("4 bytes"));
        assert!(verify(&good, 5, crc32fast::hash(b"hellO")).unwrap_err().contains("checksum"));
    }
}
