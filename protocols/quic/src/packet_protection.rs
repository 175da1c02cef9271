//! QUIC packet protection with ChaCha20-Poly1305 from `rscrypto`, whose
//! WebAssembly SIMD (`simd128`) ChaCha20 runs about twice as fast as
//! *ring*'s portable one inside a guest.
//!
//! Source: RFC 9001 section 5.3 (AEAD usage: the nonce is the IV XORed with
//! the packet number, the header is the associated data) and RFC 8439 (the
//! AEAD itself). Only the packet key changes; the TLS 1.3 record layer and
//! header protection (RFC 9001 section 5.4) stay with *ring*, since neither
//! is on the bulk path.
//!
//! [`chacha20_poly1305_suite`] is *ring*'s `TLS13_CHACHA20_POLY1305_SHA256`
//! with this packet key. [`crate::config`] uses it in WebAssembly builds;
//! natively *ring*'s assembly is as fast, so nothing changes there. The
//! wire format is the same either way, which the tests check against
//! *ring* and against RFC 9001 Appendix A.5.

use std::sync::OnceLock;

use rscrypto::aead::expert::AeadWithNonce;
use rscrypto::aead::{ChaCha20Poly1305, ChaCha20Poly1305Key, Nonce96};
use rustls::crypto::cipher::{AeadKey, Iv, Nonce};
use rustls::quic::{self, HeaderProtectionKey, Tag};
use rustls::{CipherSuiteCommon, Error, SupportedCipherSuite, Tls13CipherSuite};

/// Tag length of ChaCha20-Poly1305, bytes (RFC 8439 section 2.8).
const TAG_LEN: usize = 16;
/// Key length of ChaCha20-Poly1305, bytes (RFC 8439 section 2.8).
const KEY_LEN: usize = 32;
/// Packets one key may protect: no practical limit for ChaCha20-Poly1305
/// (RFC 9001 section 6.6).
const CONFIDENTIALITY_LIMIT: u64 = u64::MAX;
/// Forged packets a key may see before the connection must close: 2^36
/// (RFC 9001 section 6.6).
const INTEGRITY_LIMIT: u64 = 1 << 36;

/// *ring*'s `TLS13_CHACHA20_POLY1305_SHA256` suite with its QUIC packet
/// keys from [`PacketKeys`]; built once, lives for the process.
pub fn chacha20_poly1305_suite() -> SupportedCipherSuite {
    static SUITE: OnceLock<&'static Tls13CipherSuite> = OnceLock::new();
    let suite = SUITE.get_or_init(|| {
        let ring = ring_suite();
        let ring_quic = ring.quic.expect("ring's TLS 1.3 suites support QUIC");
        let keys: &'static PacketKeys = Box::leak(Box::new(PacketKeys { ring_quic }));
        Box::leak(Box::new(Tls13CipherSuite {
            common: CipherSuiteCommon {
                suite: ring.common.suite,
                hash_provider: ring.common.hash_provider,
                confidentiality_limit: ring.common.confidentiality_limit,
            },
            hkdf_provider: ring.hkdf_provider,
            aead_alg: ring.aead_alg,
            quic: Some(keys),
        }))
    });
    SupportedCipherSuite::Tls13(suite)
}

/// *ring*'s `TLS13_CHACHA20_POLY1305_SHA256`.
fn ring_suite() -> &'static Tls13CipherSuite {
    rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256
        .tls13()
        .expect("TLS13_CHACHA20_POLY1305_SHA256 is a TLS 1.3 suite")
}

/// The QUIC key builder of [`chacha20_poly1305_suite`]: packet keys from
/// `rscrypto`, header protection keys from *ring*.
struct PacketKeys {
    ring_quic: &'static dyn quic::Algorithm,
}

impl quic::Algorithm for PacketKeys {
    fn packet_key(&self, key: AeadKey, iv: Iv) -> Box<dyn quic::PacketKey> {
        let bytes: [u8; KEY_LEN] = key
            .as_ref()
            .try_into()
            .expect("rustls derives 32-byte keys for ChaCha20-Poly1305");
        Box::new(PacketKey {
            aead: ChaCha20Poly1305::new(&ChaCha20Poly1305Key::from_bytes(bytes)),
            iv,
        })
    }

    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        self.ring_quic.header_protection_key(key)
    }

    fn aead_key_len(&self) -> usize {
        KEY_LEN
    }
}

/// One direction's packet key: ChaCha20-Poly1305 with the nonce of RFC 9001
/// section 5.3.
struct PacketKey {
    aead: ChaCha20Poly1305,
    iv: Iv,
}

impl PacketKey {
    fn nonce(&self, path_id: Option<u32>, packet_number: u64) -> Nonce96 {
        let nonce = match path_id {
            None => Nonce::new(&self.iv, packet_number),
            Some(path) => Nonce::for_path(path, &self.iv, packet_number),
        };
        Nonce96::from_bytes(nonce.0)
    }

    fn seal(&self, nonce: Nonce96, header: &[u8], payload: &mut [u8]) -> Result<Tag, Error> {
        let tag = self
            .aead
            .encrypt_in_place(&nonce, header, payload)
            .map_err(|_| Error::EncryptError)?;
        Ok(Tag::from(tag.as_ref()))
    }

