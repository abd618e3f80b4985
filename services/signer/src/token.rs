//! Keys inside a PKCS#11 token (an HSM; SoftHSM2 in tests): generated there as
//! non-extractable, used only through the token's signing operation.
//!
//! secp256k1 with CKM_ECDSA over the transaction's keccak digest: the token returns r‖s; the
//! signature is normalised to low-S (as Ethereum requires) and its recovery id found by
//! recovering the token key's own address. Ed25519 (Solana) with CKM_EDDSA over the message.

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use serde::{Deserialize, Serialize};
use sigcast_evm::{Address, B256, Signature, U256};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// DER of the Ed25519 OID (1.3.101.112), as CKA_EC_PARAMS holds it.
const ED25519_PARAMS: [u8; 5] = [0x06, 0x03, 0x2b, 0x65, 0x70];
/// DER of the secp256k1 curve's OID (1.3.132.0.10), as CKA_EC_PARAMS holds it.
const SECP256K1_PARAMS: [u8; 7] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a];

/// Environment variable holding the token's user PIN when no `pin_file` is configured.
pub const PIN_ENV: &str = "SIGCAST_SIGNER_PKCS11_PIN";

/// Where the token is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pkcs11Config {
    /// The PKCS#11 module (e.g. /usr/lib/softhsm/libsofthsm2.so).
    pub module: PathBuf,
    /// The token, by label.
    pub token_label: String,
    /// File holding the user PIN; else the `SIGCAST_SIGNER_PKCS11_PIN` environment variable.
    pub pin_file: Option<PathBuf>,
}

/// A token error, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("PKCS#11 token: {doing}: {reason}")]
pub struct TokenError {
    doing: String,
    reason: String,
    /// The token refused the PIN (wrong, locked or expired).
    pin_refused: bool,
}

impl TokenError {
    /// Whether the token refused the PIN (wrong, locked or expired).
    pub fn pin_refused(&self) -> bool {
        self.pin_refused
    }
}

fn fail(doing: impl Into<String>) -> impl FnOnce(cryptoki::error::Error) -> TokenError {
    let doing = doing.into();
    move |e| TokenError {
        pin_refused: false,
        doing,
        reason: e.to_string(),
    }
}

/// A logged-in session on the configured token.
pub struct Token {
    live: Arc<Live>,
}

/// The module, the token's slot and the one session every key signs through. The session is
/// replaced when it is lost (an HSM restarted, a network HSM reconnected, the login ended):
/// the signer goes on signing instead of failing every signature until restarted.
struct Live {
    pkcs11: Pkcs11,
    slot: cryptoki::slot::Slot,
    config: Pkcs11Config,
    session: Mutex<Session>,
    /// Counts sessions opened: a key whose handle was found in an older one finds it again
    /// before signing (handles need not survive a new session, and an old number may name
    /// another key by then).
    generation: std::sync::atomic::AtomicU64,
    /// When a new session was last opened, and whether the token refused the PIN then: each
    /// failed login may count against the PIN's retry limit, so a refused PIN is not tried
    /// again (the signer needs the operator), and logins are at least a second apart.
    last_login: Mutex<(Option<std::time::Instant>, bool)>,
}

/// A handle on the token's session for checking that it is alive (see [`TokenHealth::check`]).
#[derive(Clone)]
pub struct TokenHealth {
    live: Arc<Live>,
}

impl TokenHealth {
    /// Whether the session is open and logged in; if it is not (the HSM restarted, the login
    /// ended), a new one is opened, as a signature would (paced, and never again after a
    /// refused PIN). An error means the token cannot sign now.
    pub fn check(&self) -> Result<(), TokenError> {
        self.live.check()
    }
}

impl std::fmt::Debug for TokenHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenHealth")
            .field("token", &self.live.config.token_label)
            .finish()
    }
}

/// The least time between two logins after a lost session.
const LOGIN_PACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A key's object handle, and the session generation it was found in.
type Handle = Mutex<(u64, ObjectHandle)>;

