//! Keys: loaded from encrypted keystore files into this process only.
//!
//! Nothing here may print, log or return a private key: the keyring's Debug shows addresses,
//! errors name files, never their contents.

use alloy_signer_local::PrivateKeySigner;
use sigcast_evm::Address;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// Why keys could not be loaded or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The passphrase is missing or unreadable.
    #[error("keystore passphrase: {0}")]
    Passphrase(String),
    /// The keystore directory could not be read or written.
    #[error("keystore directory {dir}: {reason}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A dev key could not be derived from the test mnemonic.
    #[error("deriving dev key {index}: {reason}")]
    Derivation {
        /// Its index.
        index: u32,
        /// What went wrong (never the key).
        reason: String,
    },
    /// A keystore file did not decrypt (wrong passphrase or not a keystore).
    #[error("keystore file {file}: {reason}")]
    File {
        /// The file.
        file: PathBuf,
        /// What went wrong (never the key).
        reason: String,
    },
}

/// The passphrase: from `file` if configured, else from the environment variable. Wiped from
/// memory when dropped.
pub fn read_passphrase(file: Option<&Path>, env_var: &str) -> Result<Zeroizing<String>, KeyError> {
    read_secret(file, "passphrase_file", env_var).map_err(KeyError::Passphrase)
}

/// A secret (passphrase, PIN) from `file` (its trailing newline dropped), else from the
/// environment variable `env_var`; every copy read is wiped from memory when dropped. (One
/// held in the environment stays there for the process's life: prefer the file.)
pub fn read_secret(
    file: Option<&Path>,
    file_setting: &str,
    env_var: &str,
) -> Result<Zeroizing<String>, String> {
    match file {
        Some(path) => {
            let read = Zeroizing::new(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?,
            );
            Ok(Zeroizing::new(
                read.trim_end_matches(['\n', '\r']).to_owned(),
            ))
        }
        None => std::env::var(env_var)
            .map(Zeroizing::new)
            .map_err(|_| format!("set {file_setting} or the {env_var} environment variable")),
    }
}

/// What signs secp256k1 digests for one account. The signer's keys are a keystore's,
/// decrypted into this process, or a PKCS#11 token's; the simulation plugs a token that fails
/// into the same signing bodies through it.
pub trait DigestSigner: Send + Sync {
    /// Signs a 32-byte digest.
    fn sign_digest(&self, hash: &sigcast_evm::B256) -> Result<sigcast_evm::Signature, String>;

    /// Where the key lives: `keystore` (in this process) or `pkcs11`.
    fn backend(&self) -> &'static str;
}

impl DigestSigner for PrivateKeySigner {
    fn sign_digest(&self, hash: &sigcast_evm::B256) -> Result<sigcast_evm::Signature, String> {
        use alloy_signer::SignerSync;
        self.sign_hash_sync(hash).map_err(|e| e.to_string())
    }

    fn backend(&self) -> &'static str {
        "keystore"
    }
}

/// A keystore's secp256k1 key, decrypted into this process, signing with libsecp256k1 (Bitcoin
/// Core's library): the same signatures as alloy's `PrivateKeySigner` (RFC 6979, low S; the
/// two are compared when a key loads and in the tests), in half its CPU time, and signing is
/// most of what the signer's grouped transactions spend while they hold the store's lock.
pub struct KeystoreKey {
    secret: secp256k1::SecretKey,
}

/// One signing context for every key, its blinding seeded from the OS at first use.
fn signing_context() -> &'static secp256k1::Secp256k1<secp256k1::SignOnly> {
    static CONTEXT: std::sync::LazyLock<secp256k1::Secp256k1<secp256k1::SignOnly>> =
        std::sync::LazyLock::new(|| {
            let mut context = secp256k1::Secp256k1::signing_only();
            context.seeded_randomize(&rand::random());
            context
        });
    &CONTEXT
}

/// A fixed digest both libraries sign when a key loads.
const AGREEMENT_DIGEST: [u8; 32] = [0x5c; 32];

