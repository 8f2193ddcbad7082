//! Behaviour of a disk through its public API, with faults injected by `FaultyFs`.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};
use weft_store::{
    format::header_bytes, CapacityState, Disk, FaultyFs, FsOp, Space, StoreError, Thresholds,
    UnitKey, Usage, DIRECT_ALIGN, SEGMENT_BYTES, STAGE_BYTES, USAGE_RESCAN,
};

const SEG: u64 = SEGMENT_BYTES as u64;

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// Flips one byte of a file, at `at` bytes from its start.
fn flip_byte(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

/// Flips a byte of segment `segment` of a unit of `len` bytes, `within` bytes into the segment.
fn corrupt_segment(disk: &Disk, key: UnitKey, len: u64, segment: u64, within: u64) {
    flip_byte(&disk.unit_path(&key), header_bytes(len) + segment * SEG + within);
}

fn tmp_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir.join("tmp")).unwrap().map(|e| e.unwrap().path()).collect()
}

/// Units streamed in pieces of every size across the writer's aligned stages (the header's
/// block, whole stages, a padded tail cut back) read back exactly, with exact file lengths,
/// on a filesystem that takes direct writes (the test's temp dir) and, where the machine has
/// one, on tmpfs (/dev/shm), which refuses O_DIRECT and gets plain files.
#[test]
fn streamed_units_cross_stage_boundaries_exactly() {
    let stage = STAGE_BYTES;
    let lengths = [
        0,
        1,
        DIRECT_ALIGN - 89, // header + data end exactly on the first aligned block
        DIRECT_ALIGN,
        stage - 1,
        stage - 92, // header + data end exactly on the first stage
        stage,
        stage + 1,
        2 * stage + 4099,
    ];
    let temp = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").ok();
    let mut rng = StdRng::seed_from_u64(11);
    for dir in [Some(&temp), shm.as_ref()].into_iter().flatten() {
        let disk = Disk::open(dir.path()).unwrap();
        for (i, len) in lengths.into_iter().enumerate() {
            let key = UnitKey::data(77, i as u32, 0);
            let data = random_bytes(len, 100 + i as u64);
            let mut writer = disk.create(key, len as u64).unwrap();
            let mut at = 0;
            while at < len {
                // One to three pieces of 1 B to 1.5 stages per call.
                let count = rng.gen_range(1..=3);
                let mut pieces = Vec::new();
                for _ in 0..count {
                    let take = rng.gen_range(1..=stage * 3 / 2).min(len - at);
                    if take > 0 {
                        pieces.push(&data[at..at + take]);
                        at += take;
                    }
                }
                writer.write_all_pieces(&pieces).unwrap();
            }
            let info = writer.finish().unwrap();
            let file_bytes = fs::metadata(disk.unit_path(&key)).unwrap().len();
            assert_eq!(file_bytes, header_bytes(len as u64) + len as u64, "{len} B file");
            assert_eq!(info.file_bytes, file_bytes);
            assert_eq!(disk.read(key, 0, len).unwrap(), data, "{len} B in {:?}", dir.path());
        }
        assert_eq!(disk.scrub(|_| {}).unwrap().checked, lengths.len() as u64);
        assert!(disk.failure().is_none());
    }
}

#[test]
fn round_trips_lengths_and_random_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    for (i, len) in [0, 1, 65_535, 65_536, 65_537, 3 * 65_536 + 7].into_iter().enumerate() {
        let key = UnitKey::data(42, i as u32, 1);
        let data = random_bytes(len, i as u64);
        let info = disk.put(key, &data).unwrap();
        assert_eq!(info.len_bytes, len as u64);
        assert_eq!(info.segment_count, (len as u64).div_ceil(SEG));
        assert_eq!(disk.stat(key).unwrap(), info);
        assert_eq!(fs::metadata(disk.unit_path(&key)).unwrap().len(), info.file_bytes);
        assert_eq!(disk.read(key, 0, len).unwrap(), data, "whole unit of {len}");
        for _ in 0..64 {
            let offset = rng.gen_range(0..=len);
            let take = rng.gen_range(0..=len - offset);
            let got = disk.read(key, offset as u64, take).unwrap();
            assert_eq!(got, &data[offset..offset + take], "len {len} range {offset}+{take}");
            let mut buf = vec![0xeeu8; take];
            disk.read_into(key, offset as u64, &mut buf).unwrap();
            assert_eq!(buf, got);
        }
        assert_eq!(disk.read(key, len as u64, 0).unwrap(), Vec::<u8>::new());
        for (offset, take) in [(len as u64, 1), (0, len + 1), (u64::MAX, 1), (len as u64 + 1, 0)] {
            match disk.read(key, offset, take) {
                Err(StoreError::OutOfRange { key: k, unit_bytes, .. }) => {
                    assert_eq!((k, unit_bytes), (key, len as u64))
                }
                other => panic!("range {offset}+{take} of {len}: {other:?}"),
            }
        }
    }
    let parity = UnitKey::parity(42, 0, 1, 1);
    disk.put(parity, b"parity").unwrap();
    assert_eq!(disk.read(parity, 2, 4).unwrap(), b"rity");
    assert!(disk.failure().is_none());
}

#[test]
fn range_reads_verify_only_the_segments_they_touch() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let key = UnitKey::data(9, 3, 2);
    let len = 4 * SEG + 100;
    let data = random_bytes(len as usize, 3);
    disk.put(key, &data).unwrap();
    corrupt_segment(&disk, key, len, 2, 123);
    let ok = |offset: u64, take: u64| {
        let got = disk.read(key, offset, take as usize).unwrap();
        assert_eq!(got, &data[offset as usize..(offset + take) as usize]);
    };
    ok(0, SEG);
    ok(0, 2 * SEG);
    ok(SEG + 5, SEG - 5);
    ok(3 * SEG, SEG + 100);
    ok(4 * SEG + 99, 1);
    for (offset, take) in
        [(2 * SEG, 1), (2 * SEG - 1, 2), (0, len), (3 * SEG - 1, 1), (SEG, 3 * SEG)]
    {
        match disk.read(key, offset, take as usize) {
            Err(error @ StoreError::Corrupt { segment: 2, .. }) => {
                let text = error.to_string();
                assert!(text.contains(&key.to_string()), "{text}");
                assert!(text.contains(&dir.path().display().to_string()), "{text}");
                assert!(text.contains("segment 2"), "{text}");
            }
            other => panic!("range {offset}+{take}: {other:?}"),
        }
    }
    // A corrupt segment is an operating error, not a disk failure.
    assert!(disk.failure().is_none());
    ok(0, SEG);
}

