//! Reading a certificate's expiry (`notAfter`) from PEM, for `check_status`'s certificate
//! lineages, with the maintained X.509 parser the monitor reads served certificates with
//! (`x509-parser`), so no `openssl` process is needed to answer "when does it expire".

use chrono::{DateTime, Utc};
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The `notAfter` of a DER certificate; `None` when it is not one or its date is out of range.
pub fn not_after_of_der(der: &[u8]) -> Option<DateTime<Utc>> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    DateTime::from_timestamp(certificate.validity().not_after.timestamp(), 0)
}

crate::domain::refusal!(
    /// Why a certificate file's expiry could not be read.
    BadCertificate
);

/// The `notAfter` of the first certificate in a PEM file (a leaf before its chain; a key or
/// other block before it is passed over).
pub fn not_after_of_pem(pem: &str) -> Result<DateTime<Utc>, BadCertificate> {
    for block in Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|_| BadCertificate::from("the certificate is not valid PEM"))?;
        if block.label == "CERTIFICATE" {
            return not_after_of_der(&block.contents)
                .ok_or_else(|| "the certificate's validity could not be read".into());
        }
    }
    Err("no certificate in the file".into())
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

    /// A certificate for `example.test` valid until `until` (RFC 5280: UTCTime up to 2049,
    /// GeneralizedTime from 2050), as PEM.
    fn until(year: i32, month: u8, day: u8) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["example.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn utc_time_years_before_fifty_are_this_century_and_generalized_time_is_read_too() {
        assert_eq!(
            not_after_of_pem(&until(2049, 12, 31)).unwrap().to_rfc3339(),
            "2049-12-31T00:00:00+00:00"
        );
        assert_eq!(
            not_after_of_pem(&until(2061, 1, 1)).unwrap().to_rfc3339(),
            "2061-01-01T00:00:00+00:00"
        );
    }

    #[test]
    fn a_file_that_is_no_certificate_says_why() {
        assert_eq!(
            not_after_of_pem("hello").unwrap_err().0,
            "no certificate in the file"
        );
        let truncated = CERTIFICATE.replace("/eUp5LWGhQ==\n", "");
        assert!(not_after_of_pem(&truncated).is_err());
        let garbled = CERTIFICATE.replace("MIIBgzCC", "MIIBgz!!");
        assert!(not_after_of_pem(&garbled).is_err());
        assert_eq!(not_after_of_der(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
        assert_eq!(not_after_of_der(&[]), None);
    }

    #[test]
    fn a_key_before_the_certificate_is_passed_over() {
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let both = format!("{key}{CERTIFICATE}");
        assert_eq!(
            not_after_of_pem(&both).unwrap().to_rfc3339(),
            "2026-12-29T10:07:54+00:00"
        );
        assert_eq!(
            not_after_of_pem(key).unwrap_err().0,
            "no certificate in the file"
        );
    }
}