impl Live {
    /// A new session, logged in as the token's user (the PIN read again, held no longer).
    fn log_in(
        pkcs11: &Pkcs11,
        slot: cryptoki::slot::Slot,
        config: &Pkcs11Config,
    ) -> Result<Session, TokenError> {
        // Wiped from memory once the login is done (AuthPin wipes its own copy).
        let pin = crate::keys::read_secret(config.pin_file.as_deref(), "pin_file", PIN_ENV)
            .map_err(|reason| TokenError {
                pin_refused: false,
                doing: "reading the PIN".into(),
                reason,
            })?;
        let session = pkcs11
            .open_rw_session(slot)
            .map_err(fail("opening a session"))?;
        match session.login(
            UserType::User,
            Some(&AuthPin::from(pin.as_str().to_owned())),
        ) {
            // A login belongs to the application, not the session: another session of ours
            // may have logged in again already.
            Err(cryptoki::error::Error::Pkcs11(
                cryptoki::error::RvError::UserAlreadyLoggedIn,
                _,
            ))
            | Ok(()) => Ok(session),
            Err(error) => {
                use cryptoki::error::RvError as Rv;
                let pin_refused = matches!(
                    error,
                    cryptoki::error::Error::Pkcs11(
                        Rv::PinIncorrect | Rv::PinLocked | Rv::PinExpired | Rv::PinInvalid,
                        _
                    )
                );
                let mut error = fail("logging in")(error);
                error.pin_refused = pin_refused;
                Err(error)
            }
        }
    }

    /// Signs through `sign` with the private key `private`; if the session turns out lost,
    /// opens a new one, finds the key again with `find` (handles need not survive) and signs
    /// once more.
    fn sign(
        &self,
        private: &Handle,
        find: impl Fn(&Session) -> Result<ObjectHandle, TokenError>,
        sign: impl Fn(&Session, ObjectHandle) -> cryptoki::error::Result<Vec<u8>>,
        doing: &str,
    ) -> Result<Vec<u8>, TokenError> {
        use std::sync::atomic::Ordering;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let handle = {
            let mut held = private.lock().unwrap_or_else(|p| p.into_inner());
            let generation = self.generation.load(Ordering::Acquire);
            if held.0 != generation {
                *held = (generation, find(&session)?);
            }
            held.1
        };
        match sign(&session, handle) {
            Err(error) if session_lost(&error) => {
                tracing::warn!(%error, "PKCS#11 session lost; opening a new one");
                *session = self.log_in_again()?;
                let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                let handle = find(&session)?;
                *private.lock().unwrap_or_else(|p| p.into_inner()) = (generation, handle);
                sign(&session, handle).map_err(fail(doing))
            }
            other => other.map_err(fail(doing)),
        }
    }

    /// See [`TokenHealth::check`].
    fn check(&self) -> Result<(), TokenError> {
        use cryptoki::session::SessionState;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let logged_in = session.get_session_info().is_ok_and(|info| {
            matches!(
                info.session_state(),
                SessionState::RoUser | SessionState::RwUser
            )
        });
        if logged_in {
            return Ok(());
        }
        tracing::warn!("PKCS#11 session lost or logged out; opening a new one");
        *session = self.log_in_again()?;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// A new session after a lost one, unless the token refused the PIN before or the last
    /// login was under [`LOGIN_PACE`] ago (then this signature fails, and nothing is signed).
    fn log_in_again(&self) -> Result<Session, TokenError> {
        let mut last = self.last_login.lock().unwrap_or_else(|p| p.into_inner());
        let refuse = |reason: &str| TokenError {
            pin_refused: false,
            doing: "opening a new session".into(),
            reason: reason.into(),
        };
        if last.1 {
            // Still the PIN's refusal: whoever reads this error must not try it again either.
            return Err(TokenError {
                pin_refused: true,
                ..refuse(
                    "the token refused the PIN at the last login; not trying again (each try may count against its retry limit): fix the PIN and restart the signer",
                )
            });
        }
        if last.0.is_some_and(|at| at.elapsed() < LOGIN_PACE) {
            return Err(refuse("logged in again under a second ago; try later"));
        }
        last.0 = Some(std::time::Instant::now());
        match Self::log_in(&self.pkcs11, self.slot, &self.config) {
            Err(error) if error.pin_refused => {
                last.1 = true;
                Err(error)
            }
            other => other,
        }
    }
}

/// Whether `error` says the session (or its login, or the token behind it) is gone, rather
/// than that this signature failed.
fn session_lost(error: &cryptoki::error::Error) -> bool {
    use cryptoki::error::RvError as Rv;
    matches!(
        error,
        cryptoki::error::Error::Pkcs11(
            Rv::SessionHandleInvalid
                | Rv::SessionClosed
                | Rv::UserNotLoggedIn
                | Rv::DeviceRemoved
                | Rv::DeviceError
                | Rv::TokenNotPresent
                | Rv::KeyHandleInvalid
                | Rv::ObjectHandleInvalid,
            _
        )
    )
}

impl Token {
    /// Opens the module, finds the token by label and logs in as its user.
    pub fn open(config: &Pkcs11Config) -> Result<Self, TokenError> {
        let pkcs11 = Pkcs11::new(&config.module)
            .map_err(fail(format!("loading {}", config.module.display())))?;
        pkcs11
            .initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
            .map_err(fail("initializing"))?;
        let slot = pkcs11
            .get_slots_with_token()
            .map_err(fail("listing slots"))?
            .into_iter()
            .find(|slot| {
                pkcs11
                    .get_token_info(*slot)
                    .is_ok_and(|info| info.label() == config.token_label)
            })
            .ok_or_else(|| TokenError {
                pin_refused: false,
                doing: format!("finding token {:?}", config.token_label),
                reason: "no such token".into(),
            })?;
        let session = Live::log_in(&pkcs11, slot, config)?;
        Ok(Self {
            live: Arc::new(Live {
                pkcs11,
                slot,
                config: config.clone(),
                session: Mutex::new(session),
                generation: std::sync::atomic::AtomicU64::new(0),
                last_login: Mutex::new((None, false)),
            }),
        })
    }

