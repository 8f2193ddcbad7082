//! Browser form uploads (PostObject): what s3s does not read of a form.
//! - The `${filename}` variable of the form's `key` field. S3 replaces `${filename}` in the
//!   key with the name of the file the browser sends, before it checks the form against its
//!   signed policy (a `starts-with $key "foo"` condition holds for a key `${filename}` and a
//!   file `foo.txt`). s3s reads the key field as written and drops the file's name, so the
//!   gateway makes the substitution in the form's bytes before s3s reads them.
//! - The `tagging` field (a `<Tagging>` document; s3s reads only `x-amz-tagging`): handed to
//!   PutObject as a [`FormTagging`] request extension, which no client can set.
//!
//! Invariants:
//! - Only the head of the form is held: the bytes up to the end of the file part's headers,
//!   at most [`HEAD_MAX_BYTES`]; the file's bytes stream through untouched.
//! - Only the `key` field's value changes, and only when it holds `${filename}` and the file
//!   part names a file; any other form (no boundary, no key, a head past the bound, a form
//!   s3s will refuse anyway) passes on byte for byte as it came.
//! - The file name is its last path component (old browsers send a whole path), never empty;
//!   the request's Content-Length is moved by exactly the change in the key's length.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

/// Most bytes of a form read before its file part (S3 bounds a form's fields at 20 KB).
pub const HEAD_MAX_BYTES: usize = 1 << 20;

/// The variable S3 replaces in a form's key.
const VARIABLE: &str = "${filename}";

/// The multipart boundary of a `multipart/form-data` content type.
pub fn boundary_of(content_type: &str) -> Option<String> {
    let (kind, rest) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    rest.split(';').find_map(|parameter| {
        let (name, value) = parameter.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let value = value.trim().trim_matches('"');
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// A form's `tagging` field, as sent (see the module header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormTagging(pub String);

/// The value of the form field `wanted` in `head` (which ends at the file part's headers).
pub fn field(head: &[u8], boundary: &str, wanted: &str) -> Option<String> {
    let delimiter = format!("--{boundary}");
    let mut at = 0;
    while let Some(found) = find(&head[at..], delimiter.as_bytes()) {
        let part = at + found + delimiter.len();
        let headers_end = part + find(&head[part..], b"\r\n\r\n")? + 4;
        let value_end = headers_end + find(&head[headers_end..], b"\r\n--")?;
        if part_name(&head[part..headers_end]).is_some_and(|n| n.eq_ignore_ascii_case(wanted)) {
            return std::str::from_utf8(&head[headers_end..value_end]).ok().map(str::to_string);
        }
        at = value_end;
    }
    None
}

/// Where the file part's headers end in `head` (the index after their blank line), if the
/// head reaches that far.
fn file_headers_end(head: &[u8], boundary: &str) -> Option<usize> {
    let delimiter = format!("--{boundary}");
    let mut at = 0;
    while let Some(found) = find(&head[at..], delimiter.as_bytes()) {
        let part = at + found + delimiter.len();
        let headers_end = part + find(&head[part..], b"\r\n\r\n")? + 4;
        if part_name(&head[part..headers_end]).is_some_and(|n| n.eq_ignore_ascii_case("file")) {
            return Some(headers_end);
        }
        at = headers_end;
    }
    None
}

/// A part's `Content-Disposition` parameter `parameter` (`name`, `filename`), unquoted.
fn disposition_parameter(headers: &[u8], parameter: &str) -> Option<String> {
    let text = std::str::from_utf8(headers).ok()?;
    let line = text.split("\r\n").find(|line| {
        line.split_once(':')
            .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("content-disposition"))
    })?;
    let (_, value) = line.split_once(':')?;
    value.split(';').skip(1).find_map(|item| {
        let (name, value) = item.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case(parameter) {
            return None;
        }
        let value = value.trim();
        Some(value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value).to_string())
    })
}

fn part_name(headers: &[u8]) -> Option<String> {
    disposition_parameter(headers, "name")
}

/// The head with `${filename}` in its key field replaced by the file part's name, when
/// there is one to replace; `head` must end at the file part's headers.
pub fn substituted(head: &[u8], boundary: &str) -> Option<Vec<u8>> {
    let delimiter = format!("--{boundary}");
    let file_at = file_headers_end(head, boundary)?;
    // the file part's headers: from its delimiter to `file_at`
    let file_start = rfind(&head[..file_at], delimiter.as_bytes())? + delimiter.len();
    let sent = disposition_parameter(&head[file_start..file_at], "filename")?;
    let name = sent.rsplit(['/', '\\']).next().filter(|n| !n.is_empty())?;
    let mut at = 0;
    while let Some(found) = find(&head[at..file_start], delimiter.as_bytes()) {
        let part = at + found + delimiter.len();
        let headers_end = part + find(&head[part..file_start], b"\r\n\r\n")? + 4;
        let value_end = headers_end + find(&head[headers_end..file_start], b"\r\n--")?;
        if part_name(&head[part..headers_end]).is_some_and(|n| n.eq_ignore_ascii_case("key")) {
            let value = std::str::from_utf8(&head[headers_end..value_end]).ok()?;
            if !value.contains(VARIABLE) {
                return None;
            }
            let mut out = Vec::with_capacity(head.len() + name.len());
            out.extend_from_slice(&head[..headers_end]);
            out.extend_from_slice(value.replace(VARIABLE, name).as_bytes());
            out.extend_from_slice(&head[value_end..]);
            return Some(out);
        }
        at = value_end;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

/// Fills `${filename}` into a form upload's key and hands on its `tagging` field (see the
/// module header). The body is read only as far as the file part's headers; a body that
/// fails while its head is read fails here as it would have in s3s.
pub async fn fill_filename(request: &mut http::Request<s3s::Body>) {
    let Some(boundary) = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(boundary_of)
    else {
        return;
    };
    let mut body = std::mem::take(request.body_mut());
    let mut head = BytesMut::new();
    let mut failure = None;
    while head.len() <= HEAD_MAX_BYTES && file_headers_end(&head, &boundary).is_none() {
        match body.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(error)) => {
                failure = Some(error);
                break;
            }
            None => break,
        }
    }
    let head = head.freeze();
    let end = file_headers_end(&head, &boundary);
    if let Some(tagging) = end.and_then(|end| field(&head[..end], &boundary, "tagging")) {
        request.extensions_mut().insert(FormTagging(tagging));
    }
    let filled = end.and_then(|end| {
        let mut out = substituted(&head[..end], &boundary)?;
        out.extend_from_slice(&head[end..]);
        Some(Bytes::from(out))
    });
    if let Some(filled) = &filled {
        let grown = filled.len() as i64 - head.len() as i64;
        let length = request
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(length) = length {
            request
                .headers_mut()
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(length + grown));
        }
    }
    let first = filled.unwrap_or(head);
    let rest = futures_util::stream::iter(failure.map(Err)).chain(body);
    let whole = futures_util::stream::once(async move { Ok(first) }).chain(rest);
    *request.body_mut() = boxed(whole);
}