    fn open<'a>(
        &self,
        nonce: Nonce96,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let plain_len = payload
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(Error::DecryptError)?;
        let (text, tag) = payload.split_at_mut(plain_len);
        let tag = ChaCha20Poly1305::tag_from_slice(tag).map_err(|_| Error::DecryptError)?;
        self.aead
            .decrypt_in_place(&nonce, header, text, &tag)
            .map_err(|_| Error::DecryptError)?;
        Ok(&payload[..plain_len])
    }
}

impl quic::PacketKey for PacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        self.seal(self.nonce(None, packet_number), header, payload)
    }

    fn encrypt_in_place_for_path(
        &self,
        path_id: u32,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        self.seal(self.nonce(Some(path_id), packet_number), header, payload)
    }

    fn decrypt_in_place<'a>(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        self.open(self.nonce(None, packet_number), header, payload)
    }

    fn decrypt_in_place_for_path<'a>(
        &self,
        path_id: u32,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        self.open(self.nonce(Some(path_id), packet_number), header, payload)
    }

    fn tag_len(&self) -> usize {
        TAG_LEN
    }

    fn confidentiality_limit(&self) -> u64 {
        CONFIDENTIALITY_LIMIT
    }

    fn integrity_limit(&self) -> u64 {
        INTEGRITY_LIMIT
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

    fn ring_quic() -> &'static dyn quic::Algorithm {
        ring_suite().quic.unwrap()
    }

    fn ours() -> &'static dyn quic::Algorithm {
        chacha20_poly1305_suite().tls13().unwrap().quic.unwrap()
    }

    fn key(bytes: &[u8]) -> AeadKey {
        let mut k = [0u8; 32];
        k.copy_from_slice(bytes);
        AeadKey::from(k)
    }

    fn iv(bytes: &[u8]) -> Iv {
        Iv::from(<[u8; 12]>::try_from(bytes).unwrap())
    }

    /// RFC 9001 Appendix A.5: the short-header packet protected with
    /// ChaCha20-Poly1305, packet number 654360564, payload `01`.
    #[test]
    fn protects_the_rfc_9001_a5_packet() {
        let k = ours().packet_key(
            key(&hex(
                "c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8",
            )),
            iv(&hex("e0459b3474bdd0e44a41c144")),
        );
        let header = hex("4200bff4");
        let mut payload = vec![0x01];
        let tag = k
            .encrypt_in_place(654360564, &header, &mut payload)
            .unwrap();
        payload.extend_from_slice(tag.as_ref());
        assert_eq!(payload, hex("655e5cd55c41f69080575d7999c25a5bfb"));

        let plain = k
            .decrypt_in_place(654360564, &header, &mut payload)
            .unwrap();
        assert_eq!(plain, [0x01]);
    }

    /// Same bytes as *ring* for every length around the SIMD block sizes
    /// (64 and 256 bytes) and a full 16 KiB datagram, both ways.
    #[test]
    fn matches_ring_byte_for_byte() {
        let key_bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(7)).collect();
        let iv_bytes: Vec<u8> = (0..12u8).map(|i| i ^ 0x5a).collect();
        let ring_key = ring_quic().packet_key(key(&key_bytes), iv(&iv_bytes));
        let our_key = ours().packet_key(key(&key_bytes), iv(&iv_bytes));
        let header = [0x40, 1, 2, 3, 4, 5, 6];
        let lengths = (0..300).chain([1000, 1200, 4095, 4096, 16383 - 40]);
        for (pn, len) in lengths.enumerate() {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 + pn) as u8).collect();
            let pn = pn as u64 * 977;

            let mut a = plain.clone();
            let tag_a = ring_key.encrypt_in_place(pn, &header, &mut a).unwrap();
            let mut b = plain.clone();
            let tag_b = our_key.encrypt_in_place(pn, &header, &mut b).unwrap();
            assert_eq!((&a, tag_a.as_ref()), (&b, tag_b.as_ref()), "length {len}");

            b.extend_from_slice(tag_b.as_ref());
            let opened = our_key.decrypt_in_place(pn, &header, &mut b).unwrap();
            assert_eq!(opened, &plain[..], "length {len}");
        }
    }

    #[test]
    fn refuses_a_forged_or_truncated_packet() {
        let k = ours().packet_key(key(&[9; 32]), iv(&[1; 12]));
        let mut packet = b"hello, quic".to_vec();
        let tag = k.encrypt_in_place(7, b"hdr", &mut packet).unwrap();
        packet.extend_from_slice(tag.as_ref());

        for flip in [0, packet.len() - 1] {
            let mut forged = packet.clone();
            forged[flip] ^= 1;
            assert!(k.decrypt_in_place(7, b"hdr", &mut forged).is_err());
        }
        let mut wrong_header = packet.clone();
        assert!(k.decrypt_in_place(7, b"hdx", &mut wrong_header).is_err());
        let mut wrong_number = packet.clone();
        assert!(k.decrypt_in_place(8, b"hdr", &mut wrong_number).is_err());
        assert!(k.decrypt_in_place(7, b"hdr", &mut [0u8; 15]).is_err());
    }
}
