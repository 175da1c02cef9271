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
//!
//! [`external_suites`] hands packet keys to an [`ExternalAead`] instead:
//! a guest's host (`tether:streams/aead`), which runs the AEAD natively.
//! Header protection stays with *ring* in the caller, and a key the
//! external AEAD refuses (its key limit) falls back to the built-in one.

use std::sync::{Mutex, OnceLock};

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
        Box::new(QuicPacketKey {
            key: Box::new(SimdChaCha(ChaCha20Poly1305::new(
                &ChaCha20Poly1305Key::from_bytes(bytes),
            ))),
            iv,
            algorithm: AeadAlgorithm::Chacha20Poly1305,
        })
    }

    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        self.ring_quic.header_protection_key(key)
    }

    fn aead_key_len(&self) -> usize {
        KEY_LEN
    }
}

/// `rscrypto`'s ChaCha20-Poly1305, as the sealer of a [`QuicPacketKey`].
struct SimdChaCha(ChaCha20Poly1305);

impl ExternalKey for SimdChaCha {
    fn seal(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        payload: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        let tag = self
            .0
            .encrypt_in_place(&Nonce96::from_bytes(*nonce), aad, payload)
            .map_err(|_| Error::EncryptError)?;
        tag.as_ref().try_into().map_err(|_| Error::EncryptError)
    }

    fn open(&self, nonce: &[u8; 12], aad: &[u8], sealed: &mut [u8]) -> Result<usize, Error> {
        let plain_len = sealed
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(Error::DecryptError)?;
        let (text, tag) = sealed.split_at_mut(plain_len);
        let tag = ChaCha20Poly1305::tag_from_slice(tag).map_err(|_| Error::DecryptError)?;
        self.0
            .decrypt_in_place(&Nonce96::from_bytes(*nonce), aad, text, &tag)
            .map_err(|_| Error::DecryptError)?;
        Ok(plain_len)
    }
}

/// The AEAD algorithms of TLS 1.3's QUIC suites (RFC 9001 section 5.3),
/// all with 12-byte nonces and 16-byte tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AeadAlgorithm {
    /// `TLS13_AES_128_GCM_SHA256`: 16-byte key.
    Aes128Gcm,
    /// `TLS13_AES_256_GCM_SHA384`: 32-byte key.
    Aes256Gcm,
    /// `TLS13_CHACHA20_POLY1305_SHA256`: 32-byte key.
    Chacha20Poly1305,
}

/// An AEAD run outside this crate (a guest's host), to which packet keys
/// are handed: see [`crate::config::Aead::External`].
pub trait ExternalAead: Send + Sync + 'static {
    /// A key for `algorithm` from `key`; `None` when the external side
    /// refuses it (e.g. its key limit), and the built-in AEAD is used for
    /// this key instead.
    fn key(&self, algorithm: AeadAlgorithm, key: &[u8]) -> Option<Box<dyn ExternalKey>>;
}

/// One packet key of an [`ExternalAead`].
pub trait ExternalKey: Send + Sync {
    /// Encrypts `payload` in place with `aad` (the packet header) under
    /// `nonce`; returns the 16-byte tag. Errors: the external side failed.
    fn seal(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        payload: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error>;
    /// Checks and decrypts `sealed` (ciphertext then 16-byte tag) in
    /// place; returns the plaintext length (the plaintext is
    /// `sealed[..len]`). Errors: [`Error::DecryptError`] for a bad tag.
    fn open(&self, nonce: &[u8; 12], aad: &[u8], sealed: &mut [u8]) -> Result<usize, Error>;
}

/// The three TLS 1.3 suites with their QUIC packet keys from `external`,
/// AES-128-GCM first (fastest where the external side has AES
/// instructions), then AES-256-GCM, then ChaCha20-Poly1305. Built once per
/// `external` object and kept for the process.
pub fn external_suites(external: &'static dyn ExternalAead) -> Vec<SupportedCipherSuite> {
    static BUILT: Mutex<Vec<(usize, [&'static Tls13CipherSuite; 3])>> = Mutex::new(Vec::new());
    let id = external as *const dyn ExternalAead as *const () as usize;
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, suites)) = built.iter().find(|(i, _)| *i == id) {
        return (*suites).map(SupportedCipherSuite::Tls13).to_vec();
    }
    use rustls::crypto::ring::cipher_suite as ring;
    let suite = |ring: SupportedCipherSuite, algorithm, fallback: &'static dyn quic::Algorithm| {
        let ring = ring.tls13().expect("a TLS 1.3 suite");
        let keys: &'static ExternalKeys = Box::leak(Box::new(ExternalKeys {
            external,
            algorithm,
            fallback,
            header: ring.quic.expect("ring's TLS 1.3 suites support QUIC"),
        }));
        let s: &'static Tls13CipherSuite = Box::leak(Box::new(Tls13CipherSuite {
            common: CipherSuiteCommon {
                suite: ring.common.suite,
                hash_provider: ring.common.hash_provider,
                confidentiality_limit: ring.common.confidentiality_limit,
            },
            hkdf_provider: ring.hkdf_provider,
            aead_alg: ring.aead_alg,
            quic: Some(keys),
        }));
        s
    };
    let quic_of = |s: SupportedCipherSuite| s.tls13().and_then(|s| s.quic).expect("QUIC suite");
    // In WebAssembly the fallback ChaCha20 key is the SIMD one.
    let chacha_fallback = if cfg!(target_family = "wasm") {
        quic_of(chacha20_poly1305_suite())
    } else {
        quic_of(ring::TLS13_CHACHA20_POLY1305_SHA256)
    };
    let suites = [
        suite(
            ring::TLS13_AES_128_GCM_SHA256,
            AeadAlgorithm::Aes128Gcm,
            quic_of(ring::TLS13_AES_128_GCM_SHA256),
        ),
        suite(
            ring::TLS13_AES_256_GCM_SHA384,
            AeadAlgorithm::Aes256Gcm,
            quic_of(ring::TLS13_AES_256_GCM_SHA384),
        ),
        suite(
            ring::TLS13_CHACHA20_POLY1305_SHA256,
            AeadAlgorithm::Chacha20Poly1305,
            chacha_fallback,
        ),
    ];
    built.push((id, suites));
    suites.map(SupportedCipherSuite::Tls13).to_vec()
}