impl KeystoreKey {
    /// `key` for libsecp256k1, once both libraries give it the same signature.
    pub fn new(key: &PrivateKeySigner) -> Result<Self, String> {
        let bytes = Zeroizing::new(key.to_bytes().0);
        let mut secret = secp256k1::SecretKey::from_byte_array(*bytes)
            .map_err(|_| "not a valid secp256k1 key".to_owned())?;
        let ours = Self { secret };
        // `SecretKey` is `Copy`: the local copy is erased too (best effort, as k256's own).
        secret.non_secure_erase();
        let digest = sigcast_evm::B256::from(AGREEMENT_DIGEST);
        if ours.sign_digest(&digest)? != key.sign_digest(&digest)? {
            return Err("libsecp256k1 and k256 disagree on this key's signature".into());
        }
        Ok(ours)
    }
}

impl Drop for KeystoreKey {
    fn drop(&mut self) {
        self.secret.non_secure_erase();
    }
}

impl DigestSigner for KeystoreKey {
    fn sign_digest(&self, hash: &sigcast_evm::B256) -> Result<sigcast_evm::Signature, String> {
        let message = secp256k1::Message::from_digest(hash.0);
        let (recovery, rs) = signing_context()
            .sign_ecdsa_recoverable(message, &self.secret)
            .serialize_compact();
        // The recovery id's low bit is the parity of R's y, all an EVM signature carries (as
        // alloy's signer keeps it; ids 2 and 3, R's x past the group order, are negligible).
        let odd_y = i32::from(recovery) & 1 == 1;
        Ok(sigcast_evm::Signature::from_bytes_and_parity(&rs, odd_y))
    }

    fn backend(&self) -> &'static str {
        "keystore"
    }
}

/// A key the signer can sign with: decrypted from a keystore into this process, or inside a
/// PKCS#11 token.
#[derive(Clone)]
pub struct KeyHandle(Arc<dyn DigestSigner>);

impl KeyHandle {
    /// A handle on `key`.
    pub fn new(key: impl DigestSigner + 'static) -> Self {
        Self(Arc::new(key))
    }

    /// Signs a 32-byte digest.
    pub fn sign_hash(&self, hash: &sigcast_evm::B256) -> Result<sigcast_evm::Signature, String> {
        self.0.sign_digest(hash)
    }

    /// Where the key lives.
    pub fn backend(&self) -> &'static str {
        self.0.backend()
    }

    /// Whether the key signs in this process (microseconds), so that its signing transaction
    /// may be grouped with others; a token's is committed alone.
    pub fn signs_in_process(&self) -> bool {
        self.backend() == "keystore"
    }
}

/// An Ed25519 (Solana) key: decrypted from a keystore, or inside a PKCS#11 token.
#[derive(Clone)]
pub enum Ed25519Handle {
    /// Decrypted from an encrypted keystore file.
    Keystore(Arc<ed25519_dalek::SigningKey>),
    /// In a PKCS#11 token; never leaves it.
    Token(Arc<crate::token::TokenEd25519Key>),
}

impl Ed25519Handle {
    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> Result<[u8; 64], String> {
        match self {
            Ed25519Handle::Keystore(key) => {
                use ed25519_dalek::Signer;
                Ok(key.sign(message).to_bytes())
            }
            Ed25519Handle::Token(key) => key.sign(message).map_err(|e| e.to_string()),
        }
    }

    /// Where the key lives.
    pub fn backend(&self) -> &'static str {
        match self {
            Ed25519Handle::Keystore(_) => "keystore",
            Ed25519Handle::Token(_) => "pkcs11",
        }
    }

    /// Whether the key signs in this process, as [`KeyHandle::signs_in_process`].
    pub fn signs_in_process(&self) -> bool {
        matches!(self, Ed25519Handle::Keystore(_))
    }
}

/// Keystore files of Ed25519 keys are named `ed25519-<base58 public key>.json`.
const ED25519_PREFIX: &str = "ed25519-";

