//! AWS's words for the S3 errors weft returns: SDKs, tests and people compare the `<Message>`
//! of an error, not only its `<Code>`, so an error whose code AWS words one way always says
//! it AWS's way. weft's own explanation (which often says what to do) is kept beside it in
//! `<Detail>`, an element S3 clients ignore.
//!
//! Invariants:
//! - [`MESSAGES`] is the table docs/s3.md shows under "Error messages" (a test compares the
//!   two), one row a code, each message as AWS S3 sends it.
//! - Only the message of a listed code changes, and only when it differs; the code, status,
//!   headers and every other element stay as they are, and nothing is lost: the replaced
//!   message moves to `<Detail>` unchanged (it is XML text already).
//! - Codes whose AWS message depends on the request (AccessDenied, InvalidArgument,
//!   InvalidRequest, MalformedPolicy…) and weft's 503 (a node or meta is unreachable, not S3's "reduce your
//!   request rate") keep weft's words, except where weft words one case as AWS does
//!   ([`worded`]): AWS's words before [`DETAIL_MARK`] stay the message, weft's after it move to
//!   `<Detail>`; no message leaves the gateway with the mark in it.

/// (code, AWS's message) for every code weft rewords.
pub const MESSAGES: &[(&str, &str)] = &[
    ("BadDigest", "The Content-MD5 you specified did not match what we received."),
    (
        "BucketAlreadyExists",
        "The requested bucket name is not available. The bucket namespace is shared by all \
         users of the system. Please select a different name and try again.",
    ),
    (
        "BucketAlreadyOwnedByYou",
        "Your previous request to create the named bucket succeeded and you already own it.",
    ),
    ("BucketNotEmpty", "The bucket you tried to delete is not empty"),
    ("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size"),
    ("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size."),
    (
        "IncompleteBody",
        "You did not provide the number of bytes specified by the Content-Length HTTP header",
    ),
    ("InternalError", "We encountered an internal error. Please try again."),
    ("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."),
    ("InvalidBucketName", "The specified bucket is not valid."),
    ("InvalidDigest", "The Content-MD5 you specified is not valid."),
    (
        "InvalidPart",
        "One or more of the specified parts could not be found.  The part may not have been \
         uploaded, or the specified entity tag may not match the part's entity tag.",
    ),
    (
        "InvalidPartOrder",
        "The list of parts was not in ascending order. Parts must be ordered by part number.",
    ),
    ("InvalidRange", "The requested range is not satisfiable"),
    ("KeyTooLongError", "Your key is too long"),
    (
        "MalformedXML",
        "The XML you provided was not well-formed or did not validate against our published \
         schema",
    ),
    ("MethodNotAllowed", "The specified method is not allowed against this resource."),
    ("MissingContentLength", "You must provide the Content-Length HTTP header."),
    ("NoSuchBucket", "The specified bucket does not exist"),
    ("NoSuchBucketPolicy", "The bucket policy does not exist"),
    ("NoSuchCORSConfiguration", "The CORS configuration does not exist"),
    ("NoSuchKey", "The specified key does not exist."),
    ("NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist"),
    ("NoSuchTagSet", "The TagSet does not exist"),
    (
        "NoSuchUpload",
        "The specified upload does not exist. The upload ID may be invalid, or the upload may \
         have been aborted or completed.",
    ),
    ("NoSuchVersion", "The specified version does not exist."),
    (
        "ObjectLockConfigurationNotFoundError",
        "Object Lock configuration does not exist for this bucket",
    ),
    ("PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),
    (
        "RequestTimeTooSkewed",
        "The difference between the request time and the current time is too large.",
    ),
    (
        "ServerSideEncryptionConfigurationNotFoundError",
        "The server side encryption configuration was not found",
    ),
    (
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. Check \
         your key and signing method.",
    ),
    (
        "XAmzContentSHA256Mismatch",
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
    ),
];

/// Splits a message weft words as AWS does for one request ([`worded`]) from weft's own
/// explanation: U+2063 INVISIBLE SEPARATOR, a character no message of weft's holds otherwise.
pub const DETAIL_MARK: char = '\u{2063}';

/// An error of a code whose AWS message depends on the request (InvalidArgument,
/// InvalidRequest, InvalidTag…): `aws` is the message as AWS sends it for this case, and
/// `detail` weft's explanation, sent as `<Detail>` ([`reword`] splits them).
pub fn worded(code: s3s::S3ErrorCode, aws: &str, detail: impl std::fmt::Display) -> s3s::S3Error {
    s3s::S3Error::with_message(code, format!("{aws}{DETAIL_MARK}{detail}"))
}

/// AWS's message for `code`, if weft rewords it.
pub fn aws_message(code: &str) -> Option<&'static str> {
    MESSAGES.iter().find(|(c, _)| *c == code).map(|(_, m)| *m)
}

/// The text between the first `<name>` and the `</name>` after it, and where it lies.
fn element<'a>(xml: &'a str, name: &str) -> Option<(usize, usize, &'a str)> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some((start, end, &xml[start..end]))
}

