//! Transactions from intents. The signer calls `build_transaction`, signs `signature_hash()`
//! with its key, and stores `into_signed(..)`'s bytes before anything is sent.

use crate::{Error, Result};
use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope, TxLegacy};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256};
use sigcast_domain::Intent;

/// Fee fields, fixed when signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fees {
    /// EIP-1559 (type 2).
    Eip1559 {
        /// Max total fee per gas, wei.
        max_fee_per_gas: u128,
        /// Max priority fee per gas, wei.
        max_priority_fee_per_gas: u128,
    },
    /// Legacy (type 0, EIP-155 replay-protected).
    Legacy {
        /// Gas price, wei.
        gas_price: u128,
    },
}

/// What signing fixes besides the intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxParams {
    /// Account nonce.
    pub nonce: u64,
    /// Gas limit.
    pub gas_limit: u64,
    /// Fees.
    pub fees: Fees,
}

/// A transaction ready to sign.
#[derive(Debug, Clone, PartialEq)]
pub enum UnsignedTx {
    /// Type 2.
    Eip1559(TxEip1559),
    /// Type 0.
    Legacy(TxLegacy),
}

/// Signed bytes and their hash.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedTx {
    /// EIP-2718 encoding, as `eth_sendRawTransaction` takes it.
    pub raw: Vec<u8>,
    /// Transaction hash.
    pub hash: B256,
}

impl std::fmt::Debug for SignedTx {
    // Never print a whole signed payload.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedTx")
            .field("hash", &self.hash)
            .field("len", &self.raw.len())
            .finish()
    }
}

/// Builds the transaction that carries `intent` (the operation's own, or a zero-value
/// self-transfer for a cancel or a gap fill) with `params`.
pub fn build_transaction(intent: &Intent, params: TxParams) -> Result<UnsignedTx> {
    let (chain_id, to, value, input) = match intent {
        Intent::EvmTransfer(t) => (t.chain_id, t.to.as_bytes(), t.value.as_str(), Bytes::new()),
        Intent::EvmContractCall(c) => (
            c.chain_id,
            c.to.as_bytes(),
            c.value.as_str(),
            Bytes::from(c.data.clone()),
        ),
        other => return Err(Error::NotEvm(other.chain().to_string())),
    };
    let to = TxKind::Call(Address::from(*to));
    let value =
        U256::from_str_radix(value, 10).map_err(|e| Error::NotEvm(format!("value: {e}")))?;
    Ok(match params.fees {
        Fees::Eip1559 {
            max_fee_per_gas,
            max_priority_fee_per_gas,
        } => UnsignedTx::Eip1559(TxEip1559 {
            chain_id,
            nonce: params.nonce,
            gas_limit: params.gas_limit,
            max_fee_per_gas,
            max_priority_fee_per_gas,
            to,
            value,
            access_list: Default::default(),
            input,
        }),
        Fees::Legacy { gas_price } => UnsignedTx::Legacy(TxLegacy {
            chain_id: Some(chain_id),
            nonce: params.nonce,
            gas_price,
            gas_limit: params.gas_limit,
            to,
            value,
            input,
        }),
    })
}

impl UnsignedTx {
    /// The hash the key signs.
    pub fn signature_hash(&self) -> B256 {
        match self {
            UnsignedTx::Eip1559(tx) => tx.signature_hash(),
            UnsignedTx::Legacy(tx) => tx.signature_hash(),
        }
    }

