//! The stores every conformance test runs against: MemStore (the model), RedbStore, and
//! PgStore on a throwaway PostgreSQL server when one can run here (skipped with the reason
//! printed otherwise; `WEFT_REQUIRE_POSTGRES=1` makes that a failure, as CI sets it).

#![allow(dead_code)]

use weft_codes::CodeSpec;
use weft_layout::{place, DiskLocation, FailureDomain, Placement, StripedLayout, Topology};
use weft_meta::{MemStore, MetaStore, PgStore, RedbStore};

/// One store of each kind, each empty.
pub struct Stores {
    pub dir: tempfile::TempDir,
    pub mem: MemStore,
    pub redb: RedbStore,
    pub pg: Option<PgStore>,
    /// The URL of `pg`'s database (with its password: tests only).
    pub pg_url: Option<String>,
}

impl Stores {
    pub fn new() -> Stores {
        let dir = tempfile::tempdir().unwrap();
        let redb = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        let pg_url = weft_meta::pg_local::test_database();
        let pg = pg_url.as_deref().map(|url| PgStore::open(url).unwrap());
        Stores { dir, mem: MemStore::new(), redb, pg, pg_url }
    }

    /// Every store, the model first.
    pub fn all(&self) -> Vec<&dyn MetaStore> {
        let mut all: Vec<&dyn MetaStore> = vec![&self.mem, &self.redb];
        if let Some(pg) = &self.pg {
            all.push(pg);
        }
        all
    }

    /// A new, empty store of each durable kind (not the ones of [`Stores::all`]), each as
    /// something that opens it again.
    pub fn durable(&self) -> Vec<Durable> {
        let mut out = vec![Durable::Redb(self.dir.path().join("durable.redb"))];
        if self.pg.is_some() {
            out.extend(weft_meta::pg_local::test_database().map(Durable::Postgres));
        }
        out
    }

    /// Every store, boxed (the model first).
    pub fn boxed() -> (tempfile::TempDir, Vec<Box<dyn MetaStore>>) {
        let Stores { dir, mem, redb, pg, .. } = Stores::new();
        let mut all: Vec<Box<dyn MetaStore>> = vec![Box::new(mem), Box::new(redb)];
        all.extend(pg.map(|pg| Box::new(pg) as Box<dyn MetaStore>));
        (dir, all)
    }
}

/// A store that keeps its records, named by what opens it.
#[derive(Debug, Clone)]
pub enum Durable {
    Redb(std::path::PathBuf),
    Postgres(String),
}

impl Durable {
    pub fn open(&self) -> Box<dyn MetaStore> {
        match self {
            Durable::Redb(path) => Box::new(RedbStore::open(path).unwrap()),
            Durable::Postgres(url) => Box::new(PgStore::open(url).unwrap()),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Durable::Redb(_) => "redb",
            Durable::Postgres(_) => "postgres",
        }
    }
}

const MIB: u64 = 1 << 20;

/// A small policy for tests whose objects' shape does not matter: rs(2,1), 1 MiB cells.
pub fn small_layout() -> StripedLayout {
    StripedLayout {
        code: CodeSpec::parse("rs(2,1)").unwrap(),
        stripe_width: 2,
        cell_bytes: MIB,
        block_bytes: MIB,
    }
}

/// A 2 MiB object of [`small_layout`] on six one-disk nodes, placed by `seed`.
pub fn small_placement(seed: u64) -> Placement {
    let disks = (0..6).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect();
    let topology = Topology::new(disks).unwrap();
    place(&small_layout(), 2 * MIB, &topology, seed, FailureDomain::Node).unwrap()
}
