//! `caching_sha2_password` full authentication without TLS: the password, NUL-terminated and
//! XORed with the login's 20-byte nonce (repeated), encrypted with the server's RSA public key
//! (RSA-OAEP with SHA-1 and MGF1-SHA-1, as MySQL 8.0.5 and later decrypt it). MySQL's client does
//! the same (`sql-common/client_authentication.cc`: `xor_string`, then `RSA_public_encrypt` with
//! `RSA_PKCS1_OAEP_PADDING`). The server sends its key (`0x01` + PEM) when asked with `0x02`.

use mysql_common::crypto::rsa::{GetRandom, Pkcs1OaepPadding, PublicKey};

/// Why the password could not be encrypted for the server.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RsaError {
    #[error("the server's RSA public key is not a PEM RSA public key")]
    BadKey,
    #[error("the password is too long for the server's {0}-bit RSA key")]
    TooLong(usize),
}

/// The password (NUL added) XORed with `nonce`, repeated over its length.
pub fn xor_with_nonce(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    let nonce = &nonce[..nonce.len().min(20)];
    let mut out = password.to_vec();
    out.push(0);
    if nonce.is_empty() {
        return out;
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b ^= nonce[i % nonce.len()];
    }
    out
}

/// The response to the server's public key: `password` XORed with `nonce`, RSA-OAEP encrypted
/// with the key in `pem`.
pub fn encrypt_password(password: &[u8], nonce: &[u8], pem: &[u8]) -> Result<Vec<u8>, RsaError> {
    let key = parse_key(pem)?;
    // OAEP with SHA-1 carries at most k - 2*20 - 2 bytes.
    let room = key.num_octets().saturating_sub(42);
    let plain = xor_with_nonce(password, nonce);
    if plain.len() > room {
        return Err(RsaError::TooLong(key.modulus().bits() as usize));
    }
    Ok(key.encrypt_block(plain, Pkcs1OaepPadding::new(GetRandom)))
}

