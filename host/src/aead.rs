//! `tether:streams/aead`: AEAD packet keys held by the host, so a guest's
//! bulk cipher (QUIC packet protection, RFC 9001 section 5.3) runs as
//! native code from *ring* (AES-NI, assembly ChaCha20-Poly1305) instead of
//! in WebAssembly.
//!
//! The security argument is in `wit/tether.wit` (interface `aead`): the
//! host is trusted, a key is a resource of one instance's table and is
//! dropped with it, and nothing here logs key bytes, nonces, associated
//! data or payloads. The key bytes the guest passed are overwritten
//! ([`zeroize`]) once *ring* has expanded them.
//!
//! Limits: [`MAX_PAYLOAD_BYTES`] per call (payload, sealed input and
//! associated data alike) and `Limits::max_aead_keys` live keys per
//! instance; both are errors, never traps.

use ring::aead::{
    AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey,
};
use wasmtime::component::Resource;
use zeroize::Zeroize;

use crate::TetherCtxView;
use crate::bindings::tether::streams::aead as wit;
pub use wit::{AeadError, Algorithm};

/// The most bytes one `seal` or `open` call takes as payload (or sealed
/// input, or associated data): 64 KiB, above QUIC's largest datagram
/// (65,527 bytes, RFC 9000 section 18.2). Over it the call fails with
/// [`AeadError::TooLarge`].
pub const MAX_PAYLOAD_BYTES: usize = 64 << 10;

/// Nonce length of every algorithm here, bytes.
pub const NONCE_LEN: usize = 12;

/// Tag length of every algorithm here, bytes.
pub const TAG_LEN: usize = 16;

/// One packet key: an algorithm and its expanded key, owned by one guest.
pub struct PacketKey {
    algorithm: Algorithm,
    key: LessSafeKey,
}

impl std::fmt::Debug for PacketKey {
    /// The algorithm only: key material is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketKey")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Key length of `algorithm`, bytes.
pub fn key_len(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::Aes128Gcm => 16,
        Algorithm::Aes256Gcm | Algorithm::Chacha20Poly1305 => 32,
    }
}

fn nonce(bytes: &[u8]) -> Result<Nonce, AeadError> {
    Nonce::try_assume_unique_for_key(bytes)
        .map_err(|_| AeadError::InvalidNonceLength(NONCE_LEN as u32))
}

fn bounded(bytes: &[u8]) -> Result<(), AeadError> {
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(AeadError::TooLarge(MAX_PAYLOAD_BYTES as u32));
    }
    Ok(())
}

impl PacketKey {
    /// A key for `algorithm` from `key` (16 bytes for AES-128-GCM, 32
    /// otherwise). `key` is overwritten with zeros in every case.
    ///
    /// Errors: [`AeadError::InvalidKeyLength`] with the required length.
    pub fn new(algorithm: Algorithm, mut key: Vec<u8>) -> Result<PacketKey, AeadError> {
        let ring_alg = match algorithm {
            Algorithm::Chacha20Poly1305 => &CHACHA20_POLY1305,
            Algorithm::Aes128Gcm => &AES_128_GCM,
            Algorithm::Aes256Gcm => &AES_256_GCM,
        };
        let unbound = UnboundKey::new(ring_alg, &key);
        key.zeroize();
        let unbound =
            unbound.map_err(|_| AeadError::InvalidKeyLength(key_len(algorithm) as u32))?;
        Ok(PacketKey {
            algorithm,
            key: LessSafeKey::new(unbound),
        })
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Encrypts `payload` in place with `aad` under the 12-byte `nonce` and
    /// appends the 16-byte tag: returns `payload.len() + 16` bytes.
    ///
    /// Errors: [`AeadError::InvalidNonceLength`], [`AeadError::TooLarge`]
    /// (payload or `aad` over [`MAX_PAYLOAD_BYTES`]).
    pub fn seal(
        &self,
        nonce_bytes: &[u8],
        aad: &[u8],
        mut payload: Vec<u8>,
    ) -> Result<Vec<u8>, AeadError> {
        bounded(&payload)?;
        bounded(aad)?;
        let nonce = nonce(nonce_bytes)?;
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut payload)
            // ring refuses only inputs beyond the algorithm's maximum
            // (gigabytes), which the bound above excludes.
            .map_err(|_| AeadError::TooLarge(MAX_PAYLOAD_BYTES as u32))?;
        payload.extend_from_slice(tag.as_ref());
        Ok(payload)
    }

