//! The protobuf codec of every generated service and client: tonic-prost's, with
//! smaller buffers (docs/security.md: nothing a caller sends can
//! starve the daemon); the daemon's services decode requests with [`RequestCodec`],
//! which answers a request that does not decode (a string field that is not UTF-8, bytes
//! that are no protobuf message) `INVALID_ARGUMENT` naming the field, where tonic-prost
//! answers `INTERNAL`: bad input is the caller's error, not the daemon's.
//!
//! tonic gives each call a decode and an encode buffer of 8 KiB up front. Every message
//! of this API is a few hundred bytes (a `Verify` at most a few KiB: the buffer grows
//! when one needs it), so with many thousands of calls in flight those buffers alone were most
//! of the daemon's memory. 1 KiB holds every usual message without growing.

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial size of a call's encode and decode buffer, in bytes.
pub const BUFFER_BYTES: usize = 1024;

/// Encoded bytes after which a streaming encoder yields (tonic's default; only server
/// streaming would reach it, and this API has none).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// tonic-prost's codec with [`BUFFER_BYTES`] buffers (named by `build.rs`).
#[derive(Debug, Clone, Copy)]
pub struct SmallBufferCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}

/// The daemon's codec (named by the daemon's `build.rs`): [`SmallBufferCodec`]'s
/// buffers, and requests decoded by [`RequestDecoder`].
#[derive(Debug, Clone, Copy)]
pub struct RequestCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for RequestCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for RequestCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Decodes a request; one that does not decode is `INVALID_ARGUMENT` naming the field
/// ([`invalid_request`]).
#[derive(Debug, Clone, Copy)]
pub struct RequestDecoder<U>(PhantomData<U>);

impl<U: prost::Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| invalid_request(&e))
    }

    fn buffer_settings(&self) -> BufferSettings {
        settings()
    }
}

/// The status of a request that does not decode: `INVALID_ARGUMENT` naming the field as
/// the proto does (`account.identifier`, `stored_hash`), outermost first, and what is
/// wrong with it (`is not valid UTF-8`). Never the bytes sent.
pub fn invalid_request(error: &prost::DecodeError) -> Status {
    // prost writes "failed to decode Protobuf message: Inner.field: Outer.field: what",
    // innermost first; its fields are not public otherwise.
    let text = error.to_string();
    let text = text.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&text);
    let mut path = Vec::new();
    let mut rest = text;
    while let Some((head, tail)) = rest.split_once(": ") {
        let Some((message, field)) = head.split_once('.') else { break };
        let is_name =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name(message) || !is_name(field) {
            break;
        }
        path.push(field.trim_start_matches("r#"));
        rest = tail;
    }
    path.reverse();
    let field = path.join(".");
    let what = if rest.contains("UTF-8") { "is not valid UTF-8" } else { rest };
    if field.is_empty() {
        Status::invalid_argument(format!("the request is not a valid message: {what}"))
    } else {
        Status::invalid_argument(format!("{field} {what}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{Account, VerifyRequest};
    use prost::Message;

    /// A `VerifyRequest` whose string field `tag` (inside the account for 101, 102)
    /// holds bytes that are not UTF-8.
    fn with_bad_utf8(tag: u32) -> Vec<u8> {
        let bad: &[u8] = b"caf\xe9";
        let mut out = Vec::new();
        let field = |out: &mut Vec<u8>, tag: u32, value: &[u8]| {
            prost::encoding::bytes::encode(tag, &value.to_vec(), out);
        };
        match tag {
            101 | 102 => {
                let mut account = Vec::new();
                field(&mut account, tag - 100, bad);
                field(&mut out, 1, &account);
            }
            _ => field(&mut out, tag, bad),
        }
        out
    }

    #[test]
    fn a_string_that_is_not_utf8_is_invalid_argument_naming_the_field() {
        for (tag, name) in [
            (101, "account.realm"),
            (102, "account.identifier"),
            (3, "stored_hash"),
            (4, "client_key"),
            (5, "attempt_id"),
        ] {
            let error = VerifyRequest::decode(&with_bad_utf8(tag)[..]).unwrap_err();
            let status = invalid_request(&error);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{name}");
            assert_eq!(status.message(), format!("{name} is not valid UTF-8"));
        }
        let ok = VerifyRequest {
            account: Some(Account { realm: "r".into(), identifier: "i".into() }),
            ..Default::default()
        };
        assert!(VerifyRequest::decode(&ok.encode_to_vec()[..]).is_ok());
        let error = VerifyRequest::decode(&[0xff, 0xff, 0xff][..]).unwrap_err();
        let status = invalid_request(&error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().starts_with("the request is not a valid message"), "{status:?}");
    }
}