/// mysql_common's PEM reader panics on input it cannot read; the key comes from the network, so
/// the panic is caught and becomes an error (a PEM that is not one, a truncated key). Checked
/// first: the markers, which catches what a confused server would send.
fn parse_key(pem: &[u8]) -> Result<PublicKey, RsaError> {
    let text = std::str::from_utf8(pem).map_err(|_| RsaError::BadKey)?;
    if !text.contains("-----BEGIN") || !text.contains("PUBLIC KEY-----") {
        return Err(RsaError::BadKey);
    }
    let owned = pem.to_vec();
    let key = std::panic::catch_unwind(move || PublicKey::from_pem(owned))
        .map_err(|_| RsaError::BadKey)?;
    // A key too small to carry anything is no key a server uses.
    if key.num_octets() < 64 {
        return Err(RsaError::BadKey);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use sha1::{Digest, Sha1};

    /// A 1024-bit key made with `openssl genrsa 1024` for these tests only.
    const PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCiDZNUqMJLvzfZR/fdfI2fYsim
W5R+9+fyutmx1yK1OY7qLj2y+iZVMmKexrYyJMyHbnkNrFn7RdksUx589bqqzVuX
cDey9mJBbpzFkJTHLbvEFC42yVZix2lHZwSfbrGha2TB57KpL9lv+n1yBsy3h38v
D2s9SfUUul/S3TGVrwIDAQAB
-----END PUBLIC KEY-----
";
    const MODULUS_HEX: &str = "a20d9354a8c24bbf37d947f7dd7c8d9f62c8a65b947ef7e7f2bad9b1d722b5398eea2e3db2fa265532629ec6b63224cc876e790dac59fb45d92c531e7cf5baaacd5b977037b2f662416e9cc59094c72dbbc4142e36c95662c7694767049f6eb1a16b64c1e7b2a92fd96ffa7d7206ccb7877f2f0f6b3d49f514ba5fd2dd3195af";
    const PRIVATE_EXPONENT_HEX: &str = "80d98474c2fe42161784f73938ed88f9db24a94995e7e29b959f45eaa6a15d3117d651d01317dd14cecc256ce07f3c4d37bdfa188a1abdb50af9b8593c8871d38b1b1edafc540f9aac01ed1157f0d4de3b80d809b31fb4bb01ddc1972c8b0619c2ed3a36b78b077dc246dd2655bd45330b6b4900a332a8422b49d7b7de817679";

    fn nonce() -> Vec<u8> {
        (1..=20).collect()
    }

    #[test]
    fn xor_matches_mysqls_xor_string() {
        // "secret\0" ^ 01 02 03 04 05 06 07, worked by hand.
        assert_eq!(
            xor_with_nonce(b"secret", &nonce()),
            [0x72, 0x67, 0x60, 0x76, 0x60, 0x72, 0x07]
        );
        // Past 20 bytes the nonce starts again: byte 20 is 'a' ^ 0x01, the NUL (25) is 0x06.
        let long = xor_with_nonce(&[b'a'; 25], &nonce());
        assert_eq!(long.len(), 26);
        assert_eq!(long[19], b'a' ^ 20);
        assert_eq!(long[20], b'a' ^ 0x01);
        assert_eq!(long[25], 0x06);
        // A nonce sent with its terminating NUL (21 bytes) is the same nonce.
        let mut with_nul = nonce();
        with_nul.push(0);
        assert_eq!(
            xor_with_nonce(&[b'a'; 25], &with_nul),
            xor_with_nonce(&[b'a'; 25], &nonce())
        );
    }

    fn mgf1(seed: &[u8], len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut counter = 0u32;
        while out.len() < len {
            let mut h = Sha1::new();
            h.update(seed);
            h.update(counter.to_be_bytes());
            out.extend_from_slice(&h.finalize());
            counter += 1;
        }
        out.truncate(len);
        out
    }

    /// RSA decryption with the private key and OAEP decoding (RFC 8017 §7.1.2), as the server does.
    fn server_decrypts(cipher: &[u8]) -> Vec<u8> {
        let n = BigUint::parse_bytes(MODULUS_HEX.as_bytes(), 16).unwrap();
        let d = BigUint::parse_bytes(PRIVATE_EXPONENT_HEX.as_bytes(), 16).unwrap();
        let k = 128;
        assert_eq!(cipher.len(), k, "a ciphertext is as long as the modulus");
        let m = BigUint::from_bytes_be(cipher).modpow(&d, &n).to_bytes_be();
        let mut em = vec![0u8; k - m.len()];
        em.extend_from_slice(&m);
        assert_eq!(em[0], 0);
        let (masked_seed, masked_db) = em[1..].split_at(20);
        let seed: Vec<u8> = masked_seed
            .iter()
            .zip(mgf1(masked_db, 20))
            .map(|(a, b)| a ^ b)
            .collect();
        let db: Vec<u8> = masked_db
            .iter()
            .zip(mgf1(&seed, k - 21))
            .map(|(a, b)| a ^ b)
            .collect();
        assert_eq!(&db[..20], &Sha1::digest(b"")[..], "label hash");
        let one = db[20..].iter().position(|&b| b != 0).unwrap() + 20;
        assert_eq!(db[one], 1);
        db[one + 1..].to_vec()
    }

    #[test]
    fn the_server_gets_the_password_back() {
        let cipher = encrypt_password(b"s3cret pw", &nonce(), PUBLIC_PEM.as_bytes()).unwrap();
        let plain = server_decrypts(&cipher);
        assert_eq!(plain, xor_with_nonce(b"s3cret pw", &nonce()));
        // The server's own last step: XOR again, and the NUL-terminated password is there.
        let password: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ nonce()[i % 20])
            .collect();
        assert_eq!(password, b"s3cret pw\0");
        // Randomised padding: the same password encrypts differently each time.
        let again = encrypt_password(b"s3cret pw", &nonce(), PUBLIC_PEM.as_bytes()).unwrap();
        assert_ne!(cipher, again);
        assert_eq!(server_decrypts(&again), plain);
    }

    #[test]
    fn bad_keys_and_long_passwords_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"not a key",
            b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n",
            b"-----BEGIN PUBLIC KEY-----\nMIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCiDZNU\n-----END PUBLIC KEY-----\n",
            &[0xff, 0xfe, 0x00],
        ] {
            assert_eq!(encrypt_password(b"pw", &nonce(), bad), Err(RsaError::BadKey));
        }
        // 1024-bit key: at most 128 - 42 = 86 bytes, the NUL included.
        assert!(encrypt_password(&[b'x'; 85], &nonce(), PUBLIC_PEM.as_bytes()).is_ok());
        assert_eq!(
            encrypt_password(&[b'x'; 86], &nonce(), PUBLIC_PEM.as_bytes()),
            Err(RsaError::TooLong(1024))
        );
    }
}
