//! `weft demo`: weft's main job on embedded defaults, narrated. Today that is `weft ec` on a
//! sample file (encode, lose and corrupt units, verify, decode, repair, and the clear refusal
//! when too much is lost); it becomes a whole cluster once `weft up` exists.
//!
//! Invariants:
//! - The demo runs the real `weft` executable as a user would, one child process per step,
//!   and prints each command before its output, so every line can be copied and re-run.
//! - It checks its own claims: the decoded file must equal the original byte for byte and the
//!   over-damaged set must be refused, or the demo fails with a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use rand::{rngs::StdRng, RngCore, SeedableRng};

use crate::{cli_error, parse_size, CliError};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to put the sample file and units, kept afterwards so you can look at them
    /// (default: a new folder under the system's temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Size of the sample file.
    #[arg(long, default_value = "24MiB", value_parser = parse_size)]
    size: usize,
    /// Data units of the rs code.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// Parity units of the rs code (units that may be lost).
    #[arg(long, default_value_t = 4)]
    r: usize,
}

fn step(title: &str) {
    println!("\n── {title}");
}

/// Runs `weft ARGS`, echoing the command and its output; returns success and stdout.
fn weft(args: &[&str]) -> Result<(bool, String), CliError> {
    let exe = std::env::current_exe()?;
    println!("$ weft {}", args.join(" "));
    let output = Command::new(exe).args(args).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    Ok((output.status.success(), stdout))
}

fn must(args: &[&str]) -> Result<String, CliError> {
    match weft(args)? {
        (true, stdout) => Ok(stdout),
        (false, _) => Err(cli_error!("demo step failed: weft {}", args.join(" "))),
    }
}

fn unit_path(units: &Path, index: usize, n: usize) -> PathBuf {
    let width = if n > 100 { 3 } else { 2 };
    units.join(format!("unit-{index:0width$}"))
}

pub fn run(args: DemoArgs) -> Result<(), CliError> {
    if args.r == 0 || args.k == 0 {
        return Err(cli_error!("the demo needs k ≥ 1 and r ≥ 1"));
    }
    let n = args.k + args.r;
    let (dir, removed_at_end) = match args.dir {
        Some(dir) => (dir, None),
        None => {
            let dir = std::env::temp_dir().join(format!("weft-demo-{}", std::process::id()));
            (dir.clone(), Some(RemovedOnDrop(dir)))
        }
    };
    std::fs::create_dir_all(&dir)?;
    let sample = dir.join("sample.bin");
    let units = dir.join("units");
    let restored = dir.join("restored.bin");
    let _ = std::fs::remove_dir_all(&units);
    let _ = std::fs::remove_file(&restored);
    let (sample_s, units_s, restored_s) = (
        sample.to_string_lossy().into_owned(),
        units.to_string_lossy().into_owned(),
        restored.to_string_lossy().into_owned(),
    );

    step(&format!("A {} byte sample file in {}", args.size, dir.display()));
    let mut content = vec![0u8; args.size];
    StdRng::seed_from_u64(2026).fill_bytes(&mut content);
    std::fs::write(&sample, &content)?;

    step(&format!(
        "Encode it with rs({},{}): {n} unit files, any {} of which may be lost",
        args.k, args.r, args.r
    ));
    must(&[
        "ec",
        "encode",
        &sample_s,
        "--code",
        "rs",
        "--k",
        &args.k.to_string(),
        "--r",
        &args.r.to_string(),
        "-o",
        &units_s,
    ])?;

    let lose = args.r / 2 + args.r % 2;
    let corrupt = args.r - lose;
    step(&format!("Disaster: delete {lose} unit file(s) and flip bytes in {corrupt} other(s)"));
    for i in 0..lose {
        let path = unit_path(&units, i * 2, n);
        std::fs::remove_file(&path)?;
        println!("deleted {}", path.display());
    }
    for i in 0..corrupt {
        let path = unit_path(&units, n - 1 - i, n);
        let mut bytes = std::fs::read(&path)?;
        let at = bytes.len() / 3;
        if let Some(byte) = bytes.get_mut(at) {
            *byte ^= 0x5A;
        }
        std::fs::write(&path, &bytes)?;
        println!("corrupted byte {at} of {}", path.display());
    }

    step("Verify finds the damage from the per-segment checksums");
    weft(&["ec", "verify", &units_s])?;

    step("Decode rebuilds the file anyway");
    must(&["ec", "decode", &units_s, "-o", &restored_s])?;
    if std::fs::read(&restored)? != content {
        return Err(cli_error!("the decoded file differs from the original"));
    }
    println!("restored.bin is byte-identical to sample.bin");

    step("Repair rebuilds one lost unit and shows exactly what it read");
    must(&["ec", "repair", &units_s, "--unit", "0", "--json"])?;

    step(&format!(
        "Too much damage: {} units gone, one more than rs({},{}) tolerates",
        args.r + 1,
        args.k,
        args.r
    ));
    let _ = std::fs::remove_file(&restored);
    for i in 0..=args.r {
        let _ = std::fs::remove_file(unit_path(&units, i, n));
    }
    let (ok, _) = weft(&["ec", "decode", &units_s, "-o", &restored_s])?;
    if ok || restored.exists() {
        return Err(cli_error!("decoding an over-damaged set should have been refused"));
    }
    println!("refused, as it must be, and no output file was written");

    step("Repairs that read less: what rebuilding one unit reads, per code, beside rs(10,4)");
    for code in ["hh-xor+(10,4)", "clay(10,4)", "lrc(10,2,2)"] {
        let args = ["ec", "repair-cost", "--code", code];
        println!("$ weft ec repair-cost --code '{code}'   # its summary line:");
        let output = Command::new(std::env::current_exe()?).args(args).output()?;
        if !output.status.success() {
            return Err(cli_error!("demo step failed: weft {}", args.join(" ")));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let averages: Vec<&str> =
            stdout.lines().filter(|line| line.starts_with("average over data units")).collect();
        println!("{}", averages.join(""));
    }

    step("Done");
    println!("Speed, side by side with ISA-L: weft bench ec --code rs --k 10 --r 4 --shard 1MiB --compare isal");
    match &removed_at_end {
        Some(_) => println!("Removed {} (--dir DIR keeps the files)", dir.display()),
        None => println!("Files kept in {}", dir.display()),
    }
    Ok(())
}

/// A directory the demo made for itself: removed when the demo ends, failed or not.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
