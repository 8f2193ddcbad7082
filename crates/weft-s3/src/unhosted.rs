//! Bucket configurations weft does not carry out: static website hosting and object
//! ownership controls. A client still hears what S3 would say about what it sent: a
//! configuration S3 would not take is 400 MalformedXML (as S3 says it), one it would take is
//! 501 NotImplemented (weft cannot honour it, so it stores nothing rather than pretend), and a
//! read or delete answers that no configuration is set, which is true.
//!
//! Invariants:
//! - Nothing here writes: no request of these families changes a bucket.
//! - A refusal names the rule that failed in `<Detail>` (aws_errors::worded).

use s3s::dto::{ObjectOwnership, OwnershipControls, WebsiteConfiguration};
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::aws_errors::worded;

fn malformed(rule: &str) -> S3Error {
    worded(
        S3ErrorCode::MalformedXML,
        crate::aws_errors::aws_message("MalformedXML").expect("listed"),
        rule,
    )
}

/// PutBucketWebsite: checked as S3 checks it, then refused (weft serves no website).
pub fn put_website(configuration: &WebsiteConfiguration) -> S3Result<()> {
    let rules = configuration.routing_rules.as_deref().unwrap_or_default();
    if configuration.redirect_all_requests_to.is_some() {
        if configuration.index_document.is_some()
            || configuration.error_document.is_some()
            || !rules.is_empty()
        {
            return Err(malformed(
                "RedirectAllRequestsTo stands alone: no IndexDocument, ErrorDocument or \
                 RoutingRules beside it",
            ));
        }
    } else if configuration.index_document.is_none() {
        return Err(malformed(
            "a website configuration has an IndexDocument or RedirectAllRequestsTo",
        ));
    }
    for rule in rules {
        if let Some(condition) = &rule.condition {
            if condition.key_prefix_equals.is_none()
                && condition.http_error_code_returned_equals.is_none()
            {
                return Err(malformed(
                    "a routing rule's Condition names KeyPrefixEquals or \
                     HttpErrorCodeReturnedEquals",
                ));
            }
        }
        let redirect = &rule.redirect;
        if redirect.host_name.is_none()
            && redirect.http_redirect_code.is_none()
            && redirect.protocol.is_none()
            && redirect.replace_key_prefix_with.is_none()
            && redirect.replace_key_with.is_none()
        {
            return Err(malformed("a routing rule's Redirect says where to: it is not empty"));
        }
        if redirect.replace_key_prefix_with.is_some() && redirect.replace_key_with.is_some() {
            return Err(malformed(
                "a Redirect has ReplaceKeyPrefixWith or ReplaceKeyWith, not both",
            ));
        }
    }
    Err(S3Error::with_message(
        S3ErrorCode::NotImplemented,
        "weft does not host static websites: the configuration is well formed, and not stored",
    ))
}

/// GetBucketWebsite of an existing bucket: it has no website configuration.
pub fn no_website() -> S3Error {
    let mut error = worded(
        S3ErrorCode::Custom("NoSuchWebsiteConfiguration".into()),
        "The specified bucket does not have a website configuration",
        "weft does not host static websites",
    );
    error.set_status_code(http::StatusCode::NOT_FOUND);
    error
}

/// PutBucketOwnershipControls: checked as S3 checks it, then refused (weft keeps the
/// writer's ownership and ACLs, ObjectWriter's behaviour, and has no switch for another).
pub fn put_ownership(controls: &OwnershipControls) -> S3Result<()> {
    let [rule] = controls.rules.as_slice() else {
        return Err(malformed("OwnershipControls holds exactly one Rule"));
    };
    let known = [
        ObjectOwnership::BUCKET_OWNER_ENFORCED,
        ObjectOwnership::BUCKET_OWNER_PREFERRED,
        ObjectOwnership::OBJECT_WRITER,
    ];
    if !known.contains(&rule.object_ownership.as_str()) {
        return Err(malformed(
            "ObjectOwnership is BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter",
        ));
    }
    Err(S3Error::with_message(
        S3ErrorCode::NotImplemented,
        "weft keeps object ownership as ObjectWriter (each writer owns its objects, ACLs \
         apply); it has no other ownership setting",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::{
        Condition, IndexDocument, OwnershipControlsRule, Redirect, RedirectAllRequestsTo,
        RoutingRule,
    };

    fn code(result: S3Result<()>) -> String {
        result.unwrap_err().code().as_str().to_string()
    }

    fn index() -> Option<IndexDocument> {
        Some(IndexDocument { suffix: "index.html".into() })
    }

    #[test]
    fn website_configurations_s3_would_refuse_are_malformed_and_others_not_implemented() {
        let rule =
            |condition: Option<Condition>, redirect: Redirect| RoutingRule { condition, redirect };
        let to_host = Redirect { host_name: Some("example.com".into()), ..Default::default() };
        let good = WebsiteConfiguration {
            index_document: index(),
            routing_rules: Some(vec![rule(
                Some(Condition { key_prefix_equals: Some("docs/".into()), ..Default::default() }),
                to_host.clone(),
            )]),
            ..Default::default()
        };
        assert_eq!(code(put_website(&good)), "NotImplemented");
        let empty_condition = WebsiteConfiguration {
            routing_rules: Some(vec![rule(Some(Condition::default()), to_host.clone())]),
            ..good.clone()
        };
        assert_eq!(code(put_website(&empty_condition)), "MalformedXML");
        let empty_redirect = WebsiteConfiguration {
            routing_rules: Some(vec![rule(None, Redirect::default())]),
            ..good.clone()
        };
        assert_eq!(code(put_website(&empty_redirect)), "MalformedXML");
        let redirect_all = WebsiteConfiguration {
            redirect_all_requests_to: Some(RedirectAllRequestsTo {
                host_name: "example.com".into(),
                protocol: None,
            }),
            ..Default::default()
        };
        assert_eq!(code(put_website(&redirect_all)), "NotImplemented");
        let crowded = WebsiteConfiguration { index_document: index(), ..redirect_all };
        assert_eq!(code(put_website(&crowded)), "MalformedXML");
        assert_eq!(code(put_website(&WebsiteConfiguration::default())), "MalformedXML");
        assert_eq!(no_website().status_code(), Some(http::StatusCode::NOT_FOUND));
    }

    #[test]
    fn ownership_controls_take_one_known_rule() {
        let rules = |names: &[&str]| OwnershipControls {
            rules: names
                .iter()
                .map(|n| OwnershipControlsRule {
                    object_ownership: ObjectOwnership::from(n.to_string()),
                })
                .collect(),
        };
        assert_eq!(code(put_ownership(&rules(&["ObjectWriter"]))), "NotImplemented");
        assert_eq!(code(put_ownership(&rules(&[]))), "MalformedXML");
        assert_eq!(
            code(put_ownership(&rules(&["ObjectWriter", "BucketOwnerPreferred"]))),
            "MalformedXML"
        );
        assert_eq!(code(put_ownership(&rules(&["invalid_ownership"]))), "MalformedXML");
    }
}