fn expect_bad_header(disk: &Disk, key: UnitKey, what: &str) {
    match disk.read(key, 0, 1) {
        Err(StoreError::BadHeader { key: k, reason, .. }) => assert_eq!(k, key, "{what}: {reason}"),
        other => panic!("{what}: read gave {other:?}"),
    }
    assert!(matches!(disk.stat(key), Err(StoreError::BadHeader { .. })), "{what}: stat");
}

#[test]
fn header_corruption_is_bad_header() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let len = 2 * SEG + 1;
    // Magic, version, unit length, generation, checksum table, header checksum.
    for (i, at) in [0u64, 8, 16, 56, 72, header_bytes(len) - 1].into_iter().enumerate() {
        let key = UnitKey::data(1, i as u32, 0);
        disk.put(key, &random_bytes(len as usize, i as u64)).unwrap();
        flip_byte(&disk.unit_path(&key), at);
        expect_bad_header(&disk, key, &format!("flip at {at}"));
    }
    // A valid unit file under another unit's name.
    let (real, other) = (UnitKey::data(2, 0, 0), UnitKey::data(2, 1, 0));
    disk.put(real, b"hello").unwrap();
    fs::copy(disk.unit_path(&real), disk.unit_path(&other)).unwrap();
    expect_bad_header(&disk, other, "misplaced file");
    // Too short for any header.
    let tiny = UnitKey::data(3, 0, 0);
    fs::write(disk.unit_path(&tiny), b"WEFTUNIT").unwrap();
    expect_bad_header(&disk, tiny, "short file");
    // Truncated data.
    let cut = UnitKey::data(4, 0, 0);
    disk.put(cut, &random_bytes(len as usize, 4)).unwrap();
    let file = fs::OpenOptions::new().write(true).open(disk.unit_path(&cut)).unwrap();
    file.set_len(header_bytes(len) + len - 1).unwrap();
    assert!(matches!(
        disk.read(cut, 0, 1),
        Err(StoreError::BadFileLength { expected_bytes, actual_bytes, .. })
            if expected_bytes == actual_bytes + 1
    ));
    assert!(disk.failure().is_none());
}

#[test]
fn scrub_finds_exactly_the_corrupt_segments() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let len = 4 * SEG + 3;
    let keys: Vec<UnitKey> = (0..6).map(|i| UnitKey::data(100 + i, 0, 1)).collect();
    for (i, key) in keys.iter().enumerate() {
        disk.put(*key, &random_bytes(len as usize, i as u64)).unwrap();
    }
    let clean = disk.scrub(|_| {}).unwrap();
    assert_eq!((clean.checked, clean.corrupt.len(), clean.unreadable.len()), (6, 0, 0));
    assert_eq!(clean.bytes_checked, 6 * len);

    corrupt_segment(&disk, keys[1], len, 0, 0);
    corrupt_segment(&disk, keys[3], len, 1, SEG - 1);
    corrupt_segment(&disk, keys[3], len, 4, 2); // the short last segment
    flip_byte(&disk.unit_path(&keys[5]), 0);
    let stray = disk.unit_path(&keys[0]).with_file_name("stray.txt");
    fs::write(&stray, b"not a unit").unwrap();

    let mut seen = Vec::new();
    let report = disk.scrub(|p| seen.push((p.unit, p.units_checked, p.units_total))).unwrap();
    let mut expected = vec![(keys[1], 0), (keys[3], 1), (keys[3], 4)];
    expected.sort();
    assert_eq!(report.corrupt, expected);
    assert_eq!(report.checked, 5);
    assert_eq!(report.unreadable.len(), 1);
    assert_eq!(report.unreadable[0].0, keys[5]);
    assert!(matches!(report.unreadable[0].1, StoreError::BadHeader { .. }));
    assert_eq!(report.unrecognised, vec![stray]);
    assert_eq!(seen.len(), 6);
    assert!(seen.iter().all(|&(_, _, total)| total == 6));
    assert_eq!(disk.list().unwrap(), keys, "list skips the stray file");
}

#[test]
fn units_are_immutable_and_deletable() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let key = UnitKey::data(5, 0, 1);
    disk.put(key, b"first").unwrap();
    assert!(
        matches!(disk.put(key, b"second"), Err(StoreError::AlreadyExists { key: k, .. }) if k == key)
    );
    assert!(matches!(disk.create(key, 3), Err(StoreError::AlreadyExists { .. })));
    assert_eq!(disk.read(key, 0, 5).unwrap(), b"first");
    // Rewrite = new generation, alongside the old one until that is deleted.
    let newer = key.with_generation(2);
    disk.put(newer, b"second").unwrap();
    assert_eq!(disk.list().unwrap(), vec![key, newer]);
    disk.delete(key).unwrap();
    assert!(matches!(disk.read(key, 0, 1), Err(StoreError::NotFound { key: k, .. }) if k == key));
    assert!(matches!(disk.stat(key), Err(StoreError::NotFound { .. })));
    assert!(matches!(disk.delete(key), Err(StoreError::NotFound { .. })));
    assert_eq!(disk.list().unwrap(), vec![newer]);
    assert_eq!(disk.read(newer, 0, 6).unwrap(), b"second");
    assert!(tmp_files(dir.path()).is_empty());
    assert!(disk.failure().is_none());
}

