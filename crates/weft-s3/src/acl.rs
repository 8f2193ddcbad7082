//! S3 access control lists: who owns a bucket or an object and what others may do with it.
//!
//! Model (the S3 ACL model, with weft's users):
//! - A user is the name of an access key (`weft key create NAME`): keys of one name are one
//!   user, its canonical id and display name are the name. A key may carry an email address,
//!   which ACL grants by email resolve to (they are stored as the user they name).
//! - A bucket made through S3 is owned by the user who made it; its ACL is the gateway
//!   record `bucket_config/<bucket>/acl`. A bucket without one (made by `weft bucket create`
//!   or before ACLs existed) is shared: every authenticated user may do anything with it,
//!   as before, and anonymous requests get nothing.
//! - An object's ACL is kept in its attributes (committed with it, replaced in place by
//!   PutObjectAcl); an object without one is owned by its bucket's owner, private.
//! - Permissions: READ, WRITE, READ_ACP, WRITE_ACP, FULL_CONTROL (all four). Grantees: a
//!   user, everyone (`AllUsers`, anonymous included) or every authenticated user
//!   (`AuthenticatedUsers`).
//!
//! Invariants:
//! - The owner of a bucket may always do everything with it and with every object in it
//!   (so an owner can always clean up, whatever grants say), and a bucket's ACL never loses
//!   its owner: a PutBucketAcl naming another owner is refused.
//! - A grant to an unknown user or email is refused (400 `UnresolvableGrantByEmailAddress`
//!   / `InvalidArgument`), never stored: it could later name someone else.
//! - An ACL holds at most [`MAX_GRANTS`] grants (S3's limit), so every check is bounded.

use serde::{Deserialize, Serialize};

/// The group of everyone, anonymous requests included.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The group of every authenticated user.
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
/// Most grants one ACL holds (S3's).
pub const MAX_GRANTS: usize = 100;

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Permission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl Permission {
    /// S3's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }

    /// The permission of S3's name.
    pub fn parse(text: &str) -> Option<Permission> {
        [
            Permission::Read,
            Permission::Write,
            Permission::ReadAcp,
            Permission::WriteAcp,
            Permission::FullControl,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }

    /// Whether a grant of `self` allows `wanted`.
    fn covers(self, wanted: Permission) -> bool {
        self == wanted || self == Permission::FullControl
    }
}

/// Who a grant is to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Grantee {
    /// A user, by name (its canonical id).
    User(String),
    /// A group, by URI ([`ALL_USERS`], [`AUTHENTICATED_USERS`]).
    Group(String),
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

/// An ACL: an owner and grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    pub owner: String,
    #[serde(default)]
    pub grants: Vec<Grant>,
}

/// Who asks: a user by name, or anonymous.
pub type Requester<'a> = Option<&'a str>;

impl Acl {
    /// The owner with full control, nobody else (S3's `private`).
    pub fn private(owner: &str) -> Acl {
        Acl {
            owner: owner.to_string(),
            grants: vec![Grant {
                grantee: Grantee::User(owner.to_string()),
                permission: Permission::FullControl,
            }],
        }
    }

    /// A canned ACL by S3's name, owned by `owner`; `bucket_owner` is the owner of the
    /// bucket an object is in (the `bucket-owner-*` ones). None for an unknown name.
    /// Grants are listed as S3 lists them: groups, then the owner, then the bucket's owner.
    pub fn canned(name: &str, owner: &str, bucket_owner: Option<&str>) -> Option<Acl> {
        let group =
            |uri: &str, permission| Grant { grantee: Grantee::Group(uri.into()), permission };
        let (groups, bucket_owner_gets) = match name {
            "private" => (vec![], None),
            "bucket-owner-read" => (vec![], Some(Permission::Read)),
            "bucket-owner-full-control" => (vec![], Some(Permission::FullControl)),
            "public-read" => (vec![group(ALL_USERS, Permission::Read)], None),
            "public-read-write" => (
                vec![group(ALL_USERS, Permission::Read), group(ALL_USERS, Permission::Write)],
                None,
            ),
            "authenticated-read" => (vec![group(AUTHENTICATED_USERS, Permission::Read)], None),
            _ => return None,
        };
        let mut acl = Acl { owner: owner.to_string(), grants: groups };
        acl.grants.extend(Acl::private(owner).grants);
        if let (Some(permission), Some(other)) =
            (bucket_owner_gets, bucket_owner.filter(|b| *b != owner))
        {
            acl.grants.push(Grant { grantee: Grantee::User(other.into()), permission });
        }
        Some(acl)
    }

    /// Whether `who` may do what `wanted` allows (the owner always may).
    pub fn allows(&self, who: Requester<'_>, wanted: Permission) -> bool {
        if who == Some(self.owner.as_str()) {
            return true;
        }
        self.grants.iter().any(|grant| {
            grant.permission.covers(wanted)
                && match &grant.grantee {
                    Grantee::User(name) => who == Some(name.as_str()),
                    Grantee::Group(uri) if uri == ALL_USERS => true,
                    Grantee::Group(uri) if uri == AUTHENTICATED_USERS => who.is_some(),
                    Grantee::Group(_) => false,
                }
        })
    }

    /// Whether anyone but named users gets anything (a grant to a group): what a public
    /// access block's `BlockPublicAcls` refuses.
    pub fn is_public(&self) -> bool {
        self.grants.iter().any(|g| matches!(&g.grantee, Grantee::Group(_)))
    }
}

/// One grantee of a grant header (`x-amz-grant-read: id="alice", uri="..."`): the
/// (type, value) pairs, `id`, `emailAddress` or `uri`. None when malformed.
pub fn parse_grant_header(value: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, quoted) = item.split_once('=')?;
        let quoted = quoted.trim();
        let text = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"')).unwrap_or(quoted);
        out.push((kind.trim().to_string(), text.to_string()));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_acls_grant_what_s3_grants() {
        let public = Acl::canned("public-read", "alice", None).unwrap();
        assert!(public.allows(None, Permission::Read));
        assert!(!public.allows(None, Permission::Write));
        assert!(!public.allows(Some("bob"), Permission::ReadAcp));
        assert!(public.allows(Some("alice"), Permission::WriteAcp), "the owner always may");
        let authenticated = Acl::canned("authenticated-read", "alice", None).unwrap();
        assert!(authenticated.allows(Some("bob"), Permission::Read));
        assert!(!authenticated.allows(None, Permission::Read));
        let rw = Acl::canned("public-read-write", "alice", None).unwrap();
        assert!(rw.allows(None, Permission::Write) && rw.is_public());
        let owner_read = Acl::canned("bucket-owner-read", "bob", Some("alice")).unwrap();
        assert!(owner_read.allows(Some("alice"), Permission::Read));
        assert!(!owner_read.allows(Some("alice"), Permission::Write));
        assert!(!Acl::private("alice").is_public());
        assert!(Acl::canned("log-everything", "alice", None).is_none());
        let full = Acl {
            owner: "alice".into(),
            grants: vec![Grant {
                grantee: Grantee::User("bob".into()),
                permission: Permission::FullControl,
            }],
        };
        assert!(full.allows(Some("bob"), Permission::WriteAcp));
        assert!(!full.allows(Some("carol"), Permission::Read));
    }

    #[test]
    fn grant_headers_parse_into_pairs() {
        let pairs = parse_grant_header(r#"id="alice", uri="http://x/AllUsers""#).unwrap();
        assert_eq!(
            pairs,
            vec![("id".into(), "alice".into()), ("uri".into(), "http://x/AllUsers".into())]
        );
        assert!(parse_grant_header("nonsense").is_none());
    }
}
