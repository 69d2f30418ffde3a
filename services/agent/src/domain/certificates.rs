//! Reading a certificate's expiry (`notAfter`) from PEM, for `check_status`'s certificate
//! lineages: a few lines of DER walking (RFC 5280 §4.1), so no TLS or X.509 library and no
//! `openssl` process is needed to answer "when does it expire".

use base64::{engine::general_purpose::STANDARD, Engine as _};
use chrono::{DateTime, NaiveDate, Utc};

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its tag, its content, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = element(input)?;
    (found == tag).then_some((content, rest))
}

fn digits(text: &[u8]) -> Option<u32> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// `YYMMDDHHMMSSZ` (UTCTime: years 50-99 are 19xx) or `YYYYMMDDHHMMSSZ` (GeneralizedTime).
fn time(tag: u8, text: &[u8]) -> Option<DateTime<Utc>> {
    let (year, rest) = match tag {
        UTC_TIME if text.len() == 13 => {
            let short = digits(&text[..2])?;
            (
                if short >= 50 {
                    1900 + short
                } else {
                    2000 + short
                },
                &text[2..],
            )
        }
        GENERALIZED_TIME if text.len() == 15 => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest.last() != Some(&b'Z') {
        return None;
    }
    let field = |at: usize| digits(&rest[at..at + 2]);
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, field(0)?, field(2)?)?;
    let moment = date.and_hms_opt(field(4)?, field(6)?, field(8)?)?;
    Some(moment.and_utc())
}

/// The `notAfter` of a DER certificate.
pub fn not_after_of_der(der: &[u8]) -> Option<DateTime<Utc>> {
    let (certificate, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    let (_serial, rest) = expect(rest, INTEGER)?;
    let (_algorithm, rest) = expect(rest, SEQUENCE)?;
    let (_issuer, rest) = expect(rest, SEQUENCE)?;
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (_, _not_before, rest) = element(validity)?;
    let (tag, not_after, _) = element(rest)?;
    time(tag, not_after)
}

/// The `notAfter` of the first certificate in a PEM file (a leaf before its chain).
pub fn not_after_of_pem(pem: &str) -> Result<DateTime<Utc>, String> {
    let body = pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|after| after.split("-----END CERTIFICATE-----").next())
        .ok_or("no certificate in the file")?;
    let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = STANDARD
        .decode(base64)
        .map_err(|_| "the certificate is not valid base64")?;
    not_after_of_der(&der).ok_or_else(|| "the certificate's validity could not be read".into())
}

/// Whole days from `now` to `not_after` (negative once expired).
pub fn days_left(not_after: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    not_after.signed_duration_since(now).num_days()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `openssl req -x509 -newkey ec ... -days 30 -subj /CN=example.test`;
    /// `openssl x509 -enddate` says `notAfter=Dec 29 10:07:54 2026 GMT`.
    const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIBgzCCASmgAwIBAgIUPgFpDRG5/jDCiyij+uwmilOQwTgwCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZXhhbXBsZS50ZXN0MB4XDTI2MTEyOTEwMDc1NFoXDTI2MTIy
OTEwMDc1NFowFzEVMBMGA1UEAwwMZXhhbXBsZS50ZXN0MFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAEgnbNkbZ73dpAhcW3id1bMaYWXqb1/UBZuHpEx+Ud+Kj1jAnJ
QRN1A2KbP5Wk4SGCBv+Y+eTP8rS5EtknAGSyBqNTMFEwHQYDVR0OBBYEFJLfZST6
wq576o60UZfV8Lb2ajtOMB8GA1UdIwQYMBaAFJLfZST6wq576o60UZfV8Lb2ajtO
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgTEwAry3Fl0gpPrxx
gEXVqiibnhtOSnaqxDpgdgDvi8ACIQCIdiRZvBLmdNT1dx/ntvbOD65EWJCewnyl
/eUp5LWGhQ==
-----END CERTIFICATE-----
";

    #[test]
    fn the_expiry_of_a_pem_certificate_is_read_as_openssl_reads_it() {
        let not_after = not_after_of_pem(CERTIFICATE).unwrap();
        assert_eq!(not_after.to_rfc3339(), "2026-12-29T10:07:54+00:00");
        let now = DateTime::parse_from_rfc3339("2026-11-29T10:07:54Z")
            .unwrap()
            .to_utc();
        assert_eq!(days_left(not_after, now), 30);
    }

    #[test]
    fn utc_time_years_before_fifty_are_this_century_and_generalized_time_is_read_too() {
        assert_eq!(
            time(UTC_TIME, b"491231235959Z").unwrap().to_rfc3339(),
            "2049-12-31T23:59:59+00:00"
        );
        assert_eq!(
            time(UTC_TIME, b"500101000000Z").unwrap().to_rfc3339(),
            "1950-01-01T00:00:00+00:00"
        );
        assert_eq!(
            time(GENERALIZED_TIME, b"20610101000000Z")
                .unwrap()
                .to_rfc3339(),
            "2061-01-01T00:00:00+00:00"
        );
        assert_eq!(time(UTC_TIME, b"491331235959Z"), None);
        assert_eq!(time(UTC_TIME, b"4912312359+0100"), None);
    }

    #[test]
    fn a_file_that_is_no_certificate_says_why() {
        assert_eq!(
            not_after_of_pem("hello").unwrap_err(),
            "no certificate in the file"
        );
        let truncated = CERTIFICATE.replace("/eUp5LWGhQ==\n", "");
        assert!(not_after_of_pem(&truncated).is_err());
        assert_eq!(not_after_of_der(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
    }
}