#[test]
fn streaming_writer_makes_the_same_file_as_put() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (Disk::open(dir_a.path()).unwrap(), Disk::open(dir_b.path()).unwrap());
    let mut rng = StdRng::seed_from_u64(11);
    for (i, len) in [0usize, 1, 65_536, 3 * 65_536 + 7, 5 * 65_536 - 1].into_iter().enumerate() {
        let key = UnitKey::parity(77, i as u32, 2, 3);
        let data = random_bytes(len, 50 + i as u64);
        let put = a.put(key, &data).unwrap();
        let mut writer = b.create(key, len as u64).unwrap();
        let mut at = 0;
        while at < len {
            let take = rng.gen_range(0..=(len - at).min(100_000));
            writer.write_all(&data[at..at + take]).unwrap();
            at += take;
        }
        writer.write_all(&[]).unwrap();
        assert_same_unit(writer, put, (&a, &b), key, &data);
    }
}

/// `writer` (on disk `b`) finishes as `put` did on disk `a`: the same info, the same file
/// byte for byte, reading back `data`.
fn assert_same_unit(
    writer: weft_store::UnitWriter,
    put: weft_store::UnitInfo,
    (a, b): (&Disk, &Disk),
    key: UnitKey,
    data: &[u8],
) {
    assert_eq!(writer.finish().unwrap(), put);
    let len = data.len();
    assert_eq!(
        fs::read(a.unit_path(&key)).unwrap(),
        fs::read(b.unit_path(&key)).unwrap(),
        "len {len}"
    );
    assert_eq!(b.read(key, 0, len).unwrap(), data);
}

/// Vectored writes (pwritev): pieces of any sizes, empty ones among them, and more pieces
/// than one pwritev(2) takes (IOV_MAX), make the same file as one put; a batch that would
/// pass the unit's length is refused whole.
#[test]
fn pieces_written_at_once_make_the_same_file_as_put() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (Disk::open(dir_a.path()).unwrap(), Disk::open(dir_b.path()).unwrap());
    let mut rng = StdRng::seed_from_u64(12);
    for (i, len) in [1usize, 65_536, 3 * 65_536 + 7, 2_000_000].into_iter().enumerate() {
        let key = UnitKey::parity(78, i as u32, 2, 3);
        let data = random_bytes(len, 60 + i as u64);
        let put = a.put(key, &data).unwrap();
        let mut writer = b.create(key, len as u64).unwrap();
        let mut at = 0;
        while at < len {
            // Up to 1500 pieces of up to 4 KiB (a third of them empty) per call.
            let mut pieces: Vec<&[u8]> = Vec::new();
            for _ in 0..rng.gen_range(1..1500) {
                let take = if rng.gen_range(0..3) == 0 { 0 } else { rng.gen_range(1..4096) };
                let take = take.min(len - at);
                pieces.push(&data[at..at + take]);
                at += take;
            }
            writer.write_all_pieces(&pieces).unwrap();
        }
        let too_much: [&[u8]; 2] = [&data[..0], &[7u8]];
        assert!(matches!(
            writer.write_all_pieces(&too_much),
            Err(StoreError::LengthMismatch { .. })
        ));
        assert_same_unit(writer, put, (&a, &b), key, &data);
    }
}

/// A unit opened once answers every range as `Disk::read` does, stats as `Disk::stat`, and
/// still verifies each read: rot found after the open is `Corrupt`.
#[test]
fn an_opened_reader_reads_and_verifies_as_the_disk_does() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let key = UnitKey::parity(79, 0, 2, 3);
    let len = 5 * 65_536 + 123;
    let data = random_bytes(len, 70);
    disk.put(key, &data).unwrap();
    let reader = disk.open_reader(key).unwrap();
    assert_eq!(reader.info(), disk.stat(key).unwrap());
    let mut rng = StdRng::seed_from_u64(13);
    for _ in 0..50 {
        let offset = rng.gen_range(0..len);
        let take = rng.gen_range(0..=len - offset);
        assert_eq!(reader.read(offset as u64, take).unwrap(), data[offset..offset + take]);
        assert_eq!(disk.read(key, offset as u64, take).unwrap(), data[offset..offset + take]);
    }
    assert!(matches!(reader.read(len as u64 - 10, 11), Err(StoreError::OutOfRange { .. })));
    corrupt_segment(&disk, key, len as u64, 2, 17);
    assert!(matches!(reader.read(2 * SEG, 10), Err(StoreError::Corrupt { segment: 2, .. })));
    assert_eq!(reader.read(0, 1000).unwrap(), data[..1000], "other segments still read");
}

#[test]
fn writer_length_mismatch_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let key = UnitKey::data(6, 0, 0);
    let mut writer = disk.create(key, 10).unwrap();
    writer.write_all(b"12345").unwrap();
    assert!(matches!(
        writer.write_all(b"678901"),
        Err(StoreError::LengthMismatch { expected_bytes: 10, written_bytes: 11, .. })
    ));
    assert!(matches!(
        writer.finish(),
        Err(StoreError::LengthMismatch { expected_bytes: 10, written_bytes: 5, .. })
    ));
    assert!(matches!(disk.read(key, 0, 0), Err(StoreError::NotFound { .. })));
    assert!(tmp_files(dir.path()).is_empty(), "an abandoned writer removes its temp file");
    let dropped = disk.create(key, 4).unwrap();
    drop(dropped);
    assert!(tmp_files(dir.path()).is_empty());
    assert!(disk.failure().is_none());
    disk.put(key, b"0123456789").unwrap();
}

