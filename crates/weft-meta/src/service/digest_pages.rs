//! Unit digests sent ahead of a commit, by pages: a write or a transition of more units than
//! one request's worth of digests ([`MAX_DIGESTS_PER_REQUEST`]) sends the rest first, and its
//! commit takes them together with its own (docs/meta-api.md, "Digests by pages").
//!
//! Invariants:
//! - A page is a record of namespace [`WRITE_DIGESTS`] named `<owner>/<index of its first unit,
//!   10 digits>`, where the owner is a write in progress (`<generation, 20 digits>`) or a
//!   pending transition (`t<id, 20 digits>`): sending a page again replaces it.
//! - A page is accepted only for an owner that is in progress, and only for units it has.
//! - The commit of the owner merges every page (a unit given two different digests is
//!   refused) and deletes them after it committed; aborting or expiring the owner deletes
//!   them. A crash between leaves pages of an owner that no longer exists, never read again.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_layout::{Placement, UnitId};

use super::ApiError;
use crate::store::WRITE_DIGESTS;
use crate::{Digests, MetaError, MetaStore, MAX_LIST_LIMIT};

/// Most digests one request names (a commit or a page): a named digest is under 64 bytes of
/// JSON, so every body stays under meta's 1 MiB limit.
pub const MAX_DIGESTS_PER_REQUEST: usize = 16_384;

/// The pages of the write in progress of `generation`.
pub(crate) fn of_write(generation: u64) -> String {
    format!("{generation:020}/")
}

/// The pages of the pending transition `id`.
pub(crate) fn of_transition(id: u64) -> String {
    format!("t{id:020}/")
}

/// Checks a page's size: 1 to [`MAX_DIGESTS_PER_REQUEST`] digests.
pub(crate) fn check_count(count: usize) -> Result<(), ApiError> {
    if count == 0 || count > MAX_DIGESTS_PER_REQUEST {
        return Err(ApiError::bad_request(format!(
            "a page holds 1 to {MAX_DIGESTS_PER_REQUEST} digests, not {count}"
        )));
    }
    Ok(())
}

/// Keeps a page of `owner` (a prefix from [`of_write`] or [`of_transition`]) whose units are
/// all of `placement` (`named`: the page as sent, unit name → digest).
pub(crate) fn put(
    store: &dyn MetaStore,
    owner: &str,
    placement: &Placement,
    digests: &Digests,
    named: &Value,
    missing: impl Fn(UnitId) -> MetaError,
) -> Result<(), MetaError> {
    let (layout, blocks) =
        (placement.layout(), placement.layout().data_blocks(placement.object_size()));
    let mut first = usize::MAX;
    for unit in digests.keys() {
        if placement.disk_of(*unit).is_none() {
            return Err(missing(*unit));
        }
        first = first.min(match *unit {
            UnitId::Data(x) => x,
            UnitId::Parity { group, index } => blocks + group * layout.r() + index,
        });
    }
    store.put_record(WRITE_DIGESTS, &format!("{owner}{first:010}"), named, false)
}

/// Merges every page of `owner` into `digests`; `invalid` names what is wrong.
pub(crate) fn take(
    store: &dyn MetaStore,
    owner: &str,
    digests: &mut Digests,
    invalid: impl Fn(String) -> MetaError,
) -> Result<(), MetaError> {
    let mut after: Option<String> = None;
    loop {
        let page = store.list_records(WRITE_DIGESTS, owner, after.as_deref(), MAX_LIST_LIMIT)?;
        for (name, value) in &page {
            let named: BTreeMap<String, weft_wire::UnitDigest> =
                serde_json::from_value(value.clone())
                    .map_err(|e| invalid(format!("page {name}: {e}")))?;
            for (unit, digest) in named {
                let id = UnitId::parse_short_name(&unit)
                    .ok_or_else(|| invalid(format!("page {name} names {unit:?}")))?;
                if digests.insert(id, digest).is_some_and(|d| d != digest) {
                    return Err(invalid(format!("unit {unit} was sent two digests")));
                }
            }
        }
        match page.last() {
            Some((name, _)) if page.len() == MAX_LIST_LIMIT => after = Some(name.clone()),
            _ => return Ok(()),
        }
    }
}

/// Deletes every page of `owner`.
pub(crate) fn delete(store: &dyn MetaStore, owner: &str) -> Result<(), MetaError> {
    loop {
        let page = store.list_records(WRITE_DIGESTS, owner, None, MAX_LIST_LIMIT)?;
        if page.is_empty() {
            return Ok(());
        }
        for (name, _) in page {
            store.delete_record(WRITE_DIGESTS, &name)?;
        }
    }
}
