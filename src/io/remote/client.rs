//! Object store clients: built from a URI, `storage_options` (the
//! `object_store` crate's key names) and the usual environment variables
//! (`AWS_*`, `GOOGLE_*`, `AZURE_*`), remade in a forked child, and the
//! mapping of their errors to `io::Error`s whose kind says what happened
//! and whose message names the object but never a credential.

// A build with `remote` but no cloud feature makes no client at all.
#![cfg_attr(
    not(any(feature = "aws", feature = "gcp", feature = "azure", feature = "http")),
    allow(dead_code)
)]

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::per_process::PerProcess;
use std::time::Duration;

use object_store::multipart::MultipartStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};

use super::policy::ReadPolicy;
use crate::io::uri::{RemoteUri, Scheme};
use crate::{Error, Result};

/// Options that loaderx reads itself (every other key goes to the client).
const MAX_RETRIES: &str = "max_retries";
const RETRY_TIMEOUT: &str = "retry_timeout";
const HEDGE: &str = "hedge";
const HEDGE_MIN_DELAY: &str = "hedge_min_delay";
const HEDGE_MULTIPLE: &str = "hedge_multiple";
const READ_TIMEOUT: &str = "read_timeout";

/// What a client is built from; kept so that a forked child can build its
/// own.
#[derive(Clone)]
pub(crate) struct ClientConfig {
    uri: RemoteUri,
    options: Vec<(String, String)>,
    retry: RetryConfig,
    /// How gathers read ranges (hedging, the timeout).
    pub(crate) reads: ReadPolicy,
    pub(crate) secrets: Secrets,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Option values may be credentials: only their keys are shown.
        let keys: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ClientConfig")
            .field("root", &self.uri.root)
            .field("option_keys", &keys)
            .finish()
    }
}

/// Values that must never appear in a message: credentials from the
/// options and the environment.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Arc<Vec<String>>);

/// Whether an option or environment variable named `key` holds a secret.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "key",
        "sas",
        "credential",
        "signature",
        "session",
    ]
    .iter()
    .any(|s| k.contains(s))
        && !k.ends_with("_file")
        && !k.contains("key_id_file")
}

impl Secrets {
    fn collect(options: &[(String, String)]) -> Secrets {
        let mut values: Vec<String> = options
            .iter()
            .filter(|(k, _)| is_secret_key(k))
            .map(|(_, v)| v.clone())
            .collect();
        for (k, v) in std::env::vars() {
            let cloud = ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p));
            if cloud && is_secret_key(&k) {
                values.push(v);
            }
        }
        // Short values would blank out ordinary words.
        values.retain(|v| v.len() >= 4);
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Secrets(Arc::new(values))
    }

    /// `msg` with every secret value and every URL query string removed.
    pub(crate) fn scrub(&self, msg: &str) -> String {
        let mut out = strip_queries(msg);
        for s in self.0.iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        out
    }
}

/// Removes the query string of every URL in `msg` (a presigned or SAS URL
/// carries its signature there).
fn strip_queries(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find("://") {
        let end_of_url = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ','))
            .map_or(rest.len(), |e| at + e);
        let url = &rest[..end_of_url];
        match url[at..].find('?') {
            Some(q) => out.push_str(&url[..at + q]),
            None => out.push_str(url),
        }
        rest = &rest[end_of_url..];
    }
    out.push_str(rest);
    out
}

fn parse_seconds(key: &str, value: &str) -> Result<Duration> {
    let v = value.trim();
    let (num, scale) = if let Some(ms) = v.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = v.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = v.strip_suffix('m') {
        (m, 60.0)
    } else {
        (v, 1.0)
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| Duration::from_secs_f64(x * scale))
        .ok_or_else(|| {
            Error::InvalidValue(format!(
                "storage option {key:?} must be a duration in seconds (e.g. \"30\", \"30s\", \"500ms\"), got {value:?}"
            ))
        })
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::InvalidValue(format!(
            "storage option {key:?} must be \"true\" or \"false\", got {value:?}"
        ))),
    }
}

