//! The webhook's certificates, as MetalLB's certificate rotator keeps them
//! (open-policy-agent cert-controller): a self-signed CA (`cert`, org
//! `metallb`) and a serving certificate for `<service>.<namespace>.svc`
//! signed by it, in the Secret `--webhook-secret` (`ca.crt`, `ca.key`,
//! `tls.crt`, `tls.key`).
//!
//! Pure: [`plan`] looks at what the Secret holds and says what to do,
//! [`generate`] makes the new material. The Kubernetes edge is
//! [`super::rotator`].

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

/// The CA's common name (MetalLB's `caName`).
pub const CA_NAME: &str = "cert";
/// The CA's organisation (MetalLB's `caOrganization`).
pub const CA_ORGANIZATION: &str = "metallb";
/// Keys of the Secret.
pub const CA_CERT: &str = "ca.crt";
/// The CA's key.
pub const CA_KEY: &str = "ca.key";
/// The serving certificate.
pub const TLS_CERT: &str = "tls.crt";
/// The serving key.
pub const TLS_KEY: &str = "tls.key";

/// How long certificates live and when they are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// Validity of a new CA.
    pub ca: Duration,
    /// Validity of a new serving certificate.
    pub serving: Duration,
    /// A certificate that expires within this is replaced.
    pub lookahead: Duration,
}

impl Default for Lifetimes {
    /// The cert-controller's: a CA for 10 years, a serving certificate for
    /// one, replaced 90 days before it expires.
    fn default() -> Self {
        Lifetimes {
            ca: Duration::from_secs(10 * 365 * 24 * 3600),
            serving: Duration::from_secs(365 * 24 * 3600),
            lookahead: Duration::from_secs(90 * 24 * 3600),
        }
    }
}

/// The PEM material of the Secret. `Debug` does not show the keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    /// `ca.crt`.
    pub ca_cert: String,
    /// `ca.key`.
    pub ca_key: String,
    /// `tls.crt`.
    pub tls_cert: String,
    /// `tls.key`.
    pub tls_key: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle").finish_non_exhaustive()
    }
}

impl Bundle {
    /// The bundle of a Secret's data, when every key is there and UTF-8.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Option<Bundle> {
        let get = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.clone()).ok())
                .filter(|s| !s.is_empty())
        };
        Some(Bundle {
            ca_cert: get(CA_CERT)?,
            ca_key: get(CA_KEY)?,
            tls_cert: get(TLS_CERT)?,
            tls_key: get(TLS_KEY)?,
        })
    }

    /// The Secret's data.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        [
            (CA_CERT, &self.ca_cert),
            (CA_KEY, &self.ca_key),
            (TLS_CERT, &self.tls_cert),
            (TLS_KEY, &self.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
    }
}

/// Why new material was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// What is there serves: keep it.
    Keep,
    /// A new serving certificate signed by the CA that is there.
    NewServing,
    /// A new CA and serving certificate (nothing usable there).
    NewAll,
}

/// What a certificate says about itself: validity and DNS names.
struct Info {
    not_before: i64,
    not_after: i64,
    dns_names: Vec<String>,
}

fn info(pem: &str) -> Option<Info> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let dns_names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Info {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        dns_names,
    })
}

/// Whether `pem` is valid at `now` and still `lookahead` later.
fn fresh(i: &Info, now: OffsetDateTime, lookahead: Duration) -> bool {
    let now = now.unix_timestamp();
    let ahead = now.saturating_add(i64::try_from(lookahead.as_secs()).unwrap_or(i64::MAX));
    i.not_before <= now && ahead < i.not_after
}

/// What to do with what the Secret holds, for the DNS name `dns_name`.
pub fn plan(
    bundle: Option<&Bundle>,
    dns_name: &str,
    now: OffsetDateTime,
    lifetimes: Lifetimes,
) -> Plan {
    let Some(b) = bundle else {
        return Plan::NewAll;
    };
    let ca_ok = info(&b.ca_cert).is_some_and(|i| fresh(&i, now, lifetimes.lookahead))
        && rcgen::KeyPair::from_pem(&b.ca_key).is_ok();
    if !ca_ok {
        return Plan::NewAll;
    }
    let serving_ok = info(&b.tls_cert).is_some_and(|i| {
        fresh(&i, now, lifetimes.lookahead) && i.dns_names.iter().any(|d| d == dns_name)
    }) && signed_by(&b.tls_cert, &b.ca_cert)
        && rcgen::KeyPair::from_pem(&b.tls_key).is_ok();
    if serving_ok {
        Plan::Keep
    } else {
        Plan::NewServing
    }
}

