//! The striped mapping against a brute-force model that deals an object's bytes into blocks
//! one cell at a time, exactly as the layout's definition says, for every small layout.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_codes::CodeSpec;
use weft_layout::{StripedLayout, UnitId};

/// For each data block, the object offset of each of its bytes, in block order: the literal
/// round-robin deal. A block exists once it receives a byte.
fn deal(layout: &StripedLayout, size: u64) -> Vec<Vec<u64>> {
    let (width, cell, block) = (layout.stripe_width, layout.cell_bytes, layout.block_bytes);
    let mut blocks: Vec<Vec<u64>> = Vec::new();
    let mut next = 0u64;
    let mut stripe = 0;
    'object: loop {
        for _row in 0..block / cell {
            for position in 0..width {
                for _ in 0..cell {
                    if next == size {
                        break 'object;
                    }
                    let x = stripe * width + position;
                    if blocks.len() == x {
                        blocks.push(Vec::new());
                    }
                    blocks[x].push(next);
                    next += 1;
                }
            }
        }
        stripe += 1;
    }
    blocks
}

fn layout(k: usize, r: usize, width: usize, cell: u64, cells_per_block: u64) -> StripedLayout {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k, r },
        stripe_width: width,
        cell_bytes: cell,
        block_bytes: cell * cells_per_block,
    };
    layout.validate().unwrap();
    layout
}

/// Checks extents and block reads of one range against the model.
fn check_range(layout: &StripedLayout, model: &[Vec<u64>], start: u64, len: u64) {
    let context = format!("{layout:?} range {start}+{len}");
    let extents = layout.extents(start, len);
    let mut expected_next = start;
    for (i, extent) in extents.iter().enumerate() {
        assert!(extent.len >= 1, "{context}: empty extent");
        assert_eq!(extent.object_offset, expected_next, "{context}: gap or overlap");
        for byte in 0..extent.len {
            let at = (extent.block_offset + byte) as usize;
            assert_eq!(
                model[extent.block][at],
                extent.object_offset + byte,
                "{context}: {extent:?}"
            );
        }
        expected_next += extent.len;
        if let Some(next) = extents.get(i + 1) {
            let mergeable =
                next.block == extent.block && next.block_offset == extent.block_offset + extent.len;
            assert!(!mergeable, "{context}: {extent:?} and {next:?} should be one extent");
        }
    }
    assert_eq!(expected_next, start + len, "{context}: extents stop early");
    // Block reads: exactly the bytes of the range, one contiguous read per block.
    let reads = layout.block_reads(start, len);
    let mut covered = 0;
    for (i, read) in reads.iter().enumerate() {
        if let Some(next) = reads.get(i + 1) {
            assert!(read.block < next.block, "{context}: reads not one per block, sorted");
        }
        for byte in 0..read.len {
            let offset = model[read.block][(read.block_offset + byte) as usize];
            assert!((start..start + len).contains(&offset), "{context}: {read:?} reads {offset}");
        }
        covered += read.len;
    }
    assert_eq!(covered, len, "{context}: reads cover the range");
}

