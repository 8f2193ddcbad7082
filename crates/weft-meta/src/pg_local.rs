//! [`LocalPostgres`]: a PostgreSQL server weft starts on this machine, from the server
//! programs of an installed PostgreSQL (Debian's `postgresql` package), for `weft up
//! --meta-store postgres` and for the tests that run every store through one suite.
//!
//! Invariants:
//! - The server listens on 127.0.0.1 only (and a Unix socket inside its data directory), on
//!   a free port picked at each start, unless a [`Placement`] puts it on a host of its own
//!   (`weft up --netns`): then on that host's address, port [`HOST_PORT`], admitting clients
//!   from the placement's subnet too. Either way it admits only its one role `weft`, by
//!   password (SCRAM-SHA-256). The password is made from the OS's random source at the first start
//!   and kept in `<dir>/password` (mode 0600) for a kept server, in memory for a throwaway one.
//! - PostgreSQL refuses to run as root: when weft runs as root, the server's files belong to
//!   the `postgres` user (which the package creates) and the server runs as that user.
//! - A guardian shell runs beside the server and stops it (fast shutdown) when the process
//!   that started it has gone, however it ended; a throwaway server's directory is removed
//!   with it. [`LocalPostgres::stop`] (or dropping it) stops the server at once.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The role weft's server admits.
pub const ROLE: &str = "weft";

/// The port the server listens on when placed on a host of its own (its namespace has no
/// other listener to collide with).
pub const HOST_PORT: u16 = 5432;

/// Where a server runs when not on this machine's loopback: a host (network namespace) of
/// its own, entered by `enter` between fork and exec.
pub struct Placement<'a> {
    /// The host's address, which the server listens on.
    pub address: std::net::IpAddr,
    /// The subnet (`198.18.0.0/24`) whose clients it admits, beside loopback.
    pub clients: String,
    /// Makes a command start inside the host (e.g. a `setns` in `pre_exec`).
    pub enter: &'a dyn Fn(&mut Command),
}

impl std::fmt::Debug for Placement<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("address", &self.address)
            .field("clients", &self.clients)
            .finish()
    }
}

/// How long a start may take before it is given up.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether the server's files outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Kept: `weft up` starts the same server (and data) again next time.
    Kept,
    /// Removed with the server (tests).
    Throwaway,
}

/// A running PostgreSQL server of weft's own.
#[derive(Debug)]
pub struct LocalPostgres {
    dir: PathBuf,
    address: std::net::IpAddr,
    port: u16,
    password: String,
    guardian: Option<Child>,
}

/// The user the server runs as: `None` for this process's own, else (uid, gid) of `postgres`.
fn server_user() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam reads a static record; we copy the two ids out before any other call.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err("PostgreSQL refuses to run as root, and there is no `postgres` user to run \
                    it as: install Debian's postgresql package, or run weft as another user"
            .into());
    }
    // SAFETY: non-null, just returned by getpwnam.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(Some((uid, gid)))
}

/// The directory of PostgreSQL's server programs (`initdb`, `postgres`):
/// `$WEFT_POSTGRES_BIN`, else the newest `/usr/lib/postgresql/<version>/bin`, else where
/// `initdb` is on PATH.
pub fn server_programs() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("WEFT_POSTGRES_BIN") {
        let dir = PathBuf::from(dir);
        return match dir.join("initdb").is_file() {
            true => Ok(dir),
            false => Err(format!("WEFT_POSTGRES_BIN={} holds no initdb", dir.display())),
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()).ok_or_else(|| {
        "no PostgreSQL server programs found (no initdb in /usr/lib/postgresql/*/bin or on \
         PATH): install Debian's postgresql package, or set WEFT_POSTGRES_BIN"
            .into()
    })
}

/// 32 hex digits from the OS's random source.
fn random_password() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot find a free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn chown(path: &Path, user: Option<(u32, u32)>) -> Result<(), String> {
    match user {
        Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("cannot give {} to the postgres user: {e}", path.display())),
        None => Ok(()),
    }
}

