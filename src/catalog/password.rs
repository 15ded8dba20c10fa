//! SCRAM-SHA-256 password verifiers (RFC 5802, RFC 7677), the only form in which Weir keeps a
//! password: `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, base64 parts, the
//! text PostgreSQL stores in `pg_authid.rolpassword` (a verifier copied from PostgreSQL works
//! here, and the other way round).
//!
//! - [`Verifier::from_password`] makes one with a fresh salt from the operating system's CSPRNG
//!   (`ring::rand::SystemRandom`); the password itself is dropped.
//! - [`Verifier::check_proof`] checks a client's proof of an exchange and gives the server's
//!   signature: a verifier lets the server check a client without being able to log in as it
//!   (it holds neither the password nor the salted password).
//! - [`random_bytes`]: salts and nonces.
//!
//! Used by the roles registry ([`crate::catalog::access`]), which stores verifiers, and by the
//! server's SASL exchange (`server::scram`), which checks them.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};

use crate::error::{Result, SqlState, WeirError};

/// PostgreSQL's default (`scram_iterations`).
pub const DEFAULT_ITERATIONS: u32 = 4096;

const PREFIX: &str = "SCRAM-SHA-256$";

/// The most iterations a verifier may ask for: a client hashes that many times at each login
/// and the cleartext method the server too (PostgreSQL's `scram_iterations` allows more; no
/// one needs them).
const MAX_ITERATIONS: u32 = 1_000_000;

/// A SCRAM-SHA-256 verifier.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(SCRAM-SHA-256)")
    }
}

/// `n` bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    SystemRandom::new().fill(&mut out).expect("the operating system's random number generator failed");
    out
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let tag = hmac::sign(&key, message);
    tag.as_ref().try_into().expect("HMAC-SHA-256 is 32 bytes")
}

/// Whether two keys are equal, in a time that does not depend on where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest::digest(&digest::SHA256, bytes).as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// The password as SCRAM hashes it: SASLprep-normalised when it can be, else its bytes as they
/// are (what PostgreSQL does with passwords SASLprep refuses).
fn normalized(password: &str) -> Vec<u8> {
    match stringprep::saslprep(password) {
        Ok(p) => p.as_bytes().to_vec(),
        Err(_) => password.as_bytes().to_vec(),
    }
}

impl Verifier {
    /// A verifier of `password` with a new random salt.
    pub fn from_password(password: &str) -> Verifier {
        Self::with_salt(password, &random_bytes::<16>(), DEFAULT_ITERATIONS)
    }