fn parse_multiple(key: &str, value: &str) -> Result<f64> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 1.0)
        .ok_or_else(|| {
            Error::InvalidValue(format!(
                "storage option {key:?} must be a number of at least 1, got {value:?}"
            ))
        })
}

impl ClientConfig {
    /// Checks `options` for `uri`'s store and gets its client (built once
    /// per process: [`ClientConfig::shared`]), so a bad key or value fails
    /// here (`InvalidValue` naming the key, never its value).
    pub(crate) fn new(uri: RemoteUri, options: &[(String, String)]) -> Result<ClientConfig> {
        let mut retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(15),
                base: 2.0,
            },
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
        };
        let mut reads = ReadPolicy::default();
        let mut rest = Vec::with_capacity(options.len());
        for (k, v) in options {
            match k.as_str() {
                HEDGE => reads.hedge = parse_bool(k, v)?,
                HEDGE_MIN_DELAY => reads.hedge_min_delay = parse_seconds(k, v)?,
                HEDGE_MULTIPLE => reads.hedge_multiple = parse_multiple(k, v)?,
                READ_TIMEOUT => {
                    reads.read_timeout = parse_seconds(k, v)?;
                    if reads.read_timeout.is_zero() {
                        return Err(Error::InvalidValue(format!(
                            "storage option {READ_TIMEOUT:?} must be a positive duration, got {v:?}"
                        )));
                    }
                }
                MAX_RETRIES => {
                    retry.max_retries = v.trim().parse().map_err(|_| {
                        Error::InvalidValue(format!(
                        "storage option {MAX_RETRIES:?} must be a non-negative integer, got {v:?}"
                    ))
                    })?
                }
                RETRY_TIMEOUT => retry.retry_timeout = parse_seconds(k, v)?,
                _ => rest.push((k.clone(), v.clone())),
            }
        }
        let config = ClientConfig {
            secrets: Secrets::collect(options),
            uri,
            options: rest,
            retry,
            reads,
        };
        config.shared()?;
        Ok(config)
    }

    /// The client of this process for what builds this one (the root,
    /// the options, the retry policy and the environment variables the
    /// builders and their HTTP client read): built once and shared by
    /// every location with the same, so that its connections are reused
    /// from one call to the next.
    fn shared(&self) -> Result<Stores> {
        let key = self.build_key();
        let built = BUILT
            .get_or_try_init(|| Ok::<_, std::convert::Infallible>(Mutex::default()))
            .unwrap_or_else(|e| match e {});
        if let Some(stores) = built.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(stores.clone());
        }
        let stores = self.build()?;
        let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
        if built.len() >= SHARED_CLIENTS {
            built.clear();
        }
        Ok(built.entry(key).or_insert(stores).clone())
    }

    /// What [`ClientConfig::build`] depends on, as one string (kept in
    /// memory only: it holds the credentials).
    fn build_key(&self) -> String {
        let mut env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| {
                let up = k.to_ascii_uppercase();
                ["AWS_", "GOOGLE_", "AZURE_", "OBJECT_STORE_"]
                    .iter()
                    .any(|p| up.starts_with(p))
                    || up.contains("PROXY")
                    || up.starts_with("SSL_CERT")
            })
            .collect();
        env.sort();
        format!(
            "{}\0{:?}\0{:?}\0{:?}",
            self.uri.root, self.options, self.retry, env
        )
    }

    pub(crate) fn uri(&self) -> &RemoteUri {
        &self.uri
    }

    fn unknown_key(&self, key: &str) -> Error {
        Error::InvalidValue(format!(
            "storage option {key:?} is not an option of {} stores (the object_store crate's key names, e.g. {}; or loaderx's own {MAX_RETRIES:?}, {RETRY_TIMEOUT:?}, {READ_TIMEOUT:?}, {HEDGE:?}, {HEDGE_MIN_DELAY:?}, {HEDGE_MULTIPLE:?})",
            self.uri.scheme.name(),
            match self.uri.scheme {
                Scheme::S3 => "\"aws_endpoint\", \"aws_region\", \"aws_access_key_id\", \"aws_allow_http\"",
                Scheme::Gcs => "\"google_service_account\", \"google_application_credentials\"",
                Scheme::Azure => "\"azure_storage_account_name\", \"azure_storage_account_key\"",
                Scheme::Http => "\"allow_http\", \"timeout\"",
            }
        ))
    }

    fn build_error(&self, e: object_store::Error) -> Error {
        Error::InvalidValue(format!(
            "cannot use {} with these storage options: {}",
            self.uri.display(),
            self.secrets.scrub(&e.to_string())
        ))
    }

    /// A new client for this location.
    #[cfg_attr(
        not(any(feature = "aws", feature = "gcp", feature = "azure", feature = "http")),
        allow(unused_variables, unreachable_code)
    )]
    fn build(&self) -> Result<Stores> {
        let root = &self.uri.root;
        let store: Stores = match self.uri.scheme {
            #[cfg(feature = "aws")]
            Scheme::S3 => {
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
                use std::str::FromStr;
                let mut b = AmazonS3Builder::from_env().with_url(root.as_str());
                for (k, v) in &self.options {
                    let key = AmazonS3ConfigKey::from_str(k).map_err(|_| self.unknown_key(k))?;
                    b = b.with_config(key, v);
                }
                let b = b.with_retry(self.retry.clone());
                let s3 = b.clone().build().map_err(|e| self.build_error(e))?;
                let lister = super::open_uploads::UploadLister::new(&b, s3.clone()).map_err(|e| self.build_error(e))?;
                Stores {
                    uploads: Some(Arc::new(lister)),
                    ..Stores::multipart(s3)
                }
            }
            #[cfg(feature = "gcp")]
            Scheme::Gcs => {
                use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
                use std::str::FromStr;
                let mut b = GoogleCloudStorageBuilder::from_env().with_url(root.as_str());
                for (k, v) in &self.options {
                    let key = GoogleConfigKey::from_str(k).map_err(|_| self.unknown_key(k))?;
                    b = b.with_config(key, v);
                }
                Stores::multipart(b.with_retry(self.retry.clone()).build().map_err(|e| self.build_error(e))?)
            }
            #[cfg(feature = "azure")]
            Scheme::Azure => {
                use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
                use std::str::FromStr;
                let mut b = MicrosoftAzureBuilder::from_env().with_url(root.as_str());
                for (k, v) in &self.options {
                    let key = AzureConfigKey::from_str(k).map_err(|_| self.unknown_key(k))?;
                    b = b.with_config(key, v);
                }
                Stores::multipart(b.with_retry(self.retry.clone()).build().map_err(|e| self.build_error(e))?)
            }
            #[cfg(feature = "http")]
            Scheme::Http => {
                use object_store::http::HttpBuilder;
                use std::str::FromStr;
                use object_store::ClientConfigKey;
                let mut b = HttpBuilder::new().with_url(root.as_str());
                // An http:// URI asks for plain HTTP itself.
                if root.starts_with("http://") {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (k, v) in &self.options {
                    let key = ClientConfigKey::from_str(k).map_err(|_| self.unknown_key(k))?;
                    b = b.with_config(key, v);
                }
                Stores {
                    object: Arc::new(b.with_retry(self.retry.clone()).build().map_err(|e| self.build_error(e))?),
                    multipart: None,
                    #[cfg(feature = "aws")]
                    uploads: None,
                }
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::InvalidValue(format!(
                    "{} needs {} support, which this build of loaderx leaves out (the cargo feature {:?})",
                    self.uri.display(),
                    other.name(),
                    match other {
                        Scheme::S3 => "aws",
                        Scheme::Gcs => "gcp",
                        Scheme::Azure => "azure",
                        Scheme::Http => "http",
                    }
                )))
            }
        };
        Ok(store)
    }
}