/// The QUIC key builder of [`external_suites`]: packet keys from the
/// external AEAD (or `fallback` when it refuses), header protection keys
/// from *ring*.
struct ExternalKeys {
    external: &'static dyn ExternalAead,
    algorithm: AeadAlgorithm,
    fallback: &'static dyn quic::Algorithm,
    header: &'static dyn quic::Algorithm,
}

impl quic::Algorithm for ExternalKeys {
    fn packet_key(&self, key: AeadKey, iv: Iv) -> Box<dyn quic::PacketKey> {
        match self.external.key(self.algorithm, key.as_ref()) {
            Some(external) => Box::new(QuicPacketKey {
                key: external,
                iv,
                algorithm: self.algorithm,
            }),
            None => self.fallback.packet_key(key, iv),
        }
    }

    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        self.header.header_protection_key(key)
    }

    fn aead_key_len(&self) -> usize {
        self.fallback.aead_key_len()
    }
}

/// One direction's packet key: a sealer (an [`ExternalAead`]'s key, or
/// `rscrypto`'s ChaCha20-Poly1305) with the nonce of RFC 9001 section 5.3
/// and the limits of RFC 9001 section 6.6.
struct QuicPacketKey {
    key: Box<dyn ExternalKey>,
    iv: Iv,
    algorithm: AeadAlgorithm,
}

impl QuicPacketKey {
    fn nonce(&self, path_id: Option<u32>, packet_number: u64) -> [u8; 12] {
        match path_id {
            None => Nonce::new(&self.iv, packet_number).0,
            Some(path) => Nonce::for_path(path, &self.iv, packet_number).0,
        }
    }

    fn open<'a>(
        &self,
        nonce: [u8; 12],
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let len = self.key.open(&nonce, header, payload)?;
        Ok(&payload[..len])
    }
}