#[test]
fn reopen_lists_the_same_units_and_cleans_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Vec::new();
    let mut expected_bytes = 0;
    {
        let disk = Disk::open(dir.path()).unwrap();
        assert_eq!(disk.removed_temp_files(), 0);
        for i in 0..40u32 {
            let key = if i % 3 == 0 {
                UnitKey::parity(i.into(), i, 1, 0)
            } else {
                UnitKey::data(1, i, 0)
            };
            expected_bytes +=
                disk.put(key, &random_bytes(i as usize * 1000, i.into())).unwrap().file_bytes;
            keys.push(key);
        }
        keys.sort();
        assert_eq!(disk.list().unwrap(), keys);
        let _abandoned = disk.create(UnitKey::data(2, 0, 0), 100).unwrap();
        std::mem::forget(_abandoned); // as if the process died mid-write
    }
    fs::write(dir.path().join("tmp").join("junk.tmp"), b"x").unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    assert_eq!(disk.removed_temp_files(), 2);
    assert!(tmp_files(dir.path()).is_empty());
    assert_eq!(disk.list().unwrap(), keys);
    let usage = disk.usage().unwrap();
    assert_eq!((usage.units, usage.file_bytes), (40, expected_bytes));
    for (i, key) in keys.iter().enumerate() {
        let len = disk.stat(*key).unwrap().len_bytes as usize;
        disk.read(*key, 0, len).unwrap_or_else(|e| panic!("{i}: {e}"));
    }
}

#[test]
fn a_detailed_listing_gives_each_units_file_length_and_write_time() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let keys = [UnitKey::data(3, 1, 0), UnitKey::parity(3, 0, 1, 2), UnitKey::data(1, 0, 0)];
    for (i, key) in keys.iter().enumerate() {
        disk.put(*key, &random_bytes(i * 70_000, i as u64)).unwrap();
    }
    let listed = disk.list_detailed().unwrap();
    assert_eq!(listed.iter().map(|u| u.key).collect::<Vec<_>>(), disk.list().unwrap());
    for unit in &listed {
        assert_eq!(unit.file_bytes, fs::metadata(disk.unit_path(&unit.key)).unwrap().len());
        assert!(unit.modified >= before, "{unit:?}");
    }
    let total: u64 = listed.iter().map(|u| u.file_bytes).sum();
    assert_eq!(disk.usage().unwrap().file_bytes, total);
    disk.delete(keys[0]).unwrap();
    assert_eq!(disk.list_detailed().unwrap().len(), 2);
}

#[test]
fn usage_is_counted_by_finish_and_delete_and_rescanned_for_what_changed_behind_its_back() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    assert_eq!(disk.usage().unwrap(), Usage { units: 0, file_bytes: 0 });
    let a = disk.put(UnitKey::data(1, 0, 0), &random_bytes(70_000, 1)).unwrap();
    let b = disk.put(UnitKey::data(1, 1, 0), &random_bytes(5, 2)).unwrap();
    let both = Usage { units: 2, file_bytes: a.file_bytes + b.file_bytes };
    assert_eq!(disk.usage().unwrap(), both);
    disk.delete(a.key).unwrap();
    assert_eq!(disk.usage().unwrap(), Usage { units: 1, file_bytes: b.file_bytes });
    // A file removed by hand is not seen until the next scan...
    fs::remove_file(disk.unit_path(&b.key)).unwrap();
    assert_eq!(disk.usage().unwrap(), Usage { units: 1, file_bytes: b.file_bytes });
    // ...which a shorter rescan interval brings at once; counting goes on from it.
    disk.set_usage_rescan(std::time::Duration::ZERO);
    assert_eq!(disk.usage().unwrap(), Usage { units: 0, file_bytes: 0 });
    disk.set_usage_rescan(USAGE_RESCAN);
    let c = disk.put(UnitKey::data(2, 0, 0), &random_bytes(1000, 3)).unwrap();
    assert_eq!(disk.usage().unwrap(), Usage { units: 1, file_bytes: c.file_bytes });
    assert_eq!(c.file_bytes, fs::metadata(disk.unit_path(&c.key)).unwrap().len());
}

#[test]
fn units_finished_and_deleted_while_usage_rescans_count_once() {
    // Heartbeats rescan while puts and deletes go on: a unit the listing saw and that also
    // finished during it must count once, one deleted during it not at all.
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::open(dir.path()).unwrap();
    for i in 0..150u32 {
        disk.put(UnitKey::data(1, i, 0), &random_bytes(100 + i as usize, i.into())).unwrap();
    }
    disk.set_usage_rescan(std::time::Duration::ZERO);
    let done = std::sync::atomic::AtomicBool::new(false);
    let rescans = std::thread::scope(|scope| {
        let scanning = scope.spawn(|| {
            let mut rescans = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                disk.usage().unwrap();
                rescans += 1;
            }
            rescans
        });
        for i in 150..450u32 {
            disk.put(UnitKey::data(1, i, 0), &random_bytes(100 + i as usize, i.into())).unwrap();
            if i % 3 == 0 {
                disk.delete(UnitKey::data(1, i - 150, 0)).unwrap();
            }
        }
        // Stop counting by rescans: from here the count is the last rescan's plus what
        // finished and was deleted since.
        disk.set_usage_rescan(USAGE_RESCAN);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        scanning.join().unwrap()
    });
    assert!(rescans > 1, "the puts ran beside rescans ({rescans})");
    let counted = disk.usage().unwrap();
    let listed = disk.list_detailed().unwrap();
    let on_disk =
        Usage { units: listed.len() as u64, file_bytes: listed.iter().map(|u| u.file_bytes).sum() };
    assert_eq!(counted, on_disk);
    assert_eq!(on_disk.units, 450 - 100);
}

#[test]
fn open_refuses_foreign_directories() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("precious.txt"), b"user data").unwrap();
    assert!(matches!(Disk::open(dir.path()), Err(StoreError::UnsupportedDisk { .. })));
    assert!(!dir.path().join("units").exists(), "nothing written into a foreign directory");

    let other = tempfile::tempdir().unwrap();
    drop(Disk::open(other.path()).unwrap());
    fs::write(other.path().join("weft-disk"), b"weft-store disk layout 99\n").unwrap();
    assert!(matches!(Disk::open(other.path()), Err(StoreError::UnsupportedDisk { .. })));
}

