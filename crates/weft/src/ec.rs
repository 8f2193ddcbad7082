//! `weft ec`: codes on plain files (placeholder, being written).

use clap::Subcommand;

use crate::CliError;

#[derive(Debug, Subcommand)]
pub enum EcCommand {}

pub fn run(command: EcCommand) -> Result<(), CliError> {
    match command {}
}