/// Clients shared by the locations of this process ([`ClientConfig::shared`]).
static BUILT: PerProcess<Mutex<HashMap<String, Stores>>> = PerProcess::new();
/// At most this many shared clients (all are dropped when one more is
/// needed: a process that makes ever new configurations, say with
/// rotating credentials, keeps no more).
const SHARED_CLIENTS: usize = 64;

/// One client seen as an object store and, where the service has them,
/// as a store of multipart uploads by id (what a writer records so that a
/// cleanup can abort the uploads a killed writer left open).
#[derive(Clone)]
struct Stores {
    object: Arc<dyn ObjectStore>,
    multipart: Option<Arc<dyn MultipartStore>>,
    /// What lists the open multipart uploads (S3 only).
    #[cfg(feature = "aws")]
    uploads: Option<Arc<super::open_uploads::UploadLister>>,
}

impl Stores {
    #[allow(dead_code)]
    fn multipart<S: ObjectStore + MultipartStore>(store: S) -> Stores {
        let store = Arc::new(store);
        Stores {
            object: store.clone(),
            multipart: Some(store),
            #[cfg(feature = "aws")]
            uploads: None,
        }
    }
}

/// A location's client, built again in a forked child (the parent's holds
/// connections registered with a runtime that is not in the child).
pub(crate) struct Client {
    pub(crate) config: ClientConfig,
    inner: PerProcess<Stores>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.config.fmt(f)
    }
}