/// Every error a call on a failed disk can give.
fn assert_refuses_work(disk: &Disk, known: UnitKey) {
    let failed = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::DiskFailed { dir, cause }) => {
            assert_eq!(dir, disk.dir(), "{what}");
            assert!(cause.contains("injected fault"), "{what}: {cause}");
        }
        other => panic!("{what} on a failed disk gave {other:?}"),
    };
    failed(disk.put(UnitKey::data(999, 0, 0), b"x").map(drop), "put");
    failed(disk.create(UnitKey::data(999, 0, 0), 1).map(drop), "create");
    failed(disk.read(known, 0, 1).map(drop), "read");
    failed(disk.stat(known).map(drop), "stat");
    failed(disk.delete(known), "delete");
    failed(disk.list().map(drop), "list");
    failed(disk.list_detailed().map(drop), "list_detailed");
    failed(disk.usage().map(drop), "usage");
    failed(disk.scrub(|_| {}).map(drop), "scrub");
}

#[test]
fn a_put_failing_at_any_step_leaves_no_partial_unit_and_fails_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let old: Vec<(UnitKey, Vec<u8>)> = (0..3)
        .map(|i| (UnitKey::data(1, i, 0), random_bytes(70_000 * i as usize, i.into())))
        .collect();
    {
        let disk = Disk::open(dir.path()).unwrap();
        for (key, data) in &old {
            disk.put(*key, data).unwrap();
        }
    }
    let new = UnitKey::data(2, 0, 0);
    let data = random_bytes(2 * SEG as usize + 9, 99);
    let mut failed_ops = Vec::new();
    for n in 1.. {
        assert!(n < 50, "put never succeeded");
        let faulty = FaultyFs::new();
        let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
        faulty.clear_log();
        faulty.fail_nth(n);
        let result = disk.put(new, &data);
        let Some((op, _)) = faulty.injected() else {
            // Every step passed: the put must have succeeded, after failing at every step.
            result.unwrap();
            assert_eq!(disk.read(new, 0, data.len()).unwrap(), data);
            break;
        };
        failed_ops.push(op);
        match &result {
            Err(StoreError::Io { key: Some(key), source, .. }) => {
                assert_eq!(*key, new);
                assert!(source.to_string().contains("injected fault"));
            }
            other => panic!("step {n} ({op:?}): put gave {other:?}"),
        }
        assert_eq!(faulty.log().len() as u64, n, "no mutation after the failed {op:?}");
        assert!(disk.failure().is_some());
        assert_refuses_work(&disk, old[1].0);
        assert_eq!(faulty.log().len() as u64, n, "a failed disk makes no mutation");
        drop(disk);

        let leftovers = tmp_files(dir.path()).len() as u64;
        let disk = Disk::open(dir.path()).unwrap();
        assert_eq!(disk.removed_temp_files(), leftovers);
        assert!(tmp_files(dir.path()).is_empty(), "step {n}: stale temp files remain");
        match disk.read(new, 0, data.len()) {
            Err(StoreError::NotFound { .. }) => {}
            // Past the rename the unit is complete; only its directory entry may not be durable.
            Ok(read) if op == FsOp::SyncDir => assert_eq!(read, data),
            other => panic!("step {n} ({op:?}): after reopen the new unit reads as {other:?}"),
        }
        for (key, bytes) in &old {
            assert_eq!(&disk.read(*key, 0, bytes.len()).unwrap(), bytes, "step {n}");
        }
        let _ = disk.delete(new);
        assert_eq!(disk.list().unwrap(), old.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    }
    assert_eq!(
        failed_ops,
        [FsOp::Create, FsOp::Write, FsOp::Write, FsOp::Sync, FsOp::Rename, FsOp::SyncDir],
        "each step of a put was failed once"
    );
}

#[test]
fn failed_delete_and_failed_stream_write_are_sticky() {
    let dir = tempfile::tempdir().unwrap();
    let key = UnitKey::data(3, 0, 0);
    for (n, expected_op) in [(1, FsOp::Remove), (2, FsOp::SyncDir)] {
        {
            let disk = Disk::open(dir.path()).unwrap();
            let _ = disk.put(key, b"doomed");
        }
        let faulty = FaultyFs::new();
        let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
        faulty.fail_nth(n);
        assert!(matches!(disk.delete(key), Err(StoreError::Io { .. })));
        assert_eq!(faulty.injected().unwrap().0, expected_op);
        assert!(matches!(disk.read(key, 0, 1), Err(StoreError::DiskFailed { .. })));
        // Clones share the failed state.
        assert!(matches!(disk.clone().list(), Err(StoreError::DiskFailed { .. })));
    }

    let faulty = FaultyFs::new();
    let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
    // A unit of three stages: the writer writes a stage whenever one fills.
    let streamed = UnitKey::data(4, 0, 0);
    let stage = STAGE_BYTES as u64;
    let mut writer = disk.create(streamed, 3 * stage).unwrap();
    writer.write_all(&random_bytes(stage as usize, 1)).unwrap();
    faulty.clear_log();
    faulty.fail_nth(1);
    assert!(matches!(
        writer.write_all(&random_bytes(stage as usize, 2)),
        Err(StoreError::Io { .. })
    ));
    assert!(matches!(writer.write_all(&[1]), Err(StoreError::DiskFailed { .. })));
    assert!(matches!(writer.finish(), Err(StoreError::DiskFailed { .. })));
    assert_eq!(faulty.log().len(), 1, "dropping the writer on a failed disk writes nothing");
    drop(disk);
    assert_eq!(tmp_files(dir.path()).len(), 1, "the torn temp file is left for open");
    let disk = Disk::open(dir.path()).unwrap();
    assert_eq!(disk.removed_temp_files(), 1);
    assert!(matches!(disk.stat(streamed), Err(StoreError::NotFound { .. })));
}

