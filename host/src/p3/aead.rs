//! `tether:streams-async/aead`: the p2 interface's packet keys
//! ([`crate::aead`]) under the async package's names; same key table,
//! limits and errors.

use wasmtime::component::Resource;

use super::generated::tether::streams_async::aead::{self as wit, AeadError, Algorithm};
use crate::TetherCtxView;
use crate::aead::{self as p2, PacketKey};

fn to_p2(a: Algorithm) -> p2::Algorithm {
    match a {
        Algorithm::Chacha20Poly1305 => p2::Algorithm::Chacha20Poly1305,
        Algorithm::Aes128Gcm => p2::Algorithm::Aes128Gcm,
        Algorithm::Aes256Gcm => p2::Algorithm::Aes256Gcm,
    }
}

fn from_p2(a: p2::Algorithm) -> Algorithm {
    match a {
        p2::Algorithm::Chacha20Poly1305 => Algorithm::Chacha20Poly1305,
        p2::Algorithm::Aes128Gcm => Algorithm::Aes128Gcm,
        p2::Algorithm::Aes256Gcm => Algorithm::Aes256Gcm,
    }
}

fn error(e: p2::AeadError) -> AeadError {
    match e {
        p2::AeadError::InvalidKeyLength(n) => AeadError::InvalidKeyLength(n),
        p2::AeadError::InvalidNonceLength(n) => AeadError::InvalidNonceLength(n),
        p2::AeadError::TooLarge(n) => AeadError::TooLarge(n),
        p2::AeadError::TooManyKeys(n) => AeadError::TooManyKeys(n),
        p2::AeadError::AuthenticationFailed => AeadError::AuthenticationFailed,
    }
}

impl wit::Host for TetherCtxView<'_> {}

impl wit::HostPacketKey for TetherCtxView<'_> {
    fn create(
        &mut self,
        algorithm: Algorithm,
        key: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<PacketKey>, AeadError>> {
        Ok(self.aead_create(to_p2(algorithm), key)?.map_err(error))
    }

    fn algorithm(&mut self, this: Resource<PacketKey>) -> wasmtime::Result<Algorithm> {
        Ok(from_p2(self.table.get(&this)?.algorithm()))
    }

    fn seal(
        &mut self,
        this: Resource<PacketKey>,
        nonce: Vec<u8>,
        aad: Vec<u8>,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, AeadError>> {
        Ok(self
            .table
            .get(&this)?
            .seal(&nonce, &aad, payload)
            .map_err(error))
    }

    fn open(
        &mut self,
        this: Resource<PacketKey>,
        nonce: Vec<u8>,
        aad: Vec<u8>,
        sealed: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, AeadError>> {
        Ok(self
            .table
            .get(&this)?
            .open(&nonce, &aad, sealed)
            .map_err(error))
    }

    fn drop(&mut self, this: Resource<PacketKey>) -> wasmtime::Result<()> {
        self.aead_drop(this)
    }
}