    fn with_salt(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let mut salted = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            std::num::NonZeroU32::new(iterations.max(1)).expect("at least one iteration"),
            salt,
            &normalized(password),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        }
    }

    /// A verifier no password matches, for a name that is no role: its salt derived from
    /// `secret` and `name` (the same at every attempt), its keys random. Nothing is hashed.
    pub fn unmatchable(secret: &[u8], name: &str) -> Verifier {
        let salt = hmac_sha256(secret, name.as_bytes())[..16].to_vec();
        Verifier {
            iterations: DEFAULT_ITERATIONS,
            salt,
            stored_key: random_bytes::<32>(),
            server_key: random_bytes::<32>(),
        }
    }

    /// Whether `text` is in a verifier's form (rather than a password).
    pub fn looks_like_verifier(text: &str) -> bool {
        text.starts_with(PREFIX)
    }

    /// Reads PostgreSQL's text form; 22023 when it is not one.
    pub fn parse(text: &str) -> Result<Verifier> {
        let bad = || WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "malformed SCRAM-SHA-256 verifier");
        let rest = text.strip_prefix(PREFIX).ok_or_else(bad)?;
        let (params, keys) = rest.split_once('$').ok_or_else(bad)?;
        let (iterations, salt) = params.split_once(':').ok_or_else(bad)?;
        let (stored, server) = keys.split_once(':').ok_or_else(bad)?;
        let iterations: u32 = iterations.parse().map_err(|_| bad())?;
        let salt = STANDARD.decode(salt).map_err(|_| bad())?;
        let stored_key: [u8; 32] = STANDARD.decode(stored).map_err(|_| bad())?.try_into().map_err(|_| bad())?;
        let server_key: [u8; 32] = STANDARD.decode(server).map_err(|_| bad())?.try_into().map_err(|_| bad())?;
        if iterations == 0 || iterations > MAX_ITERATIONS || salt.is_empty() {
            return Err(bad());
        }
        Ok(Verifier { iterations, salt, stored_key, server_key })
    }

    /// The verifier of a password given in SQL or a config file: a verifier's text is taken
    /// as it is (PostgreSQL's `PASSWORD 'SCRAM-SHA-256$...'`), anything else is a password.
    pub fn from_text(text: &str) -> Result<Verifier> {
        if Self::looks_like_verifier(text) {
            Self::parse(text)
        } else {
            Ok(Self::from_password(text))
        }
    }

    /// PostgreSQL's text form.
    pub fn to_text(&self) -> String {
        format!(
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(self.stored_key),
            STANDARD.encode(self.server_key)
        )
    }

    /// Checks `proof` (ClientProof) for `auth_message` (client-first-bare, server-first and
    /// client-final-without-proof joined by commas); on success the ServerSignature the server
    /// sends back. The comparison takes the same time wherever the proofs differ.
    pub fn check_proof(&self, auth_message: &[u8], proof: &[u8]) -> Option<[u8; 32]> {
        if proof.len() != 32 {
            return None;
        }
        let client_signature = hmac_sha256(&self.stored_key, auth_message);
        let mut client_key = [0u8; 32];
        for i in 0..32 {
            client_key[i] = proof[i] ^ client_signature[i];
        }
        let stored = sha256(&client_key);
        same(&stored, &self.stored_key).then(|| hmac_sha256(&self.server_key, auth_message))
    }

    /// Whether `password` is the one this verifier was made from (CREATE ROLE's checks and the
    /// cleartext `password` method).
    pub fn matches_password(&self, password: &str) -> bool {
        let other = Self::with_salt(password, &self.salt, self.iterations);
        same(&other.stored_key, &self.stored_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_checks_passwords() {
        let v = Verifier::from_password("s3cret");
        let text = v.to_text();
        assert!(text.starts_with("SCRAM-SHA-256$4096:"));
        assert!(!text.contains("s3cret"));
        let back = Verifier::parse(&text).unwrap();
        assert_eq!(back, v);
        assert!(back.matches_password("s3cret"));
        assert!(!back.matches_password("s3cret "));
        // Two verifiers of one password differ by their salts.
        assert_ne!(Verifier::from_password("s3cret").to_text(), text);
    }

    #[test]
    fn a_verifier_made_by_postgresql_checks_its_password() {
        // PostgreSQL 15: `SET password_encryption = 'scram-sha-256'; CREATE ROLE x PASSWORD
        // 'pencil'; SELECT rolpassword FROM pg_authid WHERE rolname = 'x'`.
        let pg = "SCRAM-SHA-256$4096:0aYFYq0Sr2sG9l2KJSI9BQ==$S43U6UGQeDVKp61vXExyQKWGuOwo2m+9TrFgG0r8q14=:83lzLPEHph5c7hsFqfFb9Fxhpq7tm7LvQ52shjDYm4I=";
        let v = Verifier::parse(pg).unwrap();
        assert_eq!(v.to_text(), pg);
        assert!(v.matches_password("pencil"));
        assert!(!v.matches_password("Pencil"));
    }

    #[test]
    fn malformed_verifiers_are_refused() {
        for bad in ["SCRAM-SHA-256$", "SCRAM-SHA-256$x:AAAA$AA:AA", "SCRAM-SHA-256$4096:AAAA$AAAA:AAAA"] {
            assert!(Verifier::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_client_proof_is_checked_against_the_verifier() {
        // The client side of RFC 5802, computed from the password.
        let v = Verifier::from_password("pencil");
        let mut salted = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            std::num::NonZeroU32::new(v.iterations).unwrap(),
            &v.salt,
            b"pencil",
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        let auth = b"n=,r=abc,r=abcdef,s=xyz,i=4096,c=biws,r=abcdef";
        let signature = hmac_sha256(&sha256(&client_key), auth);
        let proof: Vec<u8> = client_key.iter().zip(signature).map(|(a, b)| a ^ b).collect();
        let server_signature = v.check_proof(auth, &proof).expect("the right proof");
        assert_eq!(server_signature, hmac_sha256(&hmac_sha256(&salted, b"Server Key"), auth));
        let mut wrong = proof.clone();
        wrong[0] ^= 1;
        assert!(v.check_proof(auth, &wrong).is_none());
    }
}