    /// Checks and decrypts `sealed` (ciphertext then 16-byte tag) with
    /// `aad` under `nonce`: returns the plaintext, `sealed.len() - 16`
    /// bytes.
    ///
    /// Errors: [`AeadError::AuthenticationFailed`] (wrong tag, key, nonce
    /// or `aad`, or fewer than 16 bytes), [`AeadError::InvalidNonceLength`],
    /// [`AeadError::TooLarge`] (`sealed` over [`MAX_PAYLOAD_BYTES`] + 16,
    /// or `aad` over [`MAX_PAYLOAD_BYTES`]).
    pub fn open(
        &self,
        nonce_bytes: &[u8],
        aad: &[u8],
        mut sealed: Vec<u8>,
    ) -> Result<Vec<u8>, AeadError> {
        // What `seal` makes of the largest payload opens again.
        bounded(sealed.get(TAG_LEN..).unwrap_or_default())?;
        bounded(aad)?;
        let nonce = nonce(nonce_bytes)?;
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut sealed)
            .map_err(|_| AeadError::AuthenticationFailed)?
            .len();
        sealed.truncate(plain_len);
        Ok(sealed)
    }
}

impl wit::Host for TetherCtxView<'_> {}

impl TetherCtxView<'_> {
    /// `packet-key.create` for both ABIs: the key limit, then the key.
    pub(crate) fn aead_create(
        &mut self,
        algorithm: Algorithm,
        mut key: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<PacketKey>, AeadError>> {
        let max = self.ctx.host.config.limits.max_aead_keys;
        if self.ctx.aead_keys >= max {
            key.zeroize();
            return Ok(Err(AeadError::TooManyKeys(
                u32::try_from(max).unwrap_or(u32::MAX),
            )));
        }
        let key = match PacketKey::new(algorithm, key) {
            Ok(k) => k,
            Err(e) => return Ok(Err(e)),
        };
        let r = self.table.push(key)?;
        self.ctx.aead_keys += 1;
        Ok(Ok(r))
    }

    /// `packet-key` drop for both ABIs: frees the key and its place.
    pub(crate) fn aead_drop(&mut self, this: Resource<PacketKey>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        self.ctx.aead_keys -= 1;
        Ok(())
    }
}