    /// The signed transaction's bytes and hash.
    pub fn into_signed(self, signature: Signature) -> SignedTx {
        let envelope: TxEnvelope = match self {
            UnsignedTx::Eip1559(tx) => tx.into_signed(signature).into(),
            UnsignedTx::Legacy(tx) => tx.into_signed(signature).into(),
        };
        SignedTx {
            raw: envelope.encoded_2718(),
            hash: *envelope.tx_hash(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_domain::{EvmAddress, EvmTransfer, Wei};

    #[test]
    fn transfer_fields_come_from_the_intent() {
        let intent = Intent::EvmTransfer(EvmTransfer {
            chain_id: 31337,
            from: EvmAddress::parse("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266").unwrap(),
            to: EvmAddress::parse("0x70997970c51812dc3a010c7d01b50e0d17dc79c8").unwrap(),
            value: Wei::parse("1000000000000000000").unwrap(),
        });
        let params = TxParams {
            nonce: 7,
            gas_limit: 21_000,
            fees: Fees::Eip1559 {
                max_fee_per_gas: 2_000_000_000,
                max_priority_fee_per_gas: 1_000_000_000,
            },
        };
        let UnsignedTx::Eip1559(tx) = build_transaction(&intent, params).unwrap() else {
            panic!()
        };
        assert_eq!((tx.chain_id, tx.nonce, tx.gas_limit), (31337, 7, 21_000));
        assert_eq!(tx.value, U256::from(10u64).pow(U256::from(18u64)));
        assert_eq!(
            tx.to,
            TxKind::Call(
                "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                    .parse()
                    .unwrap()
            )
        );
        // Same inputs, same hash to sign: re-signing after a crash reproduces the payload.
        assert_eq!(
            build_transaction(&intent, params).unwrap().signature_hash(),
            build_transaction(&intent, TxParams { nonce: 7, ..params })
                .unwrap()
                .signature_hash()
        );
        assert_ne!(
            build_transaction(&intent, params).unwrap().signature_hash(),
            build_transaction(&intent, TxParams { nonce: 8, ..params })
                .unwrap()
                .signature_hash()
        );
    }
}

/// What a stored signed transaction fixed: its nonce, gas limit and fees. Used to build a
/// replacement at the same nonce.
pub fn params_of(raw: &[u8]) -> Option<TxParams> {
    use alloy_consensus::Transaction;
    use alloy_eips::eip2718::Decodable2718;
    let envelope = TxEnvelope::decode_2718_exact(raw).ok()?;
    let fees = match envelope.max_priority_fee_per_gas() {
        Some(tip) => Fees::Eip1559 {
            max_fee_per_gas: envelope.max_fee_per_gas(),
            max_priority_fee_per_gas: tip,
        },
        None => Fees::Legacy {
            gas_price: envelope.gas_price()?,
        },
    };
    Some(TxParams {
        nonce: envelope.nonce(),
        gas_limit: envelope.gas_limit(),
        fees,
    })
}

/// A signed transaction as a node sees it: who signed it, its hash and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedTx {
    /// The recovered sender.
    pub from: Address,
    /// The transaction hash.
    pub hash: B256,
    /// Nonce, gas limit and fees.
    pub params: TxParams,
}

/// Decodes signed bytes and recovers their sender; `None` for bytes that are not a signed
/// transaction.
pub fn decode_signed(raw: &[u8]) -> Option<DecodedTx> {
    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_eips::eip2718::Decodable2718;
    let envelope = TxEnvelope::decode_2718_exact(raw).ok()?;
    Some(DecodedTx {
        from: envelope.recover_signer().ok()?,
        hash: *envelope.tx_hash(),
        params: params_of(raw)?,
    })
}

/// The most one operation's transactions may offer, from the chain's cap and the key's
/// policy: per gas (the fee cap, or the gas price), and as priority fee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeLimits {
    /// Per gas.
    pub per_gas: u128,
    /// The priority fee per gas (EIP-1559; a legacy gas price is held to `per_gas` alone).
    pub priority: u128,
}

impl FeeLimits {
    /// A per-gas cap alone (the tip is held to it too, as it cannot exceed the fee cap).
    pub fn per_gas(cap: u128) -> Self {
        Self {
            per_gas: cap,
            priority: cap,
        }
    }
}

impl Fees {
    /// These fees held to `limits`.
    pub fn limited(self, limits: FeeLimits) -> Fees {
        match self.capped(limits.per_gas) {
            Fees::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => Fees::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas: max_priority_fee_per_gas.min(limits.priority),
            },
            legacy => legacy,
        }
    }

    /// The highest price per gas these fees can charge (the fee cap, or the gas price).
    pub fn max_per_gas(&self) -> u128 {
        match *self {
            Fees::Eip1559 {
                max_fee_per_gas, ..
            } => max_fee_per_gas,
            Fees::Legacy { gas_price } => gas_price,
        }
    }

