//! The request headers as the era module reads them ([`protocol::head::mirror::Headers`]):
//! singletons of visible ASCII, and the transport's Base64 decoder for the `=?base64?…?=`
//! sentinel (Basic › Transports › Streamable HTTP § Value Encoding). What the headers mirror and
//! when they match is `protocol::head`'s.

use axum::http::HeaderMap;
use base64::{Engine, engine::general_purpose::STANDARD};
use protocol::head::mirror::Headers;

/// A request's headers, read as [`Headers`].
pub(super) struct HttpHeaders<'a>(pub(super) &'a HeaderMap);

impl Headers for HttpHeaders<'_> {
    fn single(&self, name: &str) -> Result<Option<&str>, String> {
        let mut all = self.0.get_all(name).iter();
        let Some(first) = all.next() else {
            return Ok(None);
        };
        if all.next().is_some() {
            return Err(format!("{name} is sent more than once"));
        }
        first
            .to_str()
            .map(Some)
            .map_err(|_| format!("{name} holds characters a header value may not carry"))
    }

    fn base64(&self, text: &str) -> Option<Vec<u8>> {
        STANDARD.decode(text).ok()
    }
}

/// A header value with the Base64 sentinel decoded ([`protocol::head::mirror::decode_header_value`] with this
/// transport's decoder); `None` when the sentinel wraps something that is not Base64 of UTF-8.
#[cfg(test)]
pub(crate) fn decode_header_value(raw: &str) -> Option<String> {
    protocol::head::mirror::decode_header_value(raw, |t| STANDARD.decode(t).ok())
}