/// Random operations against a reference model, through a filesystem that fails now and then.
/// After a failure the disk is reopened; only the unit of the failed operation may be in either
/// state (old or new), and if present it must be whole.
#[test]
fn model_based_random_operations_with_faults() {
    use std::collections::BTreeMap;
    let mut reopens = 0;
    for seed in 0..6u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model: BTreeMap<UnitKey, Vec<u8>> = BTreeMap::new();
        let mut faulty = FaultyFs::new();
        let mut disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
        for step in 0..150 {
            let context = format!("seed {seed} step {step}");
            if rng.gen_bool(0.1) {
                faulty.fail_nth(rng.gen_range(1..6));
            }
            let key = UnitKey::data(rng.gen_range(0..4), rng.gen_range(0..3), 0);
            // (key, content if the operation takes effect) for the operation in flight.
            let (attempted, outcome): (Option<Vec<u8>>, Result<(), StoreError>) = match rng
                .gen_range(0..4)
            {
                0 | 1 => {
                    let len = rng.gen_range(0..3 * SEG as usize);
                    let data = random_bytes(len, rng.gen());
                    let result = if rng.gen_bool(0.5) {
                        disk.put(key, &data).map(drop)
                    } else {
                        disk.create(key, len as u64).and_then(|mut w| {
                            for piece in data.chunks(rng.gen_range(1..100_000)) {
                                w.write_all(piece)?;
                            }
                            w.finish().map(drop)
                        })
                    };
                    match &result {
                        Ok(()) => assert!(model.insert(key, data.clone()).is_none(), "{context}"),
                        Err(StoreError::AlreadyExists { .. }) => {
                            assert!(model.contains_key(&key), "{context}")
                        }
                        _ => {}
                    }
                    (Some(data), result)
                }
                2 => {
                    let result = disk.delete(key);
                    match &result {
                        Ok(()) => assert!(model.remove(&key).is_some(), "{context}"),
                        Err(StoreError::NotFound { .. }) => {
                            assert!(!model.contains_key(&key), "{context}")
                        }
                        _ => {}
                    }
                    (None, result)
                }
                _ => {
                    let result = match model.get(&key) {
                        Some(data) => {
                            let offset = rng.gen_range(0..=data.len());
                            let take = rng.gen_range(0..=data.len() - offset);
                            disk.read(key, offset as u64, take).map(|got| {
                                assert_eq!(got, &data[offset..offset + take], "{context}")
                            })
                        }
                        None => match disk.read(key, 0, 0) {
                            Err(StoreError::NotFound { .. }) => Ok(()),
                            other => panic!("{context}: absent unit read as {other:?}"),
                        },
                    };
                    result.unwrap();
                    continue;
                }
            };
            let Err(error) = outcome else { continue };
            if matches!(error, StoreError::AlreadyExists { .. } | StoreError::NotFound { .. }) {
                continue;
            }
            assert!(matches!(error, StoreError::Io { .. }), "{context}: {error}");
            assert!(disk.failure().is_some(), "{context}");
            drop(disk);
            reopens += 1;
            faulty = FaultyFs::new();
            disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
            match (disk.stat(key), attempted) {
                (Err(StoreError::NotFound { .. }), _) => {
                    model.remove(&key);
                }
                (Ok(info), attempted) => {
                    let got = disk.read(key, 0, info.len_bytes as usize).unwrap();
                    let was = model.get(&key);
                    assert!(
                        Some(&got) == was || Some(&got) == attempted.as_ref(),
                        "{context}: unit after a failed operation is neither old nor new"
                    );
                    model.insert(key, got);
                }
                (Err(other), _) => panic!("{context}: {other}"),
            }
        }
        faulty.disarm();
        assert_eq!(disk.list().unwrap(), model.keys().copied().collect::<Vec<_>>(), "seed {seed}");
        for (key, data) in &model {
            assert_eq!(&disk.read(*key, 0, data.len()).unwrap(), data, "seed {seed}");
        }
        let report = disk.scrub(|_| {}).unwrap();
        assert!(report.corrupt.is_empty() && report.unreadable.is_empty(), "seed {seed}");
    }
    assert!(reopens >= 10, "only {reopens} faults hit an operation");
    eprintln!("{reopens} injected faults, each followed by a reopen");
}

/// A filesystem that is exactly `used_percent` full, with 1.6 GiB usable.
fn space(used_percent: u64) -> Space {
    let usable = 100u64 << 24;
    let used_bytes = usable * used_percent / 100;
    Space {
        free_bytes: usable - used_bytes,
        total_bytes: usable + usable / 20,
        used_bytes,
        free_inodes: Some(1000),
    }
}