    /// These fees held to at most `cap` per gas (the tip too: it cannot exceed the fee cap).
    pub fn capped(self, cap: u128) -> Fees {
        match self {
            Fees::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => Fees::Eip1559 {
                max_fee_per_gas: max_fee_per_gas.min(cap),
                max_priority_fee_per_gas: max_priority_fee_per_gas.min(cap),
            },
            Fees::Legacy { gas_price } => Fees::Legacy {
                gas_price: gas_price.min(cap),
            },
        }
    }

    /// Whether a node takes these fees as a replacement of `previous` at the same nonce:
    /// at least 10% more on every field, and of the same type.
    pub fn replaces(&self, previous: &Fees) -> bool {
        let above = |new: u128, old: u128| new >= old.saturating_add(old / 10);
        match (*self, *previous) {
            (
                Fees::Eip1559 {
                    max_fee_per_gas: fee,
                    max_priority_fee_per_gas: tip,
                },
                Fees::Eip1559 {
                    max_fee_per_gas: old_fee,
                    max_priority_fee_per_gas: old_tip,
                },
            ) => above(fee, old_fee) && above(tip, old_tip),
            (Fees::Legacy { gas_price }, Fees::Legacy { gas_price: old }) => above(gas_price, old),
            _ => false,
        }
    }

    /// These fees, raised where needed so that a block at a base fee of `base_fee` per gas, or
    /// the next one, can hold the transaction; never lowered. EIP-1559: the cap a new
    /// transaction's would be at that base fee, twice it plus the tip (as
    /// [`crate::eip1559_fees_from`]; a cap, not what is paid). Legacy, where the gas price is
    /// paid whole: the most the next block's base fee can be, an eighth above it.
    pub fn for_base_fee_at_least(self, base_fee: u128) -> Fees {
        match self {
            Fees::Eip1559 {
                max_fee_per_gas,
                max_priority_fee_per_gas,
            } => Fees::Eip1559 {
                max_fee_per_gas: max_fee_per_gas.max(
                    crate::eip1559_fees_from(base_fee, max_priority_fee_per_gas).max_per_gas(),
                ),
                max_priority_fee_per_gas,
            },
            Fees::Legacy { gas_price } => Fees::Legacy {
                gas_price: gas_price.max(base_fee.saturating_add(base_fee / 8).saturating_add(1)),
            },
        }
    }

    /// Fees for a replacement at the same nonce: at least `current` and at least 25% above
    /// `previous` on every field (nodes require +10% to replace a pending transaction).
    pub fn bumped(previous: Fees, current: Fees) -> Fees {
        let up = |old: u128, now: u128| now.max(old.saturating_add(old / 4).saturating_add(1));
        match (previous, current) {
            (
                Fees::Eip1559 {
                    max_fee_per_gas: old_fee,
                    max_priority_fee_per_gas: old_tip,
                },
                Fees::Eip1559 {
                    max_fee_per_gas: fee,
                    max_priority_fee_per_gas: tip,
                },
            ) => {
                let tip = up(old_tip, tip);
                Fees::Eip1559 {
                    max_fee_per_gas: up(old_fee, fee).max(tip),
                    max_priority_fee_per_gas: tip,
                }
            }
            (Fees::Legacy { gas_price: old }, Fees::Legacy { gas_price: now }) => Fees::Legacy {
                gas_price: up(old, now),
            },
            // A type change is not a replacement any node accepts: keep the previous type.
            (previous, _) => Fees::bumped(previous, previous),
        }
    }
}

#[cfg(test)]
mod replacement_tests {
    use super::*;