/// The keys this signer holds, by account.
#[derive(Clone, Default)]
pub struct Keyring {
    keys: BTreeMap<Address, KeyHandle>,
    ed25519: BTreeMap<[u8; 32], Ed25519Handle>,
    /// The PKCS#11 token's session, when keys live in one.
    token: Option<crate::token::TokenHealth>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.keys.keys().map(ToString::to_string))
            .entries(self.ed25519.keys().map(|k| bs58::encode(k).into_string()))
            .finish()
    }
}

impl Keyring {
    /// Decrypts every `*.json` keystore in `dir` (none when `dir` does not exist).
    pub fn load(dir: &Path, passphrase: &str) -> Result<Self, KeyError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            // No keystore directory: a signer whose keys are all in a token.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(KeyError::Dir {
                    dir: dir.into(),
                    reason: e.to_string(),
                });
            }
        };
        let mut keys = BTreeMap::new();
        let mut keys_ed25519 = BTreeMap::new();
        for entry in entries {
            let path = entry
                .map_err(|e| KeyError::Dir {
                    dir: dir.into(),
                    reason: e.to_string(),
                })?
                .path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if let Some(public) = name
                .strip_prefix(ED25519_PREFIX)
                .and_then(|n| n.strip_suffix(".json"))
            {
                let key = decrypt_ed25519(&path, passphrase, public)?;
                keys_ed25519.insert(
                    key.verifying_key().to_bytes(),
                    Ed25519Handle::Keystore(Arc::new(key)),
                );
                continue;
            }
            let signer = PrivateKeySigner::decrypt_keystore(&path, passphrase).map_err(|e| {
                KeyError::File {
                    file: path.clone(),
                    reason: e.to_string(),
                }
            })?;
            let key = KeystoreKey::new(&signer).map_err(|reason| KeyError::File {
                file: path.clone(),
                reason,
            })?;
            keys.insert(signer.address(), KeyHandle::new(key));
        }
        Ok(Self {
            keys,
            ed25519: keys_ed25519,
            token: None,
        })
    }

    /// Adds the secp256k1 keys of a PKCS#11 token.
    pub fn add_token_keys(&mut self, keys: Vec<crate::token::TokenKey>) {
        for key in keys {
            self.token.get_or_insert_with(|| key.health());
            self.keys.insert(key.address, KeyHandle::new(key));
        }
    }

    /// The PKCS#11 token's session, when its keys are held (for liveness checks).
    pub fn token_health(&self) -> Option<crate::token::TokenHealth> {
        self.token.clone()
    }

    /// The key of `account`, if held.
    pub fn get(&self, account: &Address) -> Option<KeyHandle> {
        self.keys.get(account).cloned()
    }

    /// Adds the Ed25519 keys of a PKCS#11 token.
    pub fn add_token_ed25519_keys(&mut self, keys: Vec<crate::token::TokenEd25519Key>) {
        for key in keys {
            self.token.get_or_insert_with(|| key.health());
            self.ed25519
                .insert(key.public_key, Ed25519Handle::Token(Arc::new(key)));
        }
    }

    /// The Ed25519 key of a Solana account, if held.
    pub fn ed25519(&self, public_key: &[u8; 32]) -> Option<Ed25519Handle> {
        self.ed25519.get(public_key).cloned()
    }

    /// The Ed25519 accounts held (base58), with where each key lives.
    pub fn ed25519_entries(&self) -> Vec<(String, &'static str)> {
        self.ed25519
            .iter()
            .map(|(k, h)| (bs58::encode(k).into_string(), h.backend()))
            .collect()
    }

    /// The accounts held, with where each key lives.
    pub fn entries(&self) -> Vec<(Address, &'static str)> {
        self.keys.iter().map(|(a, k)| (*a, k.backend())).collect()
    }

    /// The accounts held.
    pub fn accounts(&self) -> Vec<Address> {
        self.keys.keys().copied().collect()
    }
}

