//! QUIC packet keys held by the host (`tether:streams/aead`): the bulk
//! cipher runs natively there (AES-GCM with AES instructions) instead of in
//! WebAssembly. `--aead host`, the default; `--aead guest` keeps every key
//! inside the guest. A key the host refuses (its `max_aead_keys` limit)
//! stays inside the guest too, so a busy server degrades in speed, never in
//! function.

use tether_guest_sdk::aead::{Algorithm, PacketKey};
use tether_quic::packet_protection::{AeadAlgorithm, ExternalAead, ExternalKey};
use tether_quic::rustls::Error;

/// The host's AEAD, as `tether_quic::config::Aead::External` takes it.
pub struct HostAead;

/// The one [`HostAead`].
pub static HOST_AEAD: HostAead = HostAead;

impl ExternalAead for HostAead {
    fn key(&self, algorithm: AeadAlgorithm, key: &[u8]) -> Option<Box<dyn ExternalKey>> {
        let algorithm = match algorithm {
            AeadAlgorithm::Aes128Gcm => Algorithm::Aes128Gcm,
            AeadAlgorithm::Aes256Gcm => Algorithm::Aes256Gcm,
            AeadAlgorithm::Chacha20Poly1305 => Algorithm::Chacha20Poly1305,
        };
        match PacketKey::create(algorithm, key) {
            Ok(k) => Some(Box::new(HostKey(k))),
            Err(e) => {
                eprintln!(
                    "quic-echo: host AEAD refused a key ({e:?}); this key stays in the guest"
                );
                None
            }
        }
    }
}

/// One packet key in the host.
struct HostKey(PacketKey);

impl ExternalKey for HostKey {
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], payload: &mut [u8]) -> Result<[u8; 16], Error> {
        let sealed = self
            .0
            .seal(nonce, aad, payload)
            .map_err(|_| Error::EncryptError)?;
        let (text, tag) = sealed.split_at(payload.len());
        payload.copy_from_slice(text);
        tag.try_into().map_err(|_| Error::EncryptError)
    }

    fn open(&self, nonce: &[u8; 12], aad: &[u8], sealed: &mut [u8]) -> Result<usize, Error> {
        // Any failure (a forged tag: `authentication-failed`) drops the
        // packet (RFC 9001 section 5.3).
        let plain = self
            .0
            .open(nonce, aad, sealed)
            .map_err(|_| Error::DecryptError)?;
        sealed[..plain.len()].copy_from_slice(&plain);
        Ok(plain.len())
    }
}