impl wit::HostPacketKey for TetherCtxView<'_> {
    fn create(
        &mut self,
        algorithm: Algorithm,
        key: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<PacketKey>, AeadError>> {
        self.aead_create(algorithm, key)
    }

    fn algorithm(&mut self, this: Resource<PacketKey>) -> wasmtime::Result<Algorithm> {
        Ok(self.table.get(&this)?.algorithm())
    }

    fn seal(
        &mut self,
        this: Resource<PacketKey>,
        nonce: Vec<u8>,
        aad: Vec<u8>,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, AeadError>> {
        Ok(self.table.get(&this)?.seal(&nonce, &aad, payload))
    }

    fn open(
        &mut self,
        this: Resource<PacketKey>,
        nonce: Vec<u8>,
        aad: Vec<u8>,
        sealed: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, AeadError>> {
        Ok(self.table.get(&this)?.open(&nonce, &aad, sealed))
    }

    fn drop(&mut self, this: Resource<PacketKey>) -> wasmtime::Result<()> {
        self.aead_drop(this)
    }
}

/// One line for people about an [`AeadError`].
pub fn describe(e: &AeadError) -> String {
    match e {
        AeadError::InvalidKeyLength(n) => format!("invalid key length (must be {n} bytes)"),
        AeadError::InvalidNonceLength(n) => format!("invalid nonce length (must be {n} bytes)"),
        AeadError::TooLarge(n) => format!("too large (at most {n} bytes per call)"),
        AeadError::TooManyKeys(n) => format!("too many live keys (at most {n} per instance)"),
        AeadError::AuthenticationFailed => "authentication failed (tag mismatch)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 9001 Appendix A.5: ChaCha20-Poly1305 short-header packet,
    /// packet number 654360564 (nonce = IV XOR packet number), payload `01`.
    #[test]
    fn seals_and_opens_the_rfc_9001_a5_packet() {
        let key = PacketKey::new(
            Algorithm::Chacha20Poly1305,
            hex("c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8"),
        )
        .unwrap();
        let mut nonce = hex("e0459b3474bdd0e44a41c144");
        for (i, b) in 654360564u64.to_be_bytes().iter().enumerate() {
            nonce[4 + i] ^= b;
        }
        let header = hex("4200bff4");
        let sealed = key.seal(&nonce, &header, vec![1]).unwrap();
        assert_eq!(sealed, hex("655e5cd55c41f69080575d7999c25a5bfb"));
        assert_eq!(key.open(&nonce, &header, sealed).unwrap(), [1]);
    }

    /// Same bytes as *ring*'s sealing API used directly, for each
    /// algorithm, with lengths around block sizes and a full datagram.
    #[test]
    fn matches_ring_for_every_algorithm() {
        for (alg, ring_alg) in [
            (Algorithm::Chacha20Poly1305, &CHACHA20_POLY1305),
            (Algorithm::Aes128Gcm, &AES_128_GCM),
            (Algorithm::Aes256Gcm, &AES_256_GCM),
        ] {
            let key_bytes: Vec<u8> = (0..key_len(alg) as u8).map(|i| i.wrapping_mul(7)).collect();
            let key = PacketKey::new(alg, key_bytes.clone()).unwrap();
            let reference = LessSafeKey::new(UnboundKey::new(ring_alg, &key_bytes).unwrap());
            for len in [0, 1, 15, 16, 17, 63, 64, 65, 1200, 16383, MAX_PAYLOAD_BYTES] {
                let nonce = [len as u8; 12];
                let aad = [0x40, 1, 2, 3];
                let plain: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                let sealed = key.seal(&nonce, &aad, plain.clone()).unwrap();
                let mut expected = plain.clone();
                let tag = reference
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(&aad),
                        &mut expected,
                    )
                    .unwrap();
                expected.extend_from_slice(tag.as_ref());
                assert_eq!(sealed, expected, "{alg:?} length {len}");
                assert_eq!(key.open(&nonce, &aad, sealed).unwrap(), plain);
            }
        }
    }

    /// `AeadError` (generated) has no `PartialEq`: compare its `Debug`.
    fn dbg(e: AeadError) -> String {
        format!("{e:?}")
    }

    #[test]
    fn hostile_inputs_are_errors() {
        assert_eq!(
            dbg(PacketKey::new(Algorithm::Aes128Gcm, vec![0; 32]).unwrap_err()),
            dbg(AeadError::InvalidKeyLength(16))
        );
        assert_eq!(
            dbg(PacketKey::new(Algorithm::Chacha20Poly1305, vec![0; 16]).unwrap_err()),
            dbg(AeadError::InvalidKeyLength(32))
        );
        let key = PacketKey::new(Algorithm::Aes256Gcm, vec![9; 32]).unwrap();
        let n = [0u8; 12];
        assert_eq!(
            dbg(key
                .seal(&n, b"", vec![0; MAX_PAYLOAD_BYTES + 1])
                .unwrap_err()),
            dbg(AeadError::TooLarge(MAX_PAYLOAD_BYTES as u32))
        );
        assert_eq!(
            dbg(key
                .seal(&n, &vec![0; MAX_PAYLOAD_BYTES + 1], vec![])
                .unwrap_err()),
            dbg(AeadError::TooLarge(MAX_PAYLOAD_BYTES as u32))
        );
        assert_eq!(
            dbg(key
                .open(&n, b"", vec![0; MAX_PAYLOAD_BYTES + TAG_LEN + 1])
                .unwrap_err()),
            dbg(AeadError::TooLarge(MAX_PAYLOAD_BYTES as u32))
        );
        assert_eq!(
            dbg(key.seal(&[0u8; 11], b"", vec![1]).unwrap_err()),
            dbg(AeadError::InvalidNonceLength(12))
        );
        let mut sealed = key.seal(&n, b"hdr", b"hello".to_vec()).unwrap();
        *sealed.last_mut().unwrap() ^= 1;
        assert_eq!(
            dbg(key.open(&n, b"hdr", sealed).unwrap_err()),
            dbg(AeadError::AuthenticationFailed),
            "a forged tag"
        );
        let sealed = key.seal(&n, b"hdr", b"hello".to_vec()).unwrap();
        assert_eq!(
            dbg(key.open(&n, b"other", sealed.clone()).unwrap_err()),
            dbg(AeadError::AuthenticationFailed),
            "other associated data"
        );
        assert_eq!(
            dbg(key.open(&n, b"hdr", sealed[..15].to_vec()).unwrap_err()),
            dbg(AeadError::AuthenticationFailed),
            "shorter than a tag"
        );
        assert_eq!(
            key.open(&n, b"hdr", sealed).unwrap(),
            b"hello",
            "still serving"
        );
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = PacketKey::new(Algorithm::Aes128Gcm, vec![0xab; 16]).unwrap();
        let text = format!("{key:?}");
        assert!(!text.contains("ab") && !text.contains("171"), "{text}");
    }
}