/// Encrypts the secp256k1 private key held (as hex) in `key_file` into a keystore in `dir`,
/// named by its account. The key is read into memory that is wiped after use; the plain file
/// is the operator's to destroy.
pub fn import_key_file(dir: &Path, key_file: &Path, passphrase: &str) -> Result<Address, KeyError> {
    let file_error = |reason: String| KeyError::File {
        file: key_file.into(),
        reason,
    };
    let text =
        Zeroizing::new(std::fs::read_to_string(key_file).map_err(|e| file_error(e.to_string()))?);
    let hex_key = text.trim().trim_start_matches("0x");
    let bytes = Zeroizing::new(
        hex::decode(hex_key).map_err(|_| file_error("not a hex private key".into()))?,
    );
    if bytes.len() != 32 {
        return Err(file_error(format!(
            "a private key is 32 bytes, this is {}",
            bytes.len()
        )));
    }
    let address = PrivateKeySigner::from_slice(&bytes)
        .map_err(|_| file_error("not a valid secp256k1 key".into()))?
        .address();
    create_dir(dir)?;
    opens_with_the_same_passphrase(dir, passphrase)?;
    let name = format!("{address}.json");
    if dir.join(&name).exists() {
        return Err(KeyError::File {
            file: dir.join(&name),
            reason: "a keystore for this account exists".into(),
        });
    }
    write_keystore(dir, &name, bytes.as_slice(), passphrase)?;
    Ok(address)
}

/// Decrypts an Ed25519 keystore and checks it holds the key its name says.
fn decrypt_ed25519(
    path: &Path,
    passphrase: &str,
    public: &str,
) -> Result<ed25519_dalek::SigningKey, KeyError> {
    let file_error = |reason: String| KeyError::File {
        file: path.into(),
        reason,
    };
    let seed = Zeroizing::new(
        eth_keystore::decrypt_key(path, passphrase).map_err(|e| file_error(e.to_string()))?,
    );
    let seed: &[u8; 32] = seed
        .as_slice()
        .try_into()
        .map_err(|_| file_error("not a 32-byte Ed25519 seed".into()))?;
    let key = ed25519_dalek::SigningKey::from_bytes(seed);
    if bs58::encode(key.verifying_key().to_bytes()).into_string() != public {
        return Err(file_error(
            "holds a different key than its name says".into(),
        ));
    }
    Ok(key)
}

/// Generates a key in an encrypted keystore in `dir`: secp256k1 (returns the EVM address) or
/// Ed25519 (returns the base58 Solana account).
pub fn generate_keystore_key(
    dir: &Path,
    passphrase: &str,
    ed25519: bool,
) -> Result<String, KeyError> {
    use rand::RngCore;
    create_dir(dir)?;
    opens_with_the_same_passphrase(dir, passphrase)?;
    let mut seed = Zeroizing::new([0u8; 32]);
    rand::rngs::OsRng.fill_bytes(seed.as_mut());
    let (account, name) = if ed25519 {
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let account = bs58::encode(public).into_string();
        (account.clone(), format!("{ED25519_PREFIX}{account}.json"))
    } else {
        let address = PrivateKeySigner::from_slice(seed.as_slice())
            .map_err(|e| KeyError::Dir {
                dir: dir.into(),
                reason: e.to_string(),
            })?
            .address();
        (address.to_string(), format!("{address}.json"))
    };
    write_keystore(dir, &name, seed.as_slice(), passphrase)?;
    Ok(account)
}

/// Creates the keystore directory `dir` if it is missing, readable by its owner alone (one
/// that exists is left as the operator made it).
fn create_dir(dir: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::DirBuilderExt;
    let failed = |e: std::io::Error| KeyError::Dir {
        dir: dir.into(),
        reason: e.to_string(),
    };
    // Its parents as any directory is made (another service may read a store beside it).
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other.map_err(failed),
    }
}

/// Refuses a passphrase that does not open the keystores already in `dir`: the signer loads
/// them all with one, and stops at the first it cannot open, so a keystore written with
/// another would stop every signer of the directory at its next start. (One is tried: the
/// first by name.)
fn opens_with_the_same_passphrase(dir: &Path, passphrase: &str) -> Result<(), KeyError> {
    let listed = std::fs::read_dir(dir).map_err(|e| KeyError::Dir {
        dir: dir.into(),
        reason: e.to_string(),
    })?;
    let mut keystores: Vec<_> = listed
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().and_then(|e| e.to_str()) == Some("json"))
        .collect();
    keystores.sort();
    let Some(first) = keystores.first() else {
        return Ok(());
    };
    eth_keystore::decrypt_key(first, passphrase)
        .map(Zeroizing::new)
        .map(drop)
        .map_err(|e| KeyError::File {
            file: first.clone(),
            reason: format!(
                "{e}: a new keystore must open with the passphrase of those already in {} (the \
                 signer loads them all with one); nothing was written",
                dir.display()
            ),
        })
}

