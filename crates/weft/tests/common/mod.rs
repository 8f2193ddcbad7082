//! Helpers shared by the integration tests of the `weft` binary.

pub mod cluster;

/// Policy flags for rs(2,1), stripe width 2, 4 KiB cells, 16 KiB blocks: small objects span
/// many units on 3+ nodes.
#[allow(dead_code)]
pub const RS_2_1: [&str; 12] = [
    "--code",
    "rs",
    "--k",
    "2",
    "--r",
    "1",
    "--stripe-width",
    "2",
    "--cell",
    "4KiB",
    "--block",
    "16KiB",
];

/// `len` pseudo-random bytes (splitmix64 of `seed` and `len`): every object of a test differs
/// from every other, and the same call gives the same bytes.
#[allow(dead_code)]
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d4_049b_b133_111b);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The ```sh blocks of `text`, in order.
#[allow(dead_code)]
pub fn sh_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().expect("inside a block")),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "README.md ends inside a ```sh block");
    blocks
}

/// Makes a FIFO at `path` (mkfifo(3)).
#[allow(dead_code)]
pub fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
    // SAFETY: a NUL-terminated path; mkfifo(3) only creates the node.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}