type Chunk = Result<Bytes, s3s::StdError>;

/// A stream of chunks as an s3s body of unknown remaining length.
struct Chunks<S>(S);

impl<S: Stream<Item = Chunk> + Unpin> Stream for Chunks<S> {
    type Item = Chunk;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Chunk>> {
        self.0.poll_next_unpin(cx)
    }
}

impl<S: Stream<Item = Chunk> + Unpin> s3s::stream::ByteStream for Chunks<S> {}

fn boxed(stream: impl Stream<Item = Chunk> + Send + Sync + 'static) -> s3s::Body {
    s3s::Body::from(s3s::dto::StreamingBlob::new(Chunks(Box::pin(stream))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(key: &str, filename: &str) -> Vec<u8> {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n{key}\r\n\
             --XyZ\r\nContent-Disposition: form-data; name=\"policy\"\r\n\r\nabc\r\n\
             --XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: text/plain\r\n\r\n"
        )
        .into_bytes()
    }

    #[test]
    fn fields_are_read_by_name() {
        let head = form("k", "f.txt");
        assert_eq!(field(&head, "XyZ", "policy").as_deref(), Some("abc"));
        assert_eq!(field(&head, "XyZ", "KEY").as_deref(), Some("k"));
        assert_eq!(field(&head, "XyZ", "tagging"), None);
    }

    #[test]
    fn boundaries_are_read_from_form_content_types_only() {
        assert_eq!(boundary_of("multipart/form-data; boundary=XyZ").as_deref(), Some("XyZ"));
        assert_eq!(boundary_of("Multipart/Form-Data;boundary=\"a b\"").as_deref(), Some("a b"));
        assert_eq!(boundary_of("multipart/mixed; boundary=XyZ"), None);
        assert_eq!(boundary_of("multipart/form-data; boundary="), None);
        assert_eq!(boundary_of("multipart/form-data"), None);
    }

    #[test]
    fn the_key_gets_the_files_last_path_component_and_nothing_else_changes() {
        let head = form("uploads/${filename}", "C:\\Users\\me\\foo.txt");
        let out = substituted(&head, "XyZ").unwrap();
        let want = form("uploads/foo.txt", "C:\\Users\\me\\foo.txt");
        assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(want).unwrap());
        let out = substituted(&form("${filename}-${filename}", "a/b.txt"), "XyZ").unwrap();
        assert_eq!(out, form("b.txt-b.txt", "a/b.txt"));
    }

    #[test]
    fn forms_without_the_variable_or_a_file_name_are_left_alone() {
        assert_eq!(substituted(&form("plain", "foo.txt"), "XyZ"), None);
        assert_eq!(substituted(&form("${filename}", ""), "XyZ"), None);
        assert_eq!(substituted(&form("${filename}", "dir/"), "XyZ"), None);
        // another boundary, and a head that stops before the file part
        assert_eq!(substituted(&form("${filename}", "foo.txt"), "Other"), None);
        let head = form("${filename}", "foo.txt");
        assert_eq!(substituted(&head[..head.len() - 30], "XyZ"), None);
    }

    #[tokio::test]
    async fn a_filled_form_streams_whole_with_its_length_moved() {
        let mut bytes = form("k/${filename}", "foo.txt");
        bytes.extend_from_slice(b"the file\r\n--XyZ--\r\n");
        let sent = bytes.len();
        // sent in small pieces, as a slow client would
        let pieces: Vec<Chunk> = bytes.chunks(7).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let body = boxed(futures_util::stream::iter(pieces));
        let mut request = http::Request::post("/bucket")
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .header("content-length", sent)
            .body(body)
            .unwrap();
        fill_filename(&mut request).await;
        let length: usize = request.headers()["content-length"].to_str().unwrap().parse().unwrap();
        let mut got = Vec::new();
        let mut body = std::mem::take(request.body_mut());
        while let Some(chunk) = body.next().await {
            got.extend_from_slice(&chunk.unwrap());
        }
        let mut want = form("k/foo.txt", "foo.txt");
        want.extend_from_slice(b"the file\r\n--XyZ--\r\n");
        assert_eq!(got, want);
        assert_eq!(length, want.len());
        assert_eq!(length, sent - VARIABLE.len() + "foo.txt".len());
    }
}