impl Client {
    pub(crate) fn new(config: ClientConfig) -> Client {
        Client {
            config,
            inner: PerProcess::new(),
        }
    }

    fn stores(&self) -> io::Result<&Stores> {
        // A forked child's parent client holds connections of the
        // parent's runtime: leaked there, a new one made.
        self.inner.get_or_try_init(|| {
            self.config
                .shared()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
        })
    }

    pub(crate) fn get(&self) -> io::Result<Arc<dyn ObjectStore>> {
        Ok(self.stores()?.object.clone())
    }

    /// The client as a store of multipart uploads by id; None for a
    /// service without them (HTTP).
    pub(crate) fn multipart(&self) -> io::Result<Option<Arc<dyn MultipartStore>>> {
        Ok(self.stores()?.multipart.clone())
    }

    /// What lists the service's open multipart uploads; None where
    /// `object_store` has no such call and loaderx none of its own (all
    /// but S3).
    #[cfg(feature = "aws")]
    pub(crate) fn upload_lister(
        &self,
    ) -> io::Result<Option<Arc<super::open_uploads::UploadLister>>> {
        Ok(self.stores()?.uploads.clone())
    }
}

/// The `io::ErrorKind` of a failed request, from the `object_store` error
/// and what it wraps: `NotFound`, `PermissionDenied`, `TimedOut` (a stalled
/// or slow server), `ConnectionRefused` (no connection), `ConnectionReset`
/// (a connection or body cut short), `NotConnected` (the server kept
/// answering 5xx or 429 until the retry budget ran out).
pub(crate) fn error_kind(e: &object_store::Error) -> io::ErrorKind {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => io::ErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        E::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        E::NotSupported { .. } | E::NotImplemented { .. } => io::ErrorKind::Unsupported,
        E::Generic { source, .. } => source_kind(source.as_ref()),
        _ => io::ErrorKind::Other,
    }
}

/// The HTTP status a request error reports in its text (the retry error
/// type that carries it is private to `object_store`).
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

fn source_kind(err: &(dyn std::error::Error + 'static)) -> io::ErrorKind {
    use object_store::client::{HttpError, HttpErrorKind};
    if let Some(code) = status_in(&err.to_string()) {
        return match code {
            401 | 403 => io::ErrorKind::PermissionDenied,
            404 => io::ErrorKind::NotFound,
            408 => io::ErrorKind::TimedOut,
            429 | 500..=599 => io::ErrorKind::NotConnected,
            _ => io::ErrorKind::Other,
        };
    }
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<HttpError>() {
            return match h.kind() {
                HttpErrorKind::Timeout => io::ErrorKind::TimedOut,
                HttpErrorKind::Connect => io::ErrorKind::ConnectionRefused,
                HttpErrorKind::Interrupted | HttpErrorKind::Request | HttpErrorKind::Unknown => {
                    io::ErrorKind::ConnectionReset
                }
                HttpErrorKind::Decode => io::ErrorKind::InvalidData,
                _ => io::ErrorKind::Other,
            };
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io.kind();
        }
        next = e.source();
    }
    if err.to_string().contains("Server returned error response") {
        return io::ErrorKind::NotConnected;
    }
    io::ErrorKind::Other
}