    /// Ends this application's login on the token from a second session, as a token reset or
    /// another part of the application would: every session of ours is then logged out.
    /// For tests of what follows a lost session.
    #[doc(hidden)]
    pub fn log_out_elsewhere(&self) -> Result<(), TokenError> {
        let other = self
            .live
            .pkcs11
            .open_ro_session(self.live.slot)
            .map_err(fail("opening a second session"))?;
        other.logout().map_err(fail("logging out"))
    }

    /// Generates a key pair inside the token on the curve `params` names: the private key
    /// sensitive and non-extractable, both halves with one random CKA_ID, by which they are
    /// paired (labels need not be unique). Returns the public key object.
    fn generate_pair(
        &self,
        session: &Session,
        label: &str,
        params: &[u8],
        mechanism: Mechanism<'_>,
    ) -> Result<ObjectHandle, TokenError> {
        let id: [u8; 16] = rand::random();
        let public = [
            Attribute::Token(true),
            Attribute::Id(id.to_vec()),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::EcParams(params.to_vec()),
            Attribute::Verify(true),
        ];
        let private = [
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            Attribute::Id(id.to_vec()),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::Sign(true),
        ];
        let (public, _) = session
            .generate_key_pair(&mechanism, &public, &private)
            .map_err(fail(format!("generating key {label:?}")))?;
        Ok(public)
    }

    /// Generates a secp256k1 key pair inside the token (sensitive, non-extractable). Returns
    /// its account.
    pub fn generate(&self, label: &str) -> Result<Address, TokenError> {
        let session = self.live.session.lock().unwrap_or_else(|p| p.into_inner());
        let public =
            self.generate_pair(&session, label, &SECP256K1_PARAMS, Mechanism::EccKeyPairGen)?;
        address_of(&session, public)
    }

    /// Generates an Ed25519 key pair inside the token (sensitive, non-extractable). Returns
    /// its public key.
    pub fn generate_ed25519(&self, label: &str) -> Result<[u8; 32], TokenError> {
        let session = self.live.session.lock().unwrap_or_else(|p| p.into_inner());
        let public = self.generate_pair(
            &session,
            label,
            &ED25519_PARAMS,
            Mechanism::EccEdwardsKeyPairGen,
        )?;
        ed25519_public_key(&session, public)
    }