/// An S3 error body with its `<Message>` in AWS's words and weft's own as `<Detail>`; None
/// when there is nothing to change (not an error body, an unlisted code, or AWS's message
/// already).
pub fn reword(body: &[u8]) -> Option<Vec<u8>> {
    let xml = std::str::from_utf8(body).ok()?;
    let (_, _, code) = element(xml, "Code")?;
    // A message worded for its request: AWS's part stays, weft's moves to <Detail>.
    if let Some((start, end, message)) = element(xml, "Message") {
        if let Some((aws, detail)) = message.split_once(DETAIL_MARK) {
            let close = end + "</Message>".len();
            let aws = aws_message(code).map_or_else(|| aws.to_string(), escape);
            return Some(
                format!(
                    "{}{aws}</Message><Detail>{detail}</Detail>{}",
                    &xml[..start],
                    &xml[close..]
                )
                .into_bytes(),
            );
        }
    }
    let wanted = aws_message(code)?;
    let escaped = escape(wanted);
    let out = match element(xml, "Message") {
        Some((_, _, message)) if message == escaped => return None,
        Some((start, end, message)) => {
            let detail = format!("<Detail>{message}</Detail>");
            let close = end + "</Message>".len();
            format!("{}{escaped}</Message>{detail}{}", &xml[..start], &xml[close..])
        }
        None => {
            let (_, end, _) = element(xml, "Code")?;
            let close = end + "</Code>".len();
            format!("{}<Message>{escaped}</Message>{}", &xml[..close], &xml[close..])
        }
    };
    Some(out.into_bytes())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&apos;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_codes_say_aws_words_and_keep_wefts_as_detail() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>no bucket \
                     &quot;b&quot; (see `weft bucket ls`)</Message><BucketName>b</BucketName></Error>";
        let out = String::from_utf8(reword(body).unwrap()).unwrap();
        assert_eq!(
            out,
            "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket \
             does not exist</Message><Detail>no bucket &quot;b&quot; (see `weft bucket ls`)\
             </Detail><BucketName>b</BucketName></Error>"
        );
        assert_eq!(reword(out.as_bytes()), None, "AWS's words already: nothing changes");
        // A code AWS words by request, a body without a code: unchanged.
        assert_eq!(
            reword(b"<Error><Code>InvalidArgument</Code><Message>x</Message></Error>"),
            None
        );
        assert_eq!(reword(b"<ListBucketResult></ListBucketResult>"), None);
        // No message at all: AWS's is added after the code.
        let out = reword(b"<Error><Code>NoSuchKey</Code></Error>").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"
        );
        // Apostrophes are escaped as s3s escapes them, so a reworded message compares.
        let out =
            reword(b"<Error><Code>XAmzContentSHA256Mismatch</Code><Message>m</Message></Error>");
        assert!(String::from_utf8(out.unwrap())
            .unwrap()
            .contains("&apos;x-amz-content-sha256&apos;"));
    }

    #[test]
    fn worded_errors_send_aws_words_and_wefts_as_detail() {
        let error = worded(
            s3s::S3ErrorCode::InvalidTag,
            "Cannot provide multiple Tags with \
                           the same key",
            "tag key \"a\" is given twice",
        );
        let message = error.message().unwrap();
        let body = format!(
            "<Error><Code>InvalidTag</Code><Message>{}</Message></Error>",
            message.replace('"', "&quot;")
        );
        assert_eq!(
            String::from_utf8(reword(body.as_bytes()).unwrap()).unwrap(),
            "<Error><Code>InvalidTag</Code><Message>Cannot provide multiple Tags with the same \
             key</Message><Detail>tag key &quot;a&quot; is given twice</Detail></Error>"
        );
        // A listed code worded this way still says the table's words.
        let body =
            format!("<Error><Code>NoSuchKey</Code><Message>x{DETAIL_MARK}y</Message></Error>");
        assert_eq!(
            String::from_utf8(reword(body.as_bytes()).unwrap()).unwrap(),
            "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>\
             <Detail>y</Detail></Error>"
        );
    }

    #[test]
    fn the_docs_table_is_this_table() {
        let docs = include_str!("../../../docs/s3.md");
        let section = docs.split("### Error messages").nth(1).expect("docs/s3.md has the section");
        let rows: Vec<(String, String)> = section
            .lines()
            .skip_while(|l| !l.starts_with("| code"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                (cells[0].trim_matches('`').to_string(), cells[1].to_string())
            })
            .collect();
        let table: Vec<(String, String)> =
            MESSAGES.iter().map(|(c, m)| (c.to_string(), m.to_string())).collect();
        assert_eq!(
            rows, table,
            "docs/s3.md's Error messages table and aws_errors::MESSAGES differ"
        );
        let mut codes: Vec<&str> = MESSAGES.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), MESSAGES.len(), "one row a code");
    }
}