/// A short account of why a request failed, for messages (the error's own
/// text can be long, and is scrubbed by the caller).
pub(crate) fn describe(kind: io::ErrorKind) -> &'static str {
    match kind {
        io::ErrorKind::NotFound => "no such object",
        io::ErrorKind::PermissionDenied => "the credentials were refused",
        io::ErrorKind::TimedOut => "the server did not answer in time (retries exhausted)",
        io::ErrorKind::ConnectionRefused => "could not connect (retries exhausted)",
        io::ErrorKind::ConnectionReset => "the connection was cut (retries exhausted)",
        io::ErrorKind::NotConnected => "the server kept failing (retries exhausted)",
        io::ErrorKind::AlreadyExists => "the object already exists",
        io::ErrorKind::Unsupported => "the store does not support this operation",
        _ => "the request failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_removes_secrets_and_queries() {
        let s = Secrets(Arc::new(vec!["hunter22".into()]));
        assert_eq!(
            s.scrub("GET https://h/x?X-Amz-Signature=abc failed: key hunter22 (https://h/y)"),
            "GET https://h/x failed: key *** (https://h/y)"
        );
        assert!(is_secret_key("aws_secret_access_key"));
        assert!(is_secret_key("AWS_SESSION_TOKEN"));
        assert!(!is_secret_key("aws_region"));
        assert!(!is_secret_key("aws_endpoint"));
    }

    #[test]
    fn durations_parse_or_name_the_key() {
        assert_eq!(
            parse_seconds("k", "1.5").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_seconds("k", "200ms").unwrap(),
            Duration::from_millis(200)
        );
        assert_eq!(parse_seconds("k", "2m").unwrap(), Duration::from_secs(120));
        assert!(parse_bool("hedge", "off").is_ok_and(|b| !b));
        let e = parse_bool("hedge", "maybe").unwrap_err().to_string();
        assert!(e.contains("hedge") && e.contains("maybe"), "{e}");
        let e = parse_multiple("hedge_multiple", "0.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hedge_multiple") && e.contains("0.5"), "{e}");
        assert_eq!(parse_multiple("hedge_multiple", "3").unwrap(), 3.0);
        let e = parse_seconds("retry_timeout", "soon")
            .unwrap_err()
            .to_string();
        assert!(e.contains("retry_timeout") && e.contains("soon"), "{e}");
    }

    #[cfg(feature = "aws")]
    #[test]
    fn locations_with_the_same_options_share_one_client() {
        let config = |endpoint: &str| {
            let crate::io::uri::Parsed::Remote(uri) =
                crate::io::uri::parse("s3://shared-bucket/t").unwrap()
            else {
                panic!("not remote")
            };
            let options: Vec<(String, String)> = [
                ("aws_endpoint", endpoint),
                ("aws_region", "us-east-1"),
                ("aws_access_key_id", "id"),
                ("aws_secret_access_key", "secret"),
                ("allow_http", "true"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            ClientConfig::new(uri, &options).unwrap()
        };
        let a = Client::new(config("http://127.0.0.1:9"));
        let b = Client::new(config("http://127.0.0.1:9"));
        let c = Client::new(config("http://127.0.0.1:10"));
        assert!(Arc::ptr_eq(&a.get().unwrap(), &b.get().unwrap()));
        assert!(!Arc::ptr_eq(&a.get().unwrap(), &c.get().unwrap()));
        // What a fresh view of a location gets: the same client.
        let again = Client::new(a.config.clone());
        assert!(Arc::ptr_eq(&a.get().unwrap(), &again.get().unwrap()));
    }
}
