//! Helpers shared by the integration tests of the `weft` binary.

pub mod cluster;