    /// The token's key pairs of `key_type`: each private key, with its label, and the one
    /// public key of the same type, CKA_ID and label; else of the same CKA_ID (tools that
    /// label the halves apart); else, for a private key without an id, the one public key of
    /// its label that has no id either. A private key whose public half is not exactly one
    /// object is left out with a warning: pairing it with another key's public half would
    /// sign for one account while naming another.
    fn key_pairs(
        session: &Session,
        key_type: KeyType,
    ) -> Result<Vec<(String, ObjectHandle, ObjectHandle)>, TokenError> {
        let privates = session
            .find_objects(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::KeyType(key_type),
            ])
            .map_err(fail("listing keys"))?;
        let mut pairs = Vec::new();
        for private in privates {
            let (mut id, mut label) = (Vec::new(), Vec::new());
            for attribute in session
                .get_attributes(private, &[AttributeType::Id, AttributeType::Label])
                .map_err(fail("reading a key's id and label"))?
            {
                match attribute {
                    Attribute::Id(value) => id = value,
                    Attribute::Label(value) => label = value,
                    _ => {}
                }
            }
            let find = |by: &[Attribute]| {
                let mut template = vec![
                    Attribute::Class(ObjectClass::PUBLIC_KEY),
                    Attribute::KeyType(key_type),
                ];
                template.extend_from_slice(by);
                session
                    .find_objects(&template)
                    .map_err(fail("finding a public key"))
            };
            let publics = if id.is_empty() {
                let mut without_id = Vec::new();
                for public in find(&[Attribute::Label(label.clone())])? {
                    let has_id = session
                        .get_attributes(public, &[AttributeType::Id])
                        .map_err(fail("reading a public key's id"))?
                        .iter()
                        .any(|a| matches!(a, Attribute::Id(v) if !v.is_empty()));
                    if !has_id {
                        without_id.push(public);
                    }
                }
                without_id
            } else {
                match find(&[Attribute::Id(id.clone()), Attribute::Label(label.clone())])?[..] {
                    [public] => vec![public],
                    _ => find(&[Attribute::Id(id)])?,
                }
            };
            let label = String::from_utf8_lossy(&label).into_owned();
            match publics[..] {
                [public] => pairs.push((label, private, public)),
                _ => tracing::warn!(
                    %label, public_keys = publics.len(),
                    "a token key left out: not exactly one public key of its CKA_ID (or label)"
                ),
            }
        }
        Ok(pairs)
    }

    /// The token's Ed25519 signing keys.
    pub fn ed25519_keys(&self) -> Result<Vec<TokenEd25519Key>, TokenError> {
        let session = self.live.session.lock().unwrap_or_else(|p| p.into_inner());
        Self::key_pairs(&session, KeyType::EC_EDWARDS)?
            .into_iter()
            .map(|(label, private, public)| {
                Ok(TokenEd25519Key {
                    live: self.live.clone(),
                    private: Mutex::new((0, private)),
                    public_key: ed25519_public_key(&session, public)?,
                    label,
                })
            })
            .collect()
    }

    /// The token's secp256k1 signing keys, by label.
    pub fn keys(&self) -> Result<Vec<TokenKey>, TokenError> {
        let session = self.live.session.lock().unwrap_or_else(|p| p.into_inner());
        Self::key_pairs(&session, KeyType::EC)?
            .into_iter()
            .map(|(label, private, public)| {
                Ok(TokenKey {
                    live: self.live.clone(),
                    private: Mutex::new((0, private)),
                    address: address_of(&session, public)?,
                    label,
                })
            })
            .collect()
    }
}

/// The private key of `key_type` whose public half `is_ours`, found again in a new session;
/// an error naming `label` if the token no longer holds it.
fn find_private(
    session: &Session,
    key_type: KeyType,
    label: &str,
    is_ours: impl Fn(ObjectHandle) -> bool,
) -> Result<ObjectHandle, TokenError> {
    Token::key_pairs(session, key_type)?
        .into_iter()
        .find(|(_, _, public)| is_ours(*public))
        .map(|(_, private, _)| private)
        .ok_or_else(|| gone(label))
}

/// A key no longer in the token after a new session was opened.
fn gone(label: &str) -> TokenError {
    TokenError {
        pin_refused: false,
        doing: "finding the key again in a new session".into(),
        reason: format!("key {label:?} is no longer in the token"),
    }
}

/// A public key object's CKA_EC_POINT, as the token stores it.
fn ec_point(session: &Session, public: ObjectHandle) -> Result<Vec<u8>, TokenError> {
    let attributes = session
        .get_attributes(public, &[AttributeType::EcPoint])
        .map_err(fail("reading a public key"))?;
    match attributes.into_iter().next() {
        Some(Attribute::EcPoint(der)) => Ok(der),
        _ => Err(TokenError {
            pin_refused: false,
            doing: "reading a public key".into(),
            reason: "no EC point".into(),
        }),
    }
}

/// The account of a secp256k1 public key object (CKA_EC_POINT: a DER OCTET STRING holding
/// the uncompressed point 04‖X‖Y).
fn address_of(session: &Session, public: ObjectHandle) -> Result<Address, TokenError> {
    let der = ec_point(session, public)?;
    let point = match der.as_slice() {
        [0x04, 0x41, rest @ ..] if rest.len() == 65 => rest,
        raw if raw.len() == 65 => raw,
        _ => {
            return Err(TokenError {
                pin_refused: false,
                doing: "reading a public key".into(),
                reason: "not an uncompressed point".into(),
            });
        }
    };
    Ok(Address::from_raw_public_key(&point[1..]))
}