#[test]
fn mapping_matches_the_literal_deal_for_every_small_layout() {
    for cell in 1..=4u64 {
        for cells_per_block in 1..=4u64 {
            for width in 1..=5usize {
                let layout = layout(1, 1, width, cell, cells_per_block);
                for size in 0..=200u64 {
                    let model = deal(&layout, size);
                    let context = format!("{layout:?} size {size}");
                    assert_eq!(layout.data_blocks(size), model.len(), "{context}");
                    assert_eq!(layout.stripes(size), model.len().div_ceil(width), "{context}");
                    for (x, bytes) in model.iter().enumerate() {
                        assert_eq!(
                            layout.block_len(size, x),
                            bytes.len() as u64,
                            "{context} x {x}"
                        );
                        for (block_offset, &offset) in bytes.iter().enumerate() {
                            assert_eq!(
                                layout.locate(offset),
                                (x, block_offset as u64),
                                "{context} offset {offset}"
                            );
                        }
                        let mut from_extents: Vec<u64> = Vec::new();
                        for e in layout.block_extents(size, x) {
                            assert_eq!(e.block, x);
                            for i in 0..e.len {
                                assert_eq!(
                                    bytes[(e.block_offset + i) as usize],
                                    e.object_offset + i
                                );
                                from_extents.push(e.object_offset + i);
                            }
                        }
                        assert_eq!(&from_extents, bytes, "{context} block_extents({x})");
                        assert_eq!(layout.stripe_of(x), x / width);
                    }
                    for x in model.len()..model.len() + 2 * width {
                        assert_eq!(layout.block_len(size, x), 0, "{context} x {x} absent");
                        assert!(layout.block_extents(size, x).is_empty(), "{context} x {x}");
                    }
                    for stripe in 0..layout.stripes(size) + 1 {
                        let blocks = layout.stripe_blocks(size, stripe);
                        let expected: Vec<usize> =
                            (0..model.len()).filter(|x| x / width == stripe).collect();
                        assert_eq!(blocks.collect::<Vec<_>>(), expected, "{context} s {stripe}");
                    }
                    if size <= 40 {
                        for start in 0..=size {
                            for len in 0..=size - start {
                                check_range(&layout, &model, start, len);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn groups_and_units_match_the_model() {
    for k in 1..=6usize {
        for r in 1..=3usize {
            for width in 1..=5usize {
                let layout = layout(k, r, width, 2, 3);
                for size in 0..=200u64 {
                    let model = deal(&layout, size);
                    let context = format!("{layout:?} size {size}");
                    let groups = model.len().div_ceil(k);
                    assert_eq!(layout.groups(size), groups, "{context}");
                    for g in 0..groups + 2 {
                        let members: Vec<usize> = (0..model.len()).filter(|x| x / k == g).collect();
                        let range = layout.group_blocks(size, g);
                        assert_eq!(range.clone().collect::<Vec<_>>(), members, "{context} g {g}");
                        let longest = members.iter().map(|&x| model[x].len() as u64).max();
                        assert_eq!(
                            layout.unit_len(size, g),
                            longest.unwrap_or(0).next_multiple_of(layout.coding_multiple()),
                            "{context}"
                        );
                        let units = layout.group_units(size, g);
                        if members.is_empty() {
                            assert!(units.is_empty());
                            continue;
                        }
                        assert_eq!(units.len(), members.len() + r, "{context} g {g}");
                        for unit in &units {
                            let (group, position) = layout.unit_position(*unit);
                            assert_eq!(group, g);
                            assert_eq!(layout.unit(group, position), *unit);
                            if let UnitId::Parity { .. } = unit {
                                assert_eq!(layout.stored_len(size, *unit), longest.unwrap());
                            }
                        }
                        // Virtual data units of a short last group are data indices past the end.
                        for position in members.len()..k {
                            let UnitId::Data(x) = layout.unit(g, position) else {
                                panic!("{context}: unit {position} < k must be data");
                            };
                            assert!(x >= model.len(), "{context}: {x} would be stored");
                        }
                    }
                    for x in 0..model.len() {
                        assert_eq!(layout.group_of(x), x / k);
                    }
                }
            }
        }
    }
}

#[test]
fn random_ranges_on_random_layouts_match_the_model() {
    let mut rng = StdRng::seed_from_u64(0x5eed_1a70);
    for _ in 0..300 {
        let layout = layout(
            rng.gen_range(1..=6),
            rng.gen_range(1..=3),
            rng.gen_range(1..=9),
            rng.gen_range(1..=7),
            rng.gen_range(1..=6),
        );
        let size = rng.gen_range(0..=3000u64);
        let model = deal(&layout, size);
        for _ in 0..20 {
            let start = rng.gen_range(0..=size);
            let len = rng.gen_range(0..=size - start);
            check_range(&layout, &model, start, len);
        }
    }
}

#[test]
fn real_sizes_hold_every_byte_once() {
    // 1 MiB cells and 8 MiB blocks: too big to deal byte by byte, so check the accounting.
    let mut rng = StdRng::seed_from_u64(7);
    let mib = 1u64 << 20;
    for _ in 0..200 {
        let layout = layout(rng.gen_range(1..=12), 3, rng.gen_range(1..=16), mib, 8);
        let size = rng.gen_range(0..=3000 * mib) + rng.gen_range(0..mib);
        let blocks = layout.data_blocks(size);
        let total: u64 = (0..blocks).map(|x| layout.block_len(size, x)).sum();
        assert_eq!(total, size, "{layout:?} size {size}");
        assert!((0..blocks).all(|x| layout.block_len(size, x) >= 1));
        assert_eq!(layout.block_len(size, blocks), 0);
        if size > 0 {
            let (last, offset) = layout.locate(size - 1);
            assert!(last < blocks && offset < layout.block_len(size, last));
            let start = rng.gen_range(0..size);
            let len = rng.gen_range(0..=(size - start).min(64 * mib));
            let pieces: u64 = layout.extents(start, len).iter().map(|e| e.len).sum();
            let reads: u64 = layout.block_reads(start, len).iter().map(|r| r.len).sum();
            assert_eq!((pieces, reads), (len, len));
        }
    }
}