impl quic::PacketKey for QuicPacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        let tag = self
            .key
            .seal(&self.nonce(None, packet_number), header, payload)?;
        Ok(Tag::from(&tag[..]))
    }

    fn encrypt_in_place_for_path(
        &self,
        path_id: u32,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        let tag = self
            .key
            .seal(&self.nonce(Some(path_id), packet_number), header, payload)?;
        Ok(Tag::from(&tag[..]))
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

    /// RFC 9001 section 6.6: 2^23 packets for AES-GCM, no practical limit
    /// for ChaCha20-Poly1305.
    fn confidentiality_limit(&self) -> u64 {
        match self.algorithm {
            AeadAlgorithm::Chacha20Poly1305 => CONFIDENTIALITY_LIMIT,
            _ => 1 << 23,
        }
    }

    /// RFC 9001 section 6.6: 2^52 forged packets for AES-GCM, 2^36 for
    /// ChaCha20-Poly1305.
    fn integrity_limit(&self) -> u64 {
        match self.algorithm {
            AeadAlgorithm::Chacha20Poly1305 => INTEGRITY_LIMIT,
            _ => 1 << 52,
        }
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

    /// An external AEAD backed by *ring* directly, refusing keys once it
    /// holds `limit` (the host's key limit).
    struct RingExternal {
        made: std::sync::atomic::AtomicUsize,
        limit: usize,
    }

    struct RingExternalKey(ring::aead::LessSafeKey);

    impl ExternalAead for RingExternal {
        fn key(&self, algorithm: AeadAlgorithm, key: &[u8]) -> Option<Box<dyn ExternalKey>> {
            use std::sync::atomic::Ordering::Relaxed;
            if self.made.fetch_add(1, Relaxed) >= self.limit {
                return None;
            }
            let alg = match algorithm {
                AeadAlgorithm::Aes128Gcm => &ring::aead::AES_128_GCM,
                AeadAlgorithm::Aes256Gcm => &ring::aead::AES_256_GCM,
                AeadAlgorithm::Chacha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
            };
            let key = ring::aead::UnboundKey::new(alg, key).ok()?;
            Some(Box::new(RingExternalKey(ring::aead::LessSafeKey::new(key))))
        }
    }

    impl ExternalKey for RingExternalKey {
        fn seal(
            &self,
            nonce: &[u8; 12],
            aad: &[u8],
            payload: &mut [u8],
        ) -> Result<[u8; TAG_LEN], Error> {
            let tag = self
                .0
                .seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(*nonce),
                    ring::aead::Aad::from(aad),
                    payload,
                )
                .map_err(|_| Error::EncryptError)?;
            Ok(tag.as_ref().try_into().unwrap())
        }

        fn open(&self, nonce: &[u8; 12], aad: &[u8], sealed: &mut [u8]) -> Result<usize, Error> {
            self.0
                .open_in_place(
                    ring::aead::Nonce::assume_unique_for_key(*nonce),
                    ring::aead::Aad::from(aad),
                    sealed,
                )
                .map(|p| p.len())
                .map_err(|_| Error::DecryptError)
        }
    }

    /// Keys handed to an external AEAD protect packets exactly as *ring*'s
    /// own QUIC keys do, for each suite, AES-128-GCM first; once the
    /// external side refuses keys, the built-in key takes over, same bytes.
    #[test]
    fn external_keys_match_ring_and_fall_back() {
        static EXTERNAL: RingExternal = RingExternal {
            made: std::sync::atomic::AtomicUsize::new(0),
            limit: 6,
        };
        let suites = external_suites(&EXTERNAL);
        assert_eq!(
            suites.iter().map(|s| s.suite()).collect::<Vec<_>>(),
            [
                rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
                rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
                rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            ]
        );
        use rustls::crypto::ring::cipher_suite as rs;
        let refs = [
            rs::TLS13_AES_128_GCM_SHA256,
            rs::TLS13_AES_256_GCM_SHA384,
            rs::TLS13_CHACHA20_POLY1305_SHA256,
        ];
        // Two keys a suite a round: the first six external, the next six
        // built in.
        for round in 0..2 {
            for (suite, reference) in suites.iter().zip(refs) {
                let ours = suite.tls13().unwrap().quic.unwrap();
                let theirs = reference.tls13().unwrap().quic.unwrap();
                // Initial keys (RFC 9001 section 5.2) derived with each
                // suite's own hash and key length.
                let make = |quic: &'static dyn quic::Algorithm| {
                    quic::Suite {
                        suite: suite.tls13().unwrap(),
                        quic,
                    }
                    .keys(
                        &[0x83, 0x94, 0xc8, 0xf0],
                        rustls::Side::Client,
                        quic::Version::V1,
                    )
                    .local
                    .packet
                };
                let (a, b) = (make(ours), make(theirs));
                for len in [0, 1, 100, 1200, 16343] {
                    let plain: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
                    let (mut x, mut y) = (plain.clone(), plain.clone());
                    let tx = a.encrypt_in_place(99, b"hdr", &mut x).unwrap();
                    let ty = b.encrypt_in_place(99, b"hdr", &mut y).unwrap();
                    assert_eq!((&x, tx.as_ref()), (&y, ty.as_ref()), "round {round}");
                    x.extend_from_slice(tx.as_ref());
                    assert_eq!(
                        a.decrypt_in_place(99, b"hdr", &mut x.clone()).unwrap(),
                        &plain[..]
                    );
                    let last = x.len() - 1;
                    x[last] ^= 1;
                    assert!(
                        a.decrypt_in_place(99, b"hdr", &mut x).is_err(),
                        "forged tag"
                    );
                }
                assert_eq!(
                    (a.confidentiality_limit(), a.integrity_limit()),
                    (b.confidentiality_limit(), b.integrity_limit())
                );
            }
        }
        assert_eq!(EXTERNAL.made.load(std::sync::atomic::Ordering::Relaxed), 12);
    }
}
