//! Locations as users write them: a local path, a `file://` URI, or a
//! remote one: `s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix` (and `abfs[s]://`),
//! `http(s)://host[:port]/path`, split into the root an object store client
//! is built for and the key prefix below it.
//!
//! Credentials never travel in a URI here: one with a user name, a password
//! or a query string is refused (its secret part is not repeated in the
//! message); they come from `storage_options` or the environment.

use crate::{Error, Result};

/// The object store behind a URI scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    S3,
    Gcs,
    Azure,
    Http,
}

impl Scheme {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
            Scheme::Http => "http",
        }
    }
}

/// A parsed remote URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RemoteUri {
    pub scheme: Scheme,
    /// What the client is built for and what every object's display name
    /// starts with: `s3://bucket`, `https://host:8080`,
    /// `abfss://fs@account.dfs.core.windows.net`.
    pub root: String,
    /// The key prefix below the root, without leading or trailing `/`
    /// (empty for the root itself).
    pub key: String,
}

impl RemoteUri {
    /// The URI of the key prefix (`root/key`), as messages name it.
    pub(crate) fn display(&self) -> String {
        if self.key.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{}", self.root, self.key)
        }
    }
}

/// What a location string names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A local path (a plain path, or a `file://` URI's path).
    Local(std::path::PathBuf),
    Remote(RemoteUri),
}

/// The URI without what may carry a secret (user information, query,
/// fragment), for messages about a URI that is refused.
pub(crate) fn redacted(uri: &str) -> String {
    let (scheme, rest) = match uri.split_once("://") {
        Some(parts) => parts,
        None => return uri.to_owned(),
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        // abfs's `container@account.dfs...` is not a secret; a password is.
        Some((user, host)) if user.contains(':') => format!("***@{host}"),
        _ => authority.to_owned(),
    };
    format!("{scheme}://{authority}{path}")
}

fn bad(uri: &str, why: impl std::fmt::Display) -> Error {
    Error::InvalidValue(format!(
        "location {:?} is not a valid URI: {why}",
        redacted(uri)
    ))
}

/// [`bad`] of a URI that holds credentials.
fn credentials(uri: &str, why: &str) -> Error {
    Error::Refused {
        refusal: crate::error::Refusal::CredentialsInUri,
        message: bad(uri, why).to_string(),
    }
}

/// Whether `location` is written as a remote URI (a scheme other than
/// `file`), whether or not it is a valid one: [`parse`] says that.
pub(crate) fn names_remote(location: &str) -> bool {
    match location.split_once("://") {
        Some((scheme, _)) => !scheme.eq_ignore_ascii_case("file"),
        None => false,
    }
}

/// Splits `location` into a local path or a remote URI (the same rules in
/// every build: one without remote support refuses the remote URIs after
/// this parse).
///
/// `ValueError` (`InvalidValue`) naming the URI for an unknown scheme, a
/// missing bucket or host, a user name or password, a query string or a
/// fragment.
pub(crate) fn parse(location: &str) -> Result<Parsed> {
    let Some((scheme, rest)) = location.split_once("://") else {
        return Ok(Parsed::Local(location.into()));
    };
    let lower = scheme.to_ascii_lowercase();
    if lower == "file" {
        // file:///abs/path (an empty authority) or file://localhost/abs/path.
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        if !path.starts_with('/') {
            return Err(bad(
                location,
                "a file:// URI needs an absolute path (file:///data/table)",
            ));
        }
        if path.contains(['?', '#']) {
            return Err(bad(location, "a file:// URI takes no query or fragment"));
        }
        return Ok(Parsed::Local(path.into()));
    }
    let scheme_kind = match lower.as_str() {
        "s3" | "s3a" => Scheme::S3,
        "gs" | "gcs" => Scheme::Gcs,
        "az" | "azure" | "abfs" | "abfss" | "adl" => Scheme::Azure,
        "http" | "https" => Scheme::Http,
        _ => {
            return Err(bad(
                location,
                format!(
                    "unknown scheme {scheme:?} (expected a local path, file://, s3://, gs://, az://, abfs://, abfss://, http:// or https://)"
                ),
            ))
        }
    };
    if rest.contains('?') || rest.contains('#') {
        return Err(credentials(
            location,
            "a query string or fragment is not accepted (pass credentials as the location's options)",
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad(
            location,
            match scheme_kind {
                Scheme::Http => "it names no host",
                Scheme::Azure => "it names no container",
                _ => "it names no bucket",
            },
        ));
    }
    if let Some((user, _)) = authority.rsplit_once('@') {
        let abfs = matches!(lower.as_str(), "abfs" | "abfss") && !user.contains(':');
        if !abfs {
            return Err(credentials(
                location,
                "a user name or password is not accepted in the URI (pass credentials as the location's options)",
            ));
        }
    }
    if authority.contains(char::is_whitespace) || path.contains(char::is_whitespace) {
        return Err(bad(location, "it holds whitespace"));
    }
    let key: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if key.iter().any(|p| *p == "." || *p == "..") {
        return Err(bad(location, "'.' and '..' are not key segments"));
    }
    Ok(Parsed::Remote(RemoteUri {
        scheme: scheme_kind,
        root: format!("{lower}://{authority}"),
        key: key.join("/"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(s: &str) -> RemoteUri {
        match parse(s).unwrap() {
            Parsed::Remote(r) => r,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn splits_root_and_key() {
        let r = remote("s3://bucket/a/b/");
        assert_eq!(
            (r.scheme, r.root.as_str(), r.key.as_str()),
            (Scheme::S3, "s3://bucket", "a/b")
        );
        assert_eq!(r.display(), "s3://bucket/a/b");
        let r = remote("S3://bucket");
        assert_eq!((r.root.as_str(), r.key.as_str()), ("s3://bucket", ""));
        let r = remote("https://127.0.0.1:8080/data/t");
        assert_eq!(
            (r.scheme, r.root.as_str(), r.key.as_str()),
            (Scheme::Http, "https://127.0.0.1:8080", "data/t")
        );
        let r = remote("abfss://fs@acct.dfs.core.windows.net/t");
        assert_eq!(r.scheme, Scheme::Azure);
        assert_eq!(r.root, "abfss://fs@acct.dfs.core.windows.net");
        assert_eq!(remote("gs://b/x").scheme, Scheme::Gcs);
        assert_eq!(remote("az://c/x").scheme, Scheme::Azure);
    }

    #[test]
    fn local_paths_and_file_uris_are_local() {
        assert_eq!(parse("data/t").unwrap(), Parsed::Local("data/t".into()));
        assert_eq!(
            parse("file:///data/t").unwrap(),
            Parsed::Local("/data/t".into())
        );
        assert_eq!(
            parse("file://localhost/data").unwrap(),
            Parsed::Local("/data".into())
        );
        assert!(parse("file://data").is_err());
    }

    #[test]
    fn refusals_name_the_uri_but_never_a_secret() {
        for (uri, why) in [
            ("ftp://host/x", "unknown scheme"),
            ("s3:///x", "no bucket"),
            ("http://user:hunter2@host/x", "user name or password"),
            ("https://host/x?sig=hunter2", "query string"),
            ("s3://b/../x", "'..'"),
        ] {
            let msg = parse(uri).unwrap_err().to_string();
            assert!(msg.contains(why), "{uri}: {msg}");
            assert!(!msg.contains("hunter2"), "{uri}: {msg}");
        }
        assert_eq!(redacted("http://u:p@h/x?q=1"), "http://***@h/x");
    }
}
