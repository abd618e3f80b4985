//! Amounts in base units, given as decimal strings so no client loses precision in JSON.

use crate::error::Rule;

/// 2^256 - 1, the largest amount an EVM value field holds.
const U256_MAX: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";

/// Checks a plain decimal of base units and returns it without leading zeros.
fn canonical_decimal(text: &str, unit: &str) -> Result<String, Rule> {
    if text.is_empty() {
        return Err(Rule::new(format!("must be a decimal number of {unit}")));
    }
    if text.starts_with('-') {
        return Err(Rule::new(format!("must not be negative (got {text})")));
    }
    if text.contains(['.', 'e', 'E'])
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return Err(Rule::new(format!(
            "must be a whole number of {unit}, without a fraction or exponent"
        )));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Rule::new(format!(
            "must contain only the digits 0-9 ({unit}, no sign, separators or prefix)"
        )));
    }
    let trimmed = text.trim_start_matches('0');
    Ok(if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    })
}

/// An amount of wei, 0 to 2^256-1, held as its canonical decimal string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wei(String);

impl Wei {
    /// Zero wei.
    pub fn zero() -> Self {
        Self("0".to_owned())
    }

    /// Parses a decimal string of wei. Leading zeros are accepted and dropped.
    pub fn parse(text: &str) -> Result<Self, Rule> {
        let digits = canonical_decimal(text, "wei")?;
        let overflows = digits.len() > U256_MAX.len()
            || (digits.len() == U256_MAX.len() && digits.as_str() > U256_MAX);
        if overflows {
            return Err(Rule::new("must not exceed 2^256-1 wei"));
        }
        Ok(Self(digits))
    }

    /// The canonical decimal string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for Wei {
    /// Numeric order: canonical decimals (no leading zeros) compare by length, then digits.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Wei {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Wei {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An amount of lamports, 0 to 2^64-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lamports(pub u64);

impl Lamports {
    /// Parses a decimal string of lamports. Leading zeros are accepted.
    pub fn parse(text: &str) -> Result<Self, Rule> {
        let digits = canonical_decimal(text, "lamports")?;
        digits
            .parse::<u64>()
            .map(Self)
            .map_err(|_| Rule::new("must not exceed 2^64-1 lamports"))
    }
}

impl std::fmt::Display for Lamports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_print_as_their_canonical_decimal() {
        assert_eq!(Wei::parse("0100").unwrap().to_string(), "100");
        assert_eq!(Lamports::parse("007").unwrap().to_string(), "7");
    }

    #[test]
    fn wei_bounds_and_canonical_form() {
        assert_eq!(Wei::parse("0").unwrap().as_str(), "0");
        assert_eq!(Wei::parse("000").unwrap().as_str(), "0");
        assert_eq!(Wei::parse("0100").unwrap().as_str(), "100");
        assert_eq!(Wei::parse(U256_MAX).unwrap().as_str(), U256_MAX);
        let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        assert!(Wei::parse(over).is_err());
        assert!(Wei::parse(&format!("1{U256_MAX}")).is_err());
        assert!(Wei::parse(&format!("0{U256_MAX}")).is_ok());
        for bad in ["", "-1", "1.5", "1e18", "0x10", " 1", "1_000", "+1", "１"] {
            assert!(Wei::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wei_orders_numerically() {
        let w = |s| Wei::parse(s).unwrap();
        assert!(w("9") < w("10"));
        assert!(w("0100") > w("99"));
        assert_eq!(w("007").cmp(&w("7")), std::cmp::Ordering::Equal);
    }

    #[test]
    fn lamports_bounds() {
        assert_eq!(Lamports::parse("18446744073709551615").unwrap().0, u64::MAX);
        assert!(Lamports::parse("18446744073709551616").is_err());
        assert!(Lamports::parse("-5").unwrap_err().0.contains("negative"));
        assert!(
            Lamports::parse("2.5")
                .unwrap_err()
                .0
                .contains("whole number")
        );
    }
}