    #[test]
    fn fees_for_a_newer_base_fee_are_raised_to_it_and_never_lowered() {
        let read = Fees::Eip1559 {
            max_fee_per_gas: 30,
            max_priority_fee_per_gas: 2,
        };
        // Read at a base fee of 14 (2 x 14 + 2): a head at 100 asks 2 x 100 + 2.
        assert_eq!(
            read.for_base_fee_at_least(100),
            Fees::Eip1559 {
                max_fee_per_gas: 202,
                max_priority_fee_per_gas: 2,
            }
        );
        assert_eq!(read.for_base_fee_at_least(14), read);
        assert_eq!(read.for_base_fee_at_least(3), read);
        assert_eq!(
            read.for_base_fee_at_least(u128::MAX),
            Fees::Eip1559 {
                max_fee_per_gas: u128::MAX,
                max_priority_fee_per_gas: 2,
            }
        );
        // A legacy gas price is paid whole: raised only to what the next block may ask.
        let legacy = Fees::Legacy { gas_price: 30 };
        assert_eq!(
            legacy.for_base_fee_at_least(800),
            Fees::Legacy { gas_price: 901 }
        );
        assert_eq!(legacy.for_base_fee_at_least(26), legacy);
        assert_eq!(legacy.for_base_fee_at_least(10), legacy);
        assert_eq!(
            legacy.for_base_fee_at_least(u128::MAX),
            Fees::Legacy {
                gas_price: u128::MAX
            }
        );
    }

    #[test]
    fn a_capped_bump_that_no_node_would_take_is_seen_as_such() {
        let previous = Fees::Eip1559 {
            max_fee_per_gas: 90,
            max_priority_fee_per_gas: 10,
        };
        let current = Fees::Eip1559 {
            max_fee_per_gas: 200,
            max_priority_fee_per_gas: 10,
        };
        let bumped = Fees::bumped(previous, current);
        assert!(bumped.replaces(&previous));
        assert_eq!(bumped.max_per_gas(), 200);
        // Under a cap of 95 the bump is held to 95: not 10% above 90, no replacement.
        let capped = bumped.capped(95);
        assert_eq!(capped.max_per_gas(), 95);
        assert!(!capped.replaces(&previous));
        // Under a cap of 150 it still is one.
        assert!(bumped.capped(150).replaces(&previous));
        let legacy = Fees::Legacy { gas_price: 500 };
        assert_eq!(legacy.capped(100), Fees::Legacy { gas_price: 100 });
        assert!(
            !legacy.replaces(&previous),
            "a type change replaces nothing"
        );
    }
    use sigcast_domain::{EvmAddress, EvmTransfer, Wei};

    #[test]
    fn bumps_raise_every_fee_by_a_quarter_at_least() {
        let old = Fees::Eip1559 {
            max_fee_per_gas: 100,
            max_priority_fee_per_gas: 10,
        };
        let low_now = Fees::Eip1559 {
            max_fee_per_gas: 50,
            max_priority_fee_per_gas: 1,
        };
        assert_eq!(
            Fees::bumped(old, low_now),
            Fees::Eip1559 {
                max_fee_per_gas: 126,
                max_priority_fee_per_gas: 13
            }
        );
        let high_now = Fees::Eip1559 {
            max_fee_per_gas: 1_000,
            max_priority_fee_per_gas: 100,
        };
        assert_eq!(Fees::bumped(old, high_now), high_now);
        assert_eq!(
            Fees::bumped(Fees::Legacy { gas_price: 8 }, Fees::Legacy { gas_price: 1 }),
            Fees::Legacy { gas_price: 11 }
        );
    }

    #[test]
    fn params_come_back_out_of_signed_bytes() {
        let intent = Intent::EvmTransfer(EvmTransfer {
            chain_id: 1,
            from: EvmAddress::from([1; 20]),
            to: EvmAddress::from([2; 20]),
            value: Wei::parse("5").unwrap(),
        });
        let params = TxParams {
            nonce: 9,
            gas_limit: 21_000,
            fees: Fees::Eip1559 {
                max_fee_per_gas: 7,
                max_priority_fee_per_gas: 3,
            },
        };
        let unsigned = build_transaction(&intent, params).unwrap();
        let signature = Signature::new(U256::from(1), U256::from(2), false);
        let signed = unsigned.into_signed(signature);
        assert_eq!(params_of(&signed.raw), Some(params));
        assert_eq!(params_of(b"junk"), None);
    }
}