/// Whether the certificate `cert` is signed by `ca`.
fn signed_by(cert: &str, ca: &str) -> bool {
    let Ok((_, cert)) = x509_parser::pem::parse_x509_pem(cert.as_bytes()) else {
        return false;
    };
    let Ok((_, ca)) = x509_parser::pem::parse_x509_pem(ca.as_bytes()) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (cert.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
#[error("making the webhook certificates: {0}")]
pub struct CertError(#[from] rcgen::Error);

/// New material for `plan` (`Keep` returns `bundle` as it is). `names` are
/// the serving certificate's DNS names or IP addresses (the first is
/// `<service>.<namespace>.svc`).
pub fn generate(
    plan: Plan,
    bundle: Option<&Bundle>,
    names: &[String],
    now: OffsetDateTime,
    lifetimes: Lifetimes,
) -> Result<Bundle, CertError> {
    let (ca_cert, ca_key) = match (plan, bundle) {
        (Plan::Keep, Some(b)) => return Ok(b.clone()),
        (Plan::NewServing, Some(b)) => (b.ca_cert.clone(), b.ca_key.clone()),
        _ => {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, CA_NAME);
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, CA_ORGANIZATION);
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![
                rcgen::KeyUsagePurpose::DigitalSignature,
                rcgen::KeyUsagePurpose::KeyCertSign,
            ];
            params.not_before = now - Duration::from_secs(3600);
            params.not_after = now + lifetimes.ca;
            let key = rcgen::KeyPair::generate()?;
            let cert = params.self_signed(&key)?;
            (cert.pem(), key.serialize_pem())
        }
    };
    let ca_key_pair = rcgen::KeyPair::from_pem(&ca_key)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, ca_key_pair)?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    if let Some(first) = names.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, first.clone());
    }
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, CA_ORGANIZATION);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - Duration::from_secs(3600);
    params.not_after = now + lifetimes.serving;
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_cert,
        ca_key,
        tls_cert: cert.pem(),
        tls_key: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DNS: &str = "metallb-webhook-service.metallb-system.svc";

    fn names() -> Vec<String> {
        vec![DNS.to_string()]
    }

    #[test]
    fn nothing_there_makes_everything_and_the_result_is_kept() {
        let now = OffsetDateTime::now_utc();
        let l = Lifetimes::default();
        assert_eq!(plan(None, DNS, now, l), Plan::NewAll);
        let b = generate(Plan::NewAll, None, &names(), now, l).expect("made");
        assert_eq!(plan(Some(&b), DNS, now, l), Plan::Keep);
        assert!(signed_by(&b.tls_cert, &b.ca_cert));
        // Through the Secret's data and back.
        assert_eq!(Bundle::from_data(&b.to_data()), Some(b.clone()));
        // No key in Debug.
        assert!(!format!("{b:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_serving_certificate_near_expiry_is_replaced_under_the_same_ca() {
        let now = OffsetDateTime::now_utc();
        let l = Lifetimes::default();
        let b = generate(Plan::NewAll, None, &names(), now, l).expect("made");
        // 300 days later the serving certificate (1 year) is within 90 days of expiry;
        // the CA (10 years) is not.
        let later = now + Duration::from_secs(300 * 24 * 3600);
        assert_eq!(plan(Some(&b), DNS, later, l), Plan::NewServing);
        let r = generate(Plan::NewServing, Some(&b), &names(), later, l).expect("made");
        assert_eq!(r.ca_cert, b.ca_cert);
        assert_ne!(r.tls_cert, b.tls_cert);
        assert!(signed_by(&r.tls_cert, &b.ca_cert));
        assert_eq!(plan(Some(&r), DNS, later, l), Plan::Keep);
        // Near the CA's end, everything is new.
        let much_later = now + Duration::from_secs((10 * 365 - 30) * 24 * 3600);
        assert_eq!(plan(Some(&r), DNS, much_later, l), Plan::NewAll);
    }

    #[test]
    fn another_name_or_another_ca_or_garbage_is_replaced() {
        let now = OffsetDateTime::now_utc();
        let l = Lifetimes::default();
        let b = generate(Plan::NewAll, None, &names(), now, l).expect("made");
        assert_eq!(
            plan(Some(&b), "other.metallb-system.svc", now, l),
            Plan::NewServing
        );
        let other = generate(Plan::NewAll, None, &names(), now, l).expect("made");
        let mixed = Bundle {
            tls_cert: other.tls_cert.clone(),
            tls_key: other.tls_key.clone(),
            ..b.clone()
        };
        assert_eq!(plan(Some(&mixed), DNS, now, l), Plan::NewServing);
        let garbage = Bundle {
            ca_cert: "not a certificate".into(),
            ..b.clone()
        };
        assert_eq!(plan(Some(&garbage), DNS, now, l), Plan::NewAll);
        let mut data = b.to_data();
        data.remove(TLS_KEY);
        assert_eq!(Bundle::from_data(&data), None);
    }
}