#[test]
fn no_space_at_any_step_of_a_put_is_full_not_failed_and_leaves_the_disk_readable() {
    let dir = tempfile::tempdir().unwrap();
    let old = UnitKey::data(1, 0, 0);
    let old_data = random_bytes(3 * SEG as usize + 5, 1);
    Disk::open(dir.path()).unwrap().put(old, &old_data).unwrap();
    let new = UnitKey::data(2, 0, 0);
    let data = random_bytes(2 * SEG as usize + 9, 2);
    let mut full_ops = Vec::new();
    // Steps of a put: create, data write, header write, fsync, link; the final directory
    // fsync comes after the unit is visible and stays a failure (checked by the test above).
    for (n, errno) in (1..=5).zip([libc::ENOSPC, libc::EDQUOT].into_iter().cycle()) {
        let faulty = FaultyFs::new();
        let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
        faulty.clear_log();
        faulty.fail_nth_with(n, errno);
        let result = disk.put(new, &data);
        let (op, _) = faulty.injected().expect("the armed call was made");
        full_ops.push(op);
        match &result {
            Err(StoreError::Full { dir: at, key, reason }) => {
                assert_eq!((at.as_path(), *key), (dir.path(), new), "step {n} ({op:?})");
                let expected = std::io::Error::from_raw_os_error(errno).to_string();
                assert!(reason.contains(&expected), "step {n} ({op:?}): {reason}");
                assert!(result.as_ref().unwrap_err().to_string().contains("disk full"));
            }
            other => panic!("step {n} ({op:?}): put gave {other:?}"),
        }
        assert_eq!(disk.failure(), None, "step {n} ({op:?}): no space is not a failure");
        assert!(tmp_files(dir.path()).is_empty(), "step {n} ({op:?}): the temp file is removed");
        assert!(matches!(disk.stat(new), Err(StoreError::NotFound { .. })), "step {n}");
        // Read-only, not failed: reads, listings and scrubs work; new units are refused
        // without touching the disk.
        assert_eq!(disk.read(old, 0, old_data.len()).unwrap(), old_data, "step {n}");
        assert_eq!(disk.list().unwrap(), [old]);
        assert_eq!(disk.scrub(|_| {}).unwrap().checked, 1);
        let capacity = disk.capacity();
        assert_eq!(capacity.state, CapacityState::Full, "step {n}: {capacity:?}");
        assert!(capacity.free_bytes.is_some() && capacity.total_bytes.is_some());
        faulty.clear_log();
        match disk.put(UnitKey::data(3, 0, 0), b"more") {
            Err(StoreError::Full { .. }) => {}
            other => panic!("step {n}: a put on a full disk gave {other:?}"),
        }
        assert!(faulty.log().is_empty(), "a full disk refuses a put before any write");
        assert!(matches!(disk.delete(UnitKey::data(4, 0, 0)), Err(StoreError::NotFound { .. })));
        drop(disk);
    }
    assert_eq!(full_ops, [FsOp::Create, FsOp::Write, FsOp::Write, FsOp::Sync, FsOp::Rename]);

    // A fresh open trusts the filesystem again; deletes work on a full disk.
    let faulty = FaultyFs::new();
    let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
    disk.put(new, &data).unwrap();
    faulty.fail_nth_with(1, libc::ENOSPC);
    assert!(matches!(disk.put(UnitKey::data(5, 0, 0), b"y"), Err(StoreError::Full { .. })));
    disk.delete(new).unwrap();
    assert_eq!(disk.list().unwrap(), [old]);
    assert_eq!(disk.failure(), None);

    // A streamed write that runs out of space midway answers Full from then on.
    let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
    let stage = STAGE_BYTES as u64;
    let mut writer = disk.create(new, 3 * stage).unwrap();
    writer.write_all(&random_bytes(stage as usize, 3)).unwrap();
    faulty.fail_nth_with(1, libc::ENOSPC);
    assert!(matches!(
        writer.write_all(&random_bytes(stage as usize, 4)),
        Err(StoreError::Full { .. })
    ));
    assert!(tmp_files(dir.path()).is_empty(), "the temp file went at once");
    assert!(matches!(writer.write_all(&[1]), Err(StoreError::Full { .. })));
    assert!(matches!(writer.finish(), Err(StoreError::Full { .. })));
    assert_eq!(disk.failure(), None);
    assert_eq!(disk.read(old, 0, old_data.len()).unwrap(), old_data);
}

#[test]
fn capacity_follows_the_nearfull_and_full_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyFs::new();
    let disk = Disk::open_with(dir.path(), Arc::new(faulty.clone())).unwrap();
    assert_eq!(disk.thresholds(), Thresholds::new(0.85, 0.95).unwrap(), "Ceph's defaults");
    let state = |percent| {
        faulty.set_space(Some(space(percent)));
        let capacity = disk.capacity();
        assert_eq!(capacity.free_bytes, Some(space(percent).free_bytes));
        assert_eq!(capacity.total_bytes, Some(space(percent).total_bytes));
        capacity
    };
    assert_eq!(state(50).state, CapacityState::Ok);
    assert_eq!(state(84).state, CapacityState::Ok);
    let nearfull = state(85);
    assert_eq!(nearfull.state, CapacityState::Nearfull);
    assert!(nearfull.reason.unwrap().contains("nearfull ratio 0.85"));
    // Nearfull is still writable.
    disk.put(UnitKey::data(1, 0, 0), b"a").unwrap();
    let full = state(96);
    assert_eq!(full.state, CapacityState::Full);
    assert!(full.reason.as_deref().unwrap().contains("96.0% used"), "{full:?}");
    match disk.put(UnitKey::data(2, 0, 0), b"b") {
        Err(StoreError::Full { reason, .. }) => assert!(reason.contains("full ratio 0.95")),
        other => panic!("a put at 96% gave {other:?}"),
    }
    assert_eq!(disk.read(UnitKey::data(1, 0, 0), 0, 1).unwrap(), b"a");
    // Space freed: writable again (no ENOSPC was seen, so nothing holds it full).
    assert_eq!(state(60).state, CapacityState::Ok);
    disk.put(UnitKey::data(2, 0, 0), b"b").unwrap();
    // No free inode is full whatever the bytes say.
    faulty.set_space(Some(Space { free_inodes: Some(0), ..space(10) }));
    assert_eq!(disk.capacity().state, CapacityState::Full);
    // A hit ENOSPC holds the disk full even where statvfs sees room (quotas, inodes).
    faulty.set_space(Some(space(10)));
    faulty.fail_nth_with(1, libc::ENOSPC);
    assert!(matches!(disk.put(UnitKey::data(3, 0, 0), b"c"), Err(StoreError::Full { .. })));
    let held = disk.capacity();
    assert_eq!(held.state, CapacityState::Full);
    assert!(held
        .reason
        .unwrap()
        .contains(&std::io::Error::from_raw_os_error(libc::ENOSPC).to_string()));

    // Thresholds are configurable, and checked.
    disk.set_thresholds(Thresholds::new(0.0, 0.0001).unwrap());
    let fresh = tempfile::tempdir().unwrap();
    let real = Disk::open(fresh.path()).unwrap();
    real.set_thresholds(Thresholds::new(0.0, 0.0001).unwrap());
    let capacity = real.capacity();
    assert_eq!(capacity.state, CapacityState::Full, "any real filesystem uses something");
    assert!(capacity.total_bytes.unwrap() > 0);
    assert!(matches!(real.put(UnitKey::data(1, 0, 0), b"z"), Err(StoreError::Full { .. })));
    for (nearfull, full) in [(0.9, 0.8), (-0.1, 0.5), (0.5, 1.5), (f64::NAN, 0.9)] {
        let error = Thresholds::new(nearfull, full).unwrap_err();
        assert!(error.contains("ratio"), "{error}");
    }
}

