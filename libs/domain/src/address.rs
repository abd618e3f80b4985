//! Account addresses as the chains define them, parsed strictly and printed canonically.

use crate::error::Rule;
use tiny_keccak::{Hasher, Keccak};

/// A 20-byte EVM account address. Prints in EIP-55 checksummed form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EvmAddress([u8; 20]);

impl EvmAddress {
    /// Parses `0x` + 40 hex digits. All-lowercase and all-uppercase digits are accepted as they
    /// are; mixed case must be a valid EIP-55 checksum, since a wrong one means a typo.
    pub fn parse(text: &str) -> Result<Self, Rule> {
        let digits = text
            .strip_prefix("0x")
            .ok_or_else(|| Rule::new("must start with 0x followed by 40 hex digits"))?;
        if digits.len() != 40 {
            return Err(Rule::new(format!(
                "must be 0x followed by 40 hex digits (got {} digits)",
                digits.len()
            )));
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(digits, &mut bytes)
            .map_err(|_| Rule::new("must be 0x followed by 40 hex digits (0-9, a-f)"))?;
        let address = Self(bytes);
        let has_lower = digits.bytes().any(|b| b.is_ascii_lowercase());
        let has_upper = digits.bytes().any(|b| b.is_ascii_uppercase());
        if has_lower && has_upper && address.checksummed()[2..] != *digits.as_bytes() {
            return Err(Rule::new(
                "has an invalid EIP-55 checksum (check the letter case)",
            ));
        }
        Ok(address)
    }

    /// The raw 20 bytes.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// `0x` and the 40 hex digits, each letter upper case where the Keccak-256 hash of the
    /// lower-case digits has a nibble of 8 or more (EIP-55). Built in place: a replayed
    /// submit checks two of these, and a string and a write per digit were most of its
    /// intent's parsing.
    fn checksummed(&self) -> [u8; 42] {
        let mut text = [0u8; 42];
        text[..2].copy_from_slice(b"0x");
        hex::encode_to_slice(self.0, &mut text[2..]).expect("40 digits for 20 bytes");
        let mut hash = [0u8; 32];
        let mut keccak = Keccak::v256();
        keccak.update(&text[2..]);
        keccak.finalize(&mut hash);
        for (i, digit) in text[2..].iter_mut().enumerate() {
            let nibble = (hash[i / 2] >> if i % 2 == 0 { 4 } else { 0 }) & 0x0f;
            if nibble >= 8 {
                digit.make_ascii_uppercase();
            }
        }
        text
    }
}

impl From<[u8; 20]> for EvmAddress {
    fn from(bytes: [u8; 20]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Display for EvmAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.checksummed();
        f.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?)
    }
}

/// A 32-byte Solana public key. Prints in base58.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SolanaPubkey([u8; 32]);

impl SolanaPubkey {
    /// Parses a base58 public key: exactly 32 bytes, in its one canonical spelling.
    pub fn parse(text: &str) -> Result<Self, Rule> {
        if text.is_empty() || text.len() > 44 {
            return Err(Rule::new(
                "must be a base58 public key of 32 bytes (32 to 44 characters)",
            ));
        }
        let mut bytes = [0u8; 32];
        let len = bs58::decode(text)
            .onto(&mut bytes[..])
            .map_err(|_| Rule::new("must be a base58 public key of 32 bytes"))?;
        if len != 32 {
            return Err(Rule::new(format!(
                "must be a base58 public key of 32 bytes (decodes to {len})"
            )));
        }
        Ok(Self(bytes))
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl From<[u8; 32]> for SolanaPubkey {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Display for SolanaPubkey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&bs58::encode(self.0).into_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The EIP-55 specification's own examples.
    const CHECKSUMMED: [&str; 4] = [
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn solana_keys_of_the_longest_spelling_parse_and_longer_or_empty_text_is_refused_by_length() {
        // 32 bytes of 0xff spell 44 characters, the longest a key can.
        let longest = SolanaPubkey::from([0xff; 32]).to_string();
        assert_eq!(longest.len(), 44);
        assert_eq!(
            SolanaPubkey::parse(&longest).unwrap(),
            SolanaPubkey::from([0xff; 32])
        );
        // Refused before decoding (a long string is not decoded at all), with the rule named.
        for bad in [String::new(), format!("{longest}1")] {
            let rule = SolanaPubkey::parse(&bad).unwrap_err().0;
            assert!(rule.contains("32 to 44 characters"), "{bad:?}: {rule}");
        }
    }

    #[test]
    fn evm_checksum_round_trips() {
        for text in CHECKSUMMED {
            let address = EvmAddress::parse(text).unwrap();
            assert_eq!(address.to_string(), text);
            assert_eq!(EvmAddress::parse(&text.to_lowercase()).unwrap(), address);
            let upper = format!("0x{}", text[2..].to_uppercase());
            assert_eq!(EvmAddress::parse(&upper).unwrap(), address);
        }
    }

    #[test]
    fn evm_rejects_bad_checksum_and_shapes() {
        // One letter's case flipped.
        assert!(EvmAddress::parse("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD").is_err());
        for bad in [
            "",
            "0x",
            "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0x123",
            "0xZZeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed00",
        ] {
            assert!(EvmAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn solana_pubkeys() {
        let system = SolanaPubkey::parse("11111111111111111111111111111111").unwrap();
        assert_eq!(system.as_bytes(), &[0u8; 32]);
        let key = SolanaPubkey::parse("Vote111111111111111111111111111111111111111").unwrap();
        assert_eq!(
            key.to_string(),
            "Vote111111111111111111111111111111111111111"
        );
        for bad in [
            "",
            "0OIl",
            "1111",
            "Vote1111111111111111111111111111111111111111111111",
        ] {
            assert!(SolanaPubkey::parse(bad).is_err(), "{bad}");
        }
    }
}