/// Encrypts `secret` with `passphrase` into the keystore file `dir/name`, readable by its
/// owner alone: encrypted, but one other local users can read is one they can try
/// passphrases against offline. Written whole and synced under a name the signer does not
/// load, then linked into place: a crash or a full disk leaves no half-written keystore under
/// the account's name (which the signer would refuse to start with, and an import to replace).
fn write_keystore(dir: &Path, name: &str, secret: &[u8], passphrase: &str) -> Result<(), KeyError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = dir.join(name);
    let failed = |e: String| KeyError::File {
        file: file.clone(),
        reason: e,
    };
    // Random, not the pid: two one-shot containers sharing the volume are both pid 1, and one
    // would write into (or remove) the other's file.
    let partial_name = format!(".{name}.{:016x}.partial", rand::random::<u64>());
    let partial = dir.join(&partial_name);
    let written = (|| -> std::io::Result<()> {
        // Made 0600 before a byte is written (eth-keystore's File::create then keeps the mode).
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&partial)?;
        eth_keystore::encrypt_key(
            dir,
            &mut rand::thread_rng(),
            secret,
            passphrase,
            Some(&partial_name),
        )
        .map_err(std::io::Error::other)?;
        std::fs::File::open(&partial)?.sync_all()?;
        // Only if absent: a keystore is never overwritten, even by a concurrent import.
        std::fs::hard_link(&partial, &file)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    let _ = std::fs::remove_file(&partial);
    written.map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => failed("a keystore for this account exists".into()),
        _ => failed(e.to_string()),
    })
}

/// Writes keystores for the first `count` dev keys into `dir`, encrypted with `passphrase`:
/// `key(index)` gives each one's account, file name and secret. Existing files are kept.
fn import_dev_keys<A>(
    dir: &Path,
    passphrase: &str,
    count: u32,
    key: impl Fn(u32) -> Result<(A, String, Zeroizing<[u8; 32]>), KeyError>,
) -> Result<Vec<A>, KeyError> {
    create_dir(dir)?;
    let mut checked = false;
    (0..count)
        .map(|index| {
            let (account, name, secret) = key(index)?;
            if !dir.join(&name).exists() {
                if !checked {
                    opens_with_the_same_passphrase(dir, passphrase)?;
                    checked = true;
                }
                write_keystore(dir, &name, secret.as_slice(), passphrase)?;
            }
            Ok(account)
        })
        .collect()
}

/// The public test mnemonic anvil (and hardhat) fund their dev accounts from, at
/// m/44'/60'/0'/0/i. Its keys are published everywhere and fund local chains only; never use
/// them on a real network.
const ANVIL_MNEMONIC: &str = "test test test test test test test test test test test junk";

/// The key of anvil's dev account `index`, derived from its mnemonic.
pub fn anvil_dev_key(index: u32) -> Result<PrivateKeySigner, KeyError> {
    use alloy_signer_local::{MnemonicBuilder, coins_bip39::English};
    let derivation = |e: alloy_signer_local::LocalSignerError| KeyError::Derivation {
        index,
        reason: e.to_string(),
    };
    MnemonicBuilder::<English>::default()
        .phrase(ANVIL_MNEMONIC)
        .index(index)
        .map_err(derivation)?
        .build()
        .map_err(derivation)
}