/// The last lines of the server's log, for an error message.
fn log_tail(dir: &Path) -> String {
    let log = fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

impl LocalPostgres {
    /// Starts the server whose files are under `dir` (created if missing), initializing its
    /// data directory on first use, and waits until it takes connections.
    pub fn start(dir: &Path, lifetime: Lifetime) -> Result<LocalPostgres, String> {
        LocalPostgres::start_placed(dir, lifetime, None)
    }

    /// As [`LocalPostgres::start`], on the host `placement` names when given.
    pub fn start_placed(
        dir: &Path,
        lifetime: Lifetime,
        placement: Option<&Placement<'_>>,
    ) -> Result<LocalPostgres, String> {
        let bin = server_programs()?;
        let user = server_user()?;
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
        if user.is_some() {
            // The server's user must reach its data directory.
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot open {} to the postgres user: {e}", dir.display()))?;
            if lifetime == Lifetime::Throwaway {
                chown(&dir, user)?;
            }
        }
        let data = dir.join("data");
        let password = match lifetime {
            Lifetime::Kept => {
                let file = dir.join("password");
                match fs::read_to_string(&file) {
                    Ok(password) => password.trim().to_string(),
                    Err(_) => {
                        let password = random_password()?;
                        fs::write(&file, &password)
                            .and_then(|()| {
                                fs::set_permissions(&file, fs::Permissions::from_mode(0o600))
                            })
                            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
                        password
                    }
                }
            }
            Lifetime::Throwaway => random_password()?,
        };
        if !data.join("PG_VERSION").is_file() {
            initdb(&bin, &dir, &data, &password, user)?;
        }
        let (address, port) = match placement {
            Some(placement) => (placement.address, HOST_PORT),
            None => (std::net::IpAddr::from([127, 0, 0, 1]), free_port()?),
        };
        let log = fs::File::create(dir.join("postgres.log"))
            .map_err(|e| format!("cannot write {}: {e}", dir.join("postgres.log").display()))?;
        chown(&dir.join("postgres.log"), user)?;
        // The guardian: starts the server, then stops it (and removes a throwaway directory)
        // once the process that started it is gone or the server has stopped.
        let remove = match lifetime {
            Lifetime::Throwaway => format!("rm -rf '{}'", dir.display()),
            Lifetime::Kept => String::new(),
        };
        let script = format!(
            "\"$0\" \"$@\" & pg=$!
             while [ -d /proc/{watch} ] && kill -0 $pg 2>/dev/null; do sleep 0.5; done
             kill -INT $pg 2>/dev/null; wait $pg; {remove}",
            watch = std::process::id(),
        );
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(port.to_string())
            .arg("-c")
            .arg(format!("listen_addresses={address}"))
            .arg("-c")
            .arg(format!("unix_socket_directories={}", data.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(placement) = placement {
            let hba = dir.join("pg_hba.weft.conf");
            fs::write(
                &hba,
                format!(
                    "local all {ROLE} scram-sha-256\n\
                     host all {ROLE} 127.0.0.1/32 scram-sha-256\n\
                     host all {ROLE} {} scram-sha-256\n",
                    placement.clients
                ),
            )
            .map_err(|e| format!("cannot write {}: {e}", hba.display()))?;
            chown(&hba, user)?;
            command.arg("-c").arg(format!("hba_file={}", hba.display()));
            (placement.enter)(&mut command);
        }
        match (user, placement) {
            // Entering a host needs root, and std drops to the user before running pre_exec
            // closures: so the drop is a closure of its own, registered after the entry.
            (Some((uid, gid)), Some(_)) => {
                // SAFETY: between fork and exec; setgroups, setgid and setuid are
                // async-signal-safe and touch no memory of the parent.
                unsafe {
                    command.pre_exec(move || {
                        if libc::setgroups(0, std::ptr::null()) != 0
                            || libc::setgid(gid) != 0
                            || libc::setuid(uid) != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            (Some((uid, gid)), None) => {
                command.uid(uid).gid(gid);
            }
            (None, _) => {}
        }
        // Its own process group: a ^C to weft's terminal is weft's to handle, not the server's.
        command.process_group(0);
        let guardian =
            command.spawn().map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut server = LocalPostgres { dir, address, port, password, guardian: Some(guardian) };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            match postgres::Client::connect(&self.url("postgres"), postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(error) => {
                    let exited = self.guardian.as_mut().and_then(|g| g.try_wait().ok().flatten());
                    if exited.is_some() || started.elapsed() > START_TIMEOUT {
                        return Err(format!(
                            "PostgreSQL did not start on port {} ({error}); its log ends:\n{}",
                            self.port,
                            log_tail(&self.dir)
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// The URL of `database` on this server (it holds the password: do not print it).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{ROLE}:{}@{}:{}/{database}", self.password, self.address, self.port)
    }

    /// The address it listens on.
    pub fn address(&self) -> std::net::IpAddr {
        self.address
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates `database` (letters, digits and `_`) unless it exists.
    pub fn create_database(&self, database: &str) -> Result<(), String> {
        if database.is_empty() || !database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(format!("{database:?} is not a database name (letters, digits, _)"));
        }
        let mut client = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?;
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&database])
            .map_err(|e| e.to_string())?
            .is_some();
        if !exists {
            client
                .batch_execute(&format!("CREATE DATABASE \"{database}\""))
                .map_err(|e| format!("cannot create database {database}: {e}"))?;
        }
        Ok(())
    }

    /// Stops the server (fast shutdown: open transactions roll back) and waits for it.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let Some(mut guardian) = self.guardian.take() else { return };
        let pid = fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = guardian.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = guardian.kill();
        let _ = guardian.wait();
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Makes the data directory: role `weft` with `password`, UTF-8, C collation.
fn initdb(
    bin: &Path,
    dir: &Path,
    data: &Path,
    password: &str,
    user: Option<(u32, u32)>,
) -> Result<(), String> {
    fs::create_dir_all(data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
    chown(data, user)?;
    fs::set_permissions(data, fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    let pwfile = dir.join(".initdb-password");
    fs::write(&pwfile, password).map_err(|e| format!("cannot write {}: {e}", pwfile.display()))?;
    fs::set_permissions(&pwfile, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    chown(&pwfile, user)?;
    let mut command = Command::new(bin.join("initdb"));
    command
        .arg("-D")
        .arg(data)
        .args(["-U", ROLE, "-E", "UTF8", "--no-locale", "--auth=scram-sha-256"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .stdin(Stdio::null());
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let output = command.output();
    let _ = fs::remove_file(&pwfile);
    let output = output.map_err(|e| format!("cannot run {}: {e}", bin.join("initdb").display()))?;
    if !output.status.success() {
        return Err(format!(
            "initdb failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}

/// For tests: the URL of a new, empty database on this process's throwaway server (started
/// at the first call), or `None` with the reason printed when PostgreSQL cannot run here.
/// With `WEFT_REQUIRE_POSTGRES=1` (as CI sets when the package is installed) that panics
/// instead, so the PostgreSQL half of a suite cannot be skipped silently.
pub fn test_database() -> Option<String> {
    static SERVER: OnceLock<Result<LocalPostgres, String>> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = SERVER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("weft-pg-test-{}", std::process::id()));
        LocalPostgres::start(&dir, Lifetime::Throwaway)
    });
    let required = std::env::var("WEFT_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    let refused = |why: String| {
        if required {
            panic!("WEFT_REQUIRE_POSTGRES=1 but PostgreSQL cannot run: {why}");
        }
        eprintln!("skipping the PostgreSQL store: {why}");
        None
    };
    match server {
        Ok(server) => {
            let database = format!("test_{}", NEXT.fetch_add(1, Ordering::Relaxed));
            match server.create_database(&database) {
                Ok(()) => Some(server.url(&database)),
                Err(why) => refused(why),
            }
        }
        Err(why) => refused(why.clone()),
    }
}