/// An Ed25519 public key object's 32 bytes (CKA_EC_POINT: a DER OCTET STRING, or raw).
fn ed25519_public_key(session: &Session, public: ObjectHandle) -> Result<[u8; 32], TokenError> {
    let der = ec_point(session, public)?;
    let raw = match der.as_slice() {
        [0x04, 0x20, rest @ ..] if rest.len() == 32 => rest,
        raw if raw.len() == 32 => raw,
        _ => {
            return Err(TokenError {
                pin_refused: false,
                doing: "reading a public key".into(),
                reason: "not an Ed25519 point".into(),
            });
        }
    };
    let mut key = [0u8; 32];
    key.copy_from_slice(raw);
    Ok(key)
}

/// An Ed25519 key in the token (Solana).
pub struct TokenEd25519Key {
    live: Arc<Live>,
    private: Handle,
    /// Its public key (the Solana account).
    pub public_key: [u8; 32],
    /// Its label in the token.
    pub label: String,
}

impl TokenEd25519Key {
    /// A handle for checking the token's session.
    pub fn health(&self) -> TokenHealth {
        TokenHealth {
            live: self.live.clone(),
        }
    }

    /// Signs `message` inside the token (pure EdDSA).
    pub fn sign(&self, message: &[u8]) -> Result<[u8; 64], TokenError> {
        use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
        let raw = self.live.sign(
            &self.private,
            |session| {
                find_private(session, KeyType::EC_EDWARDS, &self.label, |public| {
                    ed25519_public_key(session, public).is_ok_and(|k| k == self.public_key)
                })
            },
            |session, private| {
                let mechanism = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure));
                session.sign(&mechanism, private, message)
            },
            "signing with Ed25519",
        )?;
        let signature: [u8; 64] = raw.try_into().map_err(|raw: Vec<u8>| TokenError {
            pin_refused: false,
            doing: "signing with Ed25519".into(),
            reason: format!("{} bytes, not 64", raw.len()),
        })?;
        // Checked against the key's own public half: a signature by any other key (a handle
        // that came to name another object) must never be stored as this account's.
        let verifies = ed25519_dalek::VerifyingKey::from_bytes(&self.public_key).is_ok_and(|key| {
            key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&signature))
                .is_ok()
        });
        if !verifies {
            return Err(TokenError {
                pin_refused: false,
                doing: "signing with Ed25519".into(),
                reason: "the token's signature does not verify under the key's public key".into(),
            });
        }
        Ok(signature)
    }
}

/// One key in the token.
pub struct TokenKey {
    live: Arc<Live>,
    private: Handle,
    /// Its account.
    pub address: Address,
    /// Its label in the token.
    pub label: String,
}

impl crate::keys::DigestSigner for TokenKey {
    fn sign_digest(&self, hash: &B256) -> Result<Signature, String> {
        self.sign_hash(hash).map_err(|e| e.to_string())
    }

    fn backend(&self) -> &'static str {
        "pkcs11"
    }
}

impl TokenKey {
    /// A handle for checking the token's session.
    pub fn health(&self) -> TokenHealth {
        TokenHealth {
            live: self.live.clone(),
        }
    }

    /// Signs a 32-byte digest inside the token.
    pub fn sign_hash(&self, hash: &B256) -> Result<Signature, TokenError> {
        let raw = self.live.sign(
            &self.private,
            |session| {
                find_private(session, KeyType::EC, &self.label, |public| {
                    address_of(session, public).is_ok_and(|a| a == self.address)
                })
            },
            |session, private| session.sign(&Mechanism::Ecdsa, private, hash.as_slice()),
            "signing",
        )?;
        if raw.len() != 64 {
            return Err(TokenError {
                pin_refused: false,
                doing: "signing".into(),
                reason: format!("{} bytes, not r‖s", raw.len()),
            });
        }
        let r = U256::from_be_slice(&raw[..32]);
        let s = U256::from_be_slice(&raw[32..]);
        // Low-S (BIP 62), as Ethereum requires; then the parity that recovers our address.
        [false, true]
            .into_iter()
            .map(|parity| Signature::new(r, s, parity).normalized_s())
            .find(|signature| {
                signature
                    .recover_address_from_prehash(hash)
                    .is_ok_and(|a| a == self.address)
            })
            .ok_or_else(|| TokenError {
                pin_refused: false,
                doing: "signing".into(),
                reason: "no recovery id yields the key's address".into(),
            })
    }
}
