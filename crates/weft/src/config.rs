//! `weft serve meta|node|repair|s3 --config FILE`: a process's flags in a TOML file, for
//! deployments (systemd units, configuration management) rather than long command lines.
//!
//! Invariants:
//! - Every flag of the subcommand is a key, spelled as the flag (`secret-file`) or with
//!   underscores (`secret_file`); nothing else is: an unknown key, a table, or a value of the
//!   wrong shape is an error naming the file, the line and the key, before anything starts.
//! - Flags on the command line override the file: a key whose flag is also given there is
//!   dropped whole (a list too: `--disk` on the command line replaces the file's `disk`).
//! - The file only ever becomes command-line arguments, parsed by the same clap definitions
//!   as typed ones, so a value means the same in both places and is checked the same way.

use std::{collections::BTreeMap, ffi::OsString, path::Path};

use clap::{ArgAction, CommandFactory};

use crate::{cli_error, CliError};

/// The `weft serve` roles that take `--config`.
const ROLES: [&str; 4] = ["meta", "node", "repair", "s3"];

/// `args` (the whole command line, program first) with a `weft serve ROLE --config FILE`'s
/// file spliced in as flags before the typed ones; unchanged for any other command.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, CliError> {
    let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let (Some("serve"), Some(role)) = (text.get(1).map(String::as_str), text.get(2)) else {
        return Ok(args);
    };
    if !ROLES.contains(&role.as_str()) {
        return Ok(args);
    }
    let Some(file) = config_path(&text[3..]) else { return Ok(args) };
    let command = crate::Cli::command();
    let sub = command
        .find_subcommand("serve")
        .and_then(|serve| serve.find_subcommand(role))
        .expect("every role is a serve subcommand");
    let typed: Vec<&str> = text[3..]
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap_or(a))
        .collect();
    let flags = flags_from_file(Path::new(&file), role, sub, &typed)?;
    let mut expanded: Vec<OsString> = args[..3].to_vec();
    expanded.extend(flags.into_iter().map(OsString::from));
    expanded.extend(args[3..].iter().cloned());
    Ok(expanded)
}