/// Writes `data` as a writer in another process would through `shared`: the bytes past the
/// head in aligned blocks (zero-padded at the end) from aligned memory; returns the head.
fn write_shared(shared: &weft_store::SharedWrite, data: &[u8]) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let align = DIRECT_ALIGN;
    let head = shared.head_bytes as usize;
    // SAFETY: the descriptor is open while its writer lives; ManuallyDrop leaves it open.
    let file = std::mem::ManuallyDrop::new(unsafe {
        <fs::File as std::os::fd::FromRawFd>::from_raw_fd(shared.fd)
    });
    let mut at = head;
    let mut stage: Vec<u8> = Vec::with_capacity(3 * align + align);
    let start = stage.as_ptr().align_offset(align);
    while at < data.len() {
        let take = (data.len() - at).min(3 * align);
        stage.clear();
        stage.resize(start, 0);
        stage.extend_from_slice(&data[at..at + take]);
        stage.resize(start + take.next_multiple_of(align), 0);
        let offset = shared.data_offset + at as u64;
        assert!(offset.is_multiple_of(align as u64), "writes start on aligned blocks");
        file.write_all_at(&stage[start..], offset).unwrap();
        at += take;
    }
    data[..head].to_vec()
}

fn crcs(data: &[u8]) -> Vec<u32> {
    data.chunks(SEG as usize).map(crc32c::crc32c).collect()
}

/// A unit written by another process through the temp file's descriptor (the node's local
/// writes) finishes as a put does: the same info and the same file byte for byte, on a
/// direct-write filesystem and on tmpfs. A head or checksum table that does not fit is
/// refused and leaves nothing; a checksum that does not match its bytes is found as corrupt.
#[test]
fn units_written_through_the_shared_descriptor_make_the_same_file_as_put() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (Disk::open(dir_a.path()).unwrap(), Disk::open(dir_b.path()).unwrap());
    let lengths =
        [0usize, 1, 100, DIRECT_ALIGN - 89, DIRECT_ALIGN, 65_536, 3 * 65_536 + 7, 2_000_011];
    for (i, len) in lengths.into_iter().enumerate() {
        let key = UnitKey::parity(79, i as u32, 2, 3);
        let data = random_bytes(len, 70 + i as u64);
        let put = a.put(key, &data).unwrap();
        let writer = b.create(key, len as u64).unwrap();
        let shared = writer.shared().expect("a real file has a descriptor");
        assert_eq!(shared.data_offset, header_bytes(len as u64));
        assert!(
            (shared.data_offset + shared.head_bytes).is_multiple_of(DIRECT_ALIGN as u64)
                || shared.head_bytes == len as u64
        );
        let head = write_shared(&shared, &data);
        let info = writer.finish_shared(&head, crcs(&data)).unwrap();
        assert_eq!(info, put, "len {len}");
        assert_eq!(
            fs::read(a.unit_path(&key)).unwrap(),
            fs::read(b.unit_path(&key)).unwrap(),
            "len {len}"
        );
        assert_eq!(b.read(key, 0, len).unwrap(), data);
    }
    assert!(tmp_files(dir_b.path()).is_empty());

    // A head of the wrong length, or a checksum table of the wrong length: refused, no unit.
    let len = 200_000usize;
    let data = random_bytes(len, 90);
    let key = UnitKey::parity(80, 0, 2, 3);
    let writer = b.create(key, len as u64).unwrap();
    let head = write_shared(&writer.shared().unwrap(), &data);
    assert!(matches!(
        writer.finish_shared(&head[1..], crcs(&data)),
        Err(StoreError::LengthMismatch { .. })
    ));
    let writer = b.create(key, len as u64).unwrap();
    let head = write_shared(&writer.shared().unwrap(), &data);
    let mut short = crcs(&data);
    short.pop();
    assert!(matches!(writer.finish_shared(&head, short), Err(StoreError::LengthMismatch { .. })));
    assert!(matches!(b.stat(key), Err(StoreError::NotFound { .. })));
    assert!(tmp_files(dir_b.path()).is_empty(), "refused units leave no temp file");

    // A writer's wrong checksum is stored as given and found by the read of that segment.
    let writer = b.create(key, len as u64).unwrap();
    let head = write_shared(&writer.shared().unwrap(), &data);
    let mut sums = crcs(&data);
    sums[2] ^= 1;
    writer.finish_shared(&head, sums).unwrap();
    assert_eq!(b.read(key, 0, SEG as usize).unwrap(), &data[..SEG as usize]);
    assert!(matches!(b.read(key, 2 * SEG, 10), Err(StoreError::Corrupt { segment: 2, .. })));

    // Bytes written here first: no shared file. A writer's ENOSPC is Full, not a failure.
    let key = UnitKey::parity(81, 0, 2, 3);
    let mut writer = b.create(key, 10).unwrap();
    writer.write_all(&[1]).unwrap();
    assert!(writer.shared().is_none());
    drop(writer);
    let writer = b.create(key, 10).unwrap();
    let error = writer.fail_shared(std::io::Error::from_raw_os_error(22)); // EINVAL
    assert!(matches!(error, StoreError::Io { .. }), "{error}");
    assert!(b.failure().is_none(), "a writer's own mistake leaves the disk healthy");
    let writer = b.create(key, 10).unwrap();
    let error = writer.fail_shared(std::io::Error::from_raw_os_error(28)); // ENOSPC
    assert!(matches!(error, StoreError::Full { .. }), "{error}");
    assert!(b.failure().is_none(), "a full disk is not a failed one");
    assert!(tmp_files(dir_b.path()).is_empty());
}