/// Writes keystores for the first `count` anvil dev accounts (as `anvil --accounts N` funds
/// them) into `dir`, encrypted with `passphrase`, one file per account named by its address.
/// Existing files are kept.
pub fn import_anvil_dev_keys(
    dir: &Path,
    passphrase: &str,
    count: u32,
) -> Result<Vec<Address>, KeyError> {
    import_dev_keys(dir, passphrase, count, |index| {
        let key = anvil_dev_key(index)?;
        let address = key.address();
        Ok((
            address,
            format!("{address}.json"),
            Zeroizing::new(key.to_bytes().0),
        ))
    })
}

/// The Ed25519 key of Solana dev account `index`: the same public test mnemonic at Solana's
/// path m/44'/501'/index'/0' (SLIP-0010, as `solana-keygen` and wallets derive it), so a
/// local cluster can fund well-known accounts. Never use them on a real network.
pub fn solana_dev_key(index: u32) -> Result<ed25519_dalek::SigningKey, KeyError> {
    use alloy_signer_local::coins_bip39::{English, Mnemonic};
    let seed = Mnemonic::<English>::new_from_phrase(ANVIL_MNEMONIC)
        .and_then(|m| m.to_seed(None))
        .map_err(|e| KeyError::Derivation {
            index,
            reason: e.to_string(),
        })?;
    let secret = slip10_ed25519(&seed, &[44, 501, index, 0]);
    Ok(ed25519_dalek::SigningKey::from_bytes(&secret))
}

/// SLIP-0010 Ed25519 derivation along a path of hardened indices (Ed25519 has no other kind):
/// the private key at its end.
fn slip10_ed25519(seed: &[u8], path: &[u32]) -> Zeroizing<[u8; 32]> {
    use hmac::{Hmac, Mac};
    let hmac = |key: &[u8], parts: &[&[u8]]| {
        let mut mac = Hmac::<sha2::Sha512>::new_from_slice(key).expect("HMAC takes any key");
        for part in parts {
            mac.update(part);
        }
        Zeroizing::new(<[u8; 64]>::from(mac.finalize().into_bytes()))
    };
    let mut node = hmac(b"ed25519 seed", &[seed]);
    for index in path {
        let hardened = (index | 0x8000_0000).to_be_bytes();
        node = hmac(&node[32..], &[&[0], &node[..32], &hardened]);
    }
    let mut secret = Zeroizing::new([0u8; 32]);
    secret.copy_from_slice(&node[..32]);
    secret
}

