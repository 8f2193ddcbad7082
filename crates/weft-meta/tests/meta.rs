//! weft-meta's integration tests, one module per subject, in one test executable (one build
//! and link of the store, the service and their dependencies instead of one per file).
//! `common` holds the stores every conformance test runs on (mem, redb, PostgreSQL).

mod auth;
mod common;
mod gc;
mod objects;
mod pg_store;
mod records;
mod redb_crash;
mod repairs;
mod service;
mod store;
mod store_faults;
mod transition_store;
mod transitions;