/// The value of `--config FILE` or `--config=FILE` among `args`.
fn config_path(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--config" {
            return it.next().cloned();
        }
        if let Some(value) = arg.strip_prefix("--config=") {
            return Some(value.to_owned());
        }
    }
    None
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// The flags a config file stands for, for `weft serve ROLE` (`sub`), leaving out the keys
/// whose flags were typed.
fn flags_from_file(
    file: &Path,
    role: &str,
    sub: &clap::Command,
    typed: &[&str],
) -> Result<Vec<String>, CliError> {
    let name = file.display();
    let text = std::fs::read_to_string(file)
        .map_err(|e| cli_error!("--config {name}: cannot read it: {e}"))?;
    type Entries = BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;
    let entries: Entries = toml::from_str(&text).map_err(|e| match e.span() {
        Some(span) => cli_error!("{name}:{}: {}", line_of(&text, span.start), e.message()),
        None => cli_error!("--config {name}: {}", e.message()),
    })?;
    let known = || {
        let mut keys: Vec<&str> = sub
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "config" && *l != "help")
            .collect();
        keys.sort_unstable();
        keys.join(", ")
    };
    let mut flags = Vec::new();
    for (key, value) in &entries {
        let line = line_of(&text, key.span().start);
        let long = key.get_ref().replace('_', "-");
        let arg = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| long != "config" && long != "help")
            .ok_or_else(|| {
                cli_error!(
                    "{name}:{line}: unknown key `{}`: weft serve {role} has no --{long}; its \
                     keys are {}",
                    key.get_ref(),
                    known()
                )
            })?;
        if typed.contains(&long.as_str()) {
            continue;
        }
        let scalar = |v: &toml::Value| -> Result<String, CliError> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                toml::Value::Boolean(b) => Ok(b.to_string()),
                other => Err(cli_error!(
                    "{name}:{line}: `{}` must be a string or a number, not {}",
                    key.get_ref(),
                    other.type_str()
                )),
            }
        };
        match (arg.get_action(), value.get_ref()) {
            (ArgAction::SetTrue, toml::Value::Boolean(on)) => {
                if *on {
                    flags.push(format!("--{long}"));
                }
            }
            (ArgAction::SetTrue, other) => {
                return Err(cli_error!(
                    "{name}:{line}: `{}` is a switch: true or false, not {}",
                    key.get_ref(),
                    other.type_str()
                ))
            }
            (ArgAction::Append, toml::Value::Array(items)) => {
                for item in items {
                    flags.extend([format!("--{long}"), scalar(item)?]);
                }
            }
            (_, toml::Value::Array(_)) => {
                return Err(cli_error!(
                    "{name}:{line}: `{}` takes one value, not a list",
                    key.get_ref()
                ))
            }
            (_, value) => flags.extend([format!("--{long}"), scalar(value)?]),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_with(file_text: &str, typed: &[&str]) -> Result<Vec<String>, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, file_text).unwrap();
        let mut args: Vec<OsString> =
            ["weft", "serve", "node", "--config"].iter().map(OsString::from).collect();
        args.push(file.clone().into_os_string());
        args.extend(typed.iter().map(OsString::from));
        let out = expand(args)?;
        Ok(out.iter().map(|a| a.to_string_lossy().into_owned()).collect())
    }

    #[test]
    fn keys_become_flags_before_the_typed_ones() {
        let text = "meta = \"http://10.0.0.1:7700\"\nid = 3\ndisk = [\"/d0\", \"/d1\"]\n\
                    heartbeat_ms = 500\ninsecure-plaintext = true\n";
        let out = expand_with(text, &[]).unwrap();
        let joined = out.join(" ");
        assert!(joined.contains("--meta http://10.0.0.1:7700"), "{joined}");
        assert!(joined.contains("--id 3"), "{joined}");
        assert!(joined.contains("--disk /d0 --disk /d1"), "{joined}");
        assert!(joined.contains("--heartbeat-ms 500"), "{joined}");
        assert!(joined.contains("--insecure-plaintext"), "{joined}");
        // The file's flags come right after `serve node`, the typed ones after them.
        assert_eq!(&out[..3], ["weft", "serve", "node"]);
        assert_eq!(out[out.len() - 2], "--config");
    }

    #[test]
    fn typed_flags_override_the_file_whole() {
        let text = "id = 3\ndisk = [\"/d0\", \"/d1\"]\n";
        let out = expand_with(text, &["--disk", "/only", "--id=7"]).unwrap();
        let joined = out.join(" ");
        assert!(!joined.contains("/d0") && !joined.contains("--id 3"), "{joined}");
        assert!(joined.ends_with("--disk /only --id=7"), "{joined}");
    }

    #[test]
    fn bad_files_are_refused_naming_line_and_key() {
        let unknown = expand_with("id = 3\n\nlisten_on = \"x\"\n", &[]).unwrap_err().to_string();
        assert!(
            unknown.contains(":3: unknown key `listen_on`") && unknown.contains("listen,"),
            "{unknown}"
        );
        let list = expand_with("id = [1, 2]\n", &[]).unwrap_err().to_string();
        assert!(list.contains(":1: `id` takes one value"), "{list}");
        let switch = expand_with("insecure_plaintext = \"yes\"\n", &[]).unwrap_err().to_string();
        assert!(switch.contains("is a switch"), "{switch}");
        let table = expand_with("[node]\nid = 1\n", &[]).unwrap_err().to_string();
        assert!(table.contains("unknown key `node`"), "{table}");
        let broken = expand_with("id = 3\nmeta = \n", &[]).unwrap_err().to_string();
        assert!(broken.contains(":2:"), "{broken}");
        let config = expand_with("config = \"again.toml\"\n", &[]).unwrap_err().to_string();
        assert!(config.contains("unknown key `config`"), "{config}");
    }

    #[test]
    fn other_commands_are_untouched() {
        let args: Vec<OsString> =
            ["weft", "status", "--config", "x"].iter().map(OsString::from).collect();
        assert_eq!(expand(args.clone()).unwrap(), args);
    }
}
