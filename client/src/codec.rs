//! The protobuf codec of every generated service and client: tonic-prost's, with
//! smaller buffers (docs/security.md: nothing a caller sends can
//! starve the daemon).
//!
//! tonic gives each call a decode and an encode buffer of 8 KiB up front. Every message
//! of this API is a few hundred bytes (a `Verify` at most a few KiB: the buffer grows
//! when one needs it), so with many thousands of calls in flight those buffers alone were most
//! of the daemon's memory. 1 KiB holds every usual message without growing.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
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