/// Writes keystores for the first `count` Solana dev accounts ([`solana_dev_key`]) into `dir`,
/// encrypted with `passphrase`; returns their base58 accounts. Existing files are kept.
pub fn import_solana_dev_keys(
    dir: &Path,
    passphrase: &str,
    count: u32,
) -> Result<Vec<String>, KeyError> {
    import_dev_keys(dir, passphrase, count, |index| {
        let key = solana_dev_key(index)?;
        let account = bs58::encode(key.verifying_key().to_bytes()).into_string();
        let name = format!("{ED25519_PREFIX}{account}.json");
        Ok((account, name, Zeroizing::new(key.to_bytes())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keystore_keys_sign_exactly_as_alloy_s_signer_does() {
        use rand::RngCore;
        let mut rng = rand::thread_rng();
        for _ in 0..200 {
            let alloy_key = PrivateKeySigner::random();
            let ours = KeystoreKey::new(&alloy_key).unwrap();
            let mut digest = [0u8; 32];
            rng.fill_bytes(&mut digest);
            let digest = sigcast_evm::B256::from(digest);
            let signature = ours.sign_digest(&digest).unwrap();
            assert_eq!(signature, alloy_key.sign_digest(&digest).unwrap());
            assert_eq!(
                signature.recover_address_from_prehash(&digest).unwrap(),
                alloy_key.address()
            );
        }
    }

    #[test]
    fn keystores_and_the_directory_made_for_them_are_the_owner_s_alone() {
        // Encrypted, but a keystore other local users can read is one they can try
        // passphrases against offline.
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        // Its missing parent is made as any directory is: another service may read a store
        // there.
        let dir = parent.path().join("sigcast").join("keys");
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        for ed25519 in [false, true] {
            generate_keystore_key(&dir, "pw", ed25519).unwrap();
        }
        let plain = parent.path().join("plain.key");
        std::fs::write(&plain, hex::encode(PrivateKeySigner::random().to_bytes())).unwrap();
        import_key_file(&dir, &plain, "pw").unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_ne!(
            mode(dir.parent().unwrap()),
            0o700,
            "only the keystore directory"
        );
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 3);
        for file in files {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }

    #[test]
    fn dev_keys_are_anvils_accounts_at_the_same_index() {
        // Published by anvil at start; account 4 is the one a copied constant once got wrong.
        for (index, account) in [
            (0, "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
            (4, "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"),
            (9, "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
        ] {
            assert_eq!(anvil_dev_key(index).unwrap().address().to_string(), account);
        }
    }

    #[test]
    fn dev_keys_round_trip_through_encrypted_keystores() {
        let dir = tempfile::tempdir().unwrap();
        let imported = import_anvil_dev_keys(dir.path(), "pass phrase", 2).unwrap();
        assert_eq!(
            imported[0].to_string(),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
        let keyring = Keyring::load(dir.path(), "pass phrase").unwrap();
        assert_eq!(keyring.accounts(), {
            let mut sorted = imported.clone();
            sorted.sort();
            sorted
        });
        assert!(
            format!("{keyring:?}").contains("0xf39F"),
            "Debug shows addresses"
        );
        assert!(!format!("{keyring:?}").contains("ac0974"), "and never keys");
        for file in std::fs::read_dir(dir.path()).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            assert!(
                !text.contains("ac0974bec39a17e36ba4a6b4d238ff944bacb478"),
                "keystores hold no plain key"
            );
        }
        let wrong = Keyring::load(dir.path(), "wrong").unwrap_err();
        assert!(!wrong.to_string().contains("ac0974"));
    }

    #[test]
    fn slip10_matches_the_published_ed25519_vectors() {
        // SLIP-0010, test vector 1 for ed25519: m, m/0H and m/0H/1H.
        let seed = hex::decode("000102030405060708090a0b0c0d0e0f").unwrap();
        for (path, private) in [
            (
                &[][..],
                "2b4be7f19ee27bbf30c667b642d5f4aa69fd169872f8fc3059c08ebae2eb19e7",
            ),
            (
                &[0][..],
                "68e0fe46dfb67e368c75379acec591dad19df3cde26e63b93a8e704f1dade7a3",
            ),
            (
                &[0, 1][..],
                "b1d0bad404bf35da785a64ca1ac54b2617211d2777696fbffaf208f746ae84f2",
            ),
        ] {
            assert_eq!(
                hex::encode(*slip10_ed25519(&seed, path)),
                private,
                "{path:?}"
            );
        }
    }

    #[test]
    fn solana_dev_keys_are_the_wallets_accounts_of_the_test_mnemonic() {
        // What solana-keygen and wallets derive from "test test … junk" at m/44'/501'/i'/0'.
        for (index, account) in [
            (0, "oeYf6KAJkLYhBuR8CiGc6L4D4Xtfepr85fuDgA9kq96"),
            (1, "AqynRZwvVqUPRwRJXvm6odUb3t93fDjnWe3p6BeuUFxD"),
        ] {
            let key = solana_dev_key(index).unwrap();
            assert_eq!(
                bs58::encode(key.verifying_key().to_bytes()).into_string(),
                account
            );
        }
    }

    #[test]
    fn solana_dev_keys_round_trip_through_encrypted_keystores() {
        let dir = tempfile::tempdir().unwrap();
        let imported = import_solana_dev_keys(dir.path(), "pass phrase", 2).unwrap();
        assert_eq!(imported.len(), 2);
        assert_ne!(imported[0], imported[1]);
        assert_eq!(
            import_solana_dev_keys(dir.path(), "pass phrase", 2).unwrap(),
            imported,
            "importing again keeps the same files"
        );
        let keyring = Keyring::load(dir.path(), "pass phrase").unwrap();
        let held: Vec<String> = keyring
            .ed25519_entries()
            .into_iter()
            .map(|(account, _)| account)
            .collect();
        for account in &imported {
            assert!(held.contains(account), "{account} in {held:?}");
        }
    }
}
