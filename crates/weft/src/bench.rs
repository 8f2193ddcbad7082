//! `weft bench`: placeholder, being written.

use clap::Subcommand;

use crate::CliError;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {}

pub fn run(command: BenchCommand) -> Result<(), CliError> {
    match command {}
}
