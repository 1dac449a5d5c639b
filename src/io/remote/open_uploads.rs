//! The multipart uploads open below a prefix of an S3 bucket, listed with
//! S3's `ListMultipartUploads` (`GET /?uploads`), which the `object_store`
//! crate does not offer: a cleanup aborts those that no live writer holds
//! (a writer killed between creating an upload and recording it in its
//! lease object leaves one that nothing else names). The request goes to
//! the endpoint the crate's own client resolves (taken from a URL it
//! signs), with the crate's credentials, SigV4 signer and HTTP client
//! options; nothing of this is S3-specific above [`UploadLister`].

use std::io;
use std::time::{Duration, SystemTime};

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::signer::Signer;
use object_store::{ClientConfigKey, ClientOptions};

/// Lists the open multipart uploads of one S3 bucket.
pub(crate) struct UploadLister {
    store: AmazonS3,
    region: String,
    http: HttpClient,
}

/// The client options that shape the connection (the rest only shape
/// requests the crate makes itself).
const CONNECTION_KEYS: [ClientConfigKey; 6] = [
    ClientConfigKey::AllowHttp,
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::ConnectTimeout,
    ClientConfigKey::Timeout,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyExcludes,
];

/// At most this many uploads a page (S3's own limit).
const PAGE: usize = 1000;

impl UploadLister {
    /// A lister for the bucket `store` was built for by `builder`.
    pub(crate) fn new(builder: &AmazonS3Builder, store: AmazonS3) -> object_store::Result<Self> {
        let mut options = ClientOptions::new();
        for k in CONNECTION_KEYS {
            if let Some(v) = builder.get_config_value(&AmazonS3ConfigKey::Client(k)) {
                options = options.with_config(k, v);
            }
        }
        let region = builder
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".to_owned());
        Ok(UploadLister {
            store,
            region,
            http: ReqwestConnector::default().connect(&options)?,
        })
    }

    /// The bucket's URL, as the crate's client addresses it (path-style
    /// `endpoint/bucket` or virtual-hosted `bucket.endpoint`), with no
    /// trailing slash but the root's.
    async fn bucket_url(&self) -> io::Result<String> {
        let probe = object_store::path::Path::from("x");
        let signed = self
            .store
            .signed_url(http::Method::GET, &probe, Duration::from_secs(60))
            .await
            .map_err(other)?;
        let mut url = signed.to_string();
        url.truncate(url.find('?').unwrap_or(url.len()));
        let base = url
            .strip_suffix("/x")
            .ok_or_else(|| other(format!("unexpected object URL shape {url:?}")))?;
        let host_only = base
            .split_once("://")
            .is_some_and(|(_, rest)| !rest.contains('/'));
        Ok(if host_only {
            format!("{base}/")
        } else {
            base.to_owned()
        })
    }

    /// The uploads (key, id) open below `prefix` (a key prefix) created at least
    /// `min_age` ago by the service's clock as it reports it. None when the
    /// service does not implement the listing (some S3-compatible servers).
    pub(crate) async fn list(
        &self,
        prefix: &str,
        min_age: Duration,
    ) -> io::Result<Option<Vec<(String, String)>>> {
        let base = self.bucket_url().await?;
        let credential = self
            .store
            .credentials()
            .get_credential()
            .await
            .map_err(other)?;
        let now = SystemTime::now();
        let mut out = Vec::new();
        let mut markers: Option<(String, String)> = None;
        loop {
            let mut query = format!("uploads=&max-uploads={PAGE}&prefix={}", encode(prefix));
            if let Some((key, id)) = &markers {
                query.push_str(&format!(
                    "&key-marker={}&upload-id-marker={}",
                    encode(key),
                    encode(id)
                ));
            }
            let mut request = http::Request::builder()
                .method(http::Method::GET)
                .uri(format!("{base}?{query}"))
                .body(HttpRequestBody::empty())
                .map_err(other)?;
            AwsAuthorizer::new(&credential, "s3", &self.region).authorize(&mut request, None);
            let response = self.http.execute(request).await.map_err(other)?;
            let status = response.status();
            let body = response.into_body().bytes().await.map_err(other)?;
            if status == http::StatusCode::NOT_IMPLEMENTED {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(io::Error::new(
                    if status == http::StatusCode::FORBIDDEN {
                        io::ErrorKind::PermissionDenied
                    } else {
                        io::ErrorKind::Other
                    },
                    format!("listing the open multipart uploads answered {status}"),
                ));
            }
            let page = parse(&body)?;
            for u in page.upload {
                if old_enough(&u.initiated, now, min_age)? {
                    out.push((u.key, u.upload_id));
                }
            }
            match (
                page.is_truncated,
                page.next_key_marker,
                page.next_upload_id_marker,
            ) {
                (true, Some(k), Some(i)) if markers.as_ref() != Some(&(k.clone(), i.clone())) => {
                    markers = Some((k, i))
                }
                _ => return Ok(Some(out)),
            }
        }
    }
}

fn other(e: impl ToString) -> io::Error {
    io::Error::other(e.to_string())
}

/// `ListMultipartUploadsResult`, the parts read of it.
#[derive(serde::Deserialize, Debug, Default)]
#[serde(rename_all = "PascalCase")]
struct Listing {
    #[serde(default)]
    upload: Vec<Listed>,
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_key_marker: Option<String>,
    #[serde(default)]
    next_upload_id_marker: Option<String>,
}

#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
struct Listed {
    key: String,
    upload_id: String,
    initiated: String,
}

fn parse(body: &[u8]) -> io::Result<Listing> {
    let text = std::str::from_utf8(body).map_err(other)?;
    quick_xml::de::from_str(text).map_err(|e| other(format!("an unreadable upload listing: {e}")))
}

/// Whether an upload created at `initiated` (as the listing dates it) is
/// at least `min_age` old at `now`; one dated in the future is not.
fn old_enough(initiated: &str, now: SystemTime, min_age: Duration) -> io::Result<bool> {
    let at = initiated_at(initiated)?;
    Ok(now.duration_since(at).is_ok_and(|age| age >= min_age))
}

fn initiated_at(s: &str) -> io::Result<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map_err(|e| other(format!("an upload's creation time {s:?}: {e}")))?;
    let ms = u64::try_from(t.timestamp_millis()).unwrap_or(0);
    Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// `s` percent-encoded as SigV4 wants a query value: every byte but the
/// unreserved characters of RFC 3986.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_reads_its_uploads_and_markers() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult>
  <Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>t/shard-b/x.zr</NextKeyMarker><NextUploadIdMarker>id2</NextUploadIdMarker>
  <Prefix>t/</Prefix><MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>t/shard-a/x.zr</Key><UploadId>id1</UploadId>
    <Initiator><ID>i</ID><DisplayName>d</DisplayName></Initiator>
    <StorageClass>STANDARD</StorageClass><Initiated>2026-12-06T01:02:03.000Z</Initiated></Upload>
  <Upload><Key>t/shard-b/a&amp;b.zr</Key><UploadId>id2</UploadId><Initiated>2026-12-06T01:02:04Z</Initiated></Upload>
</ListMultipartUploadsResult>"#;
        let page = parse(xml).unwrap();
        assert!(page.is_truncated);
        assert_eq!(page.next_key_marker.as_deref(), Some("t/shard-b/x.zr"));
        assert_eq!(page.next_upload_id_marker.as_deref(), Some("id2"));
        let keys: Vec<_> = page
            .upload
            .iter()
            .map(|u| (u.key.as_str(), u.upload_id.as_str()))
            .collect();
        assert_eq!(
            keys,
            [("t/shard-a/x.zr", "id1"), ("t/shard-b/a&b.zr", "id2")]
        );
        let t = initiated_at(&page.upload[0].initiated).unwrap();
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs, 1_796_518_923);
        let empty = parse(b"<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>").unwrap();
        assert!(empty.upload.is_empty() && !empty.is_truncated);
        assert!(parse(b"<ListMultipartUploadsResult><Upload><Key>k</Key></Upload>").is_err());
        assert!(initiated_at("yesterday").is_err());
        let hour = Duration::from_secs(3600);
        let at = |s: u64| t + Duration::from_secs(s);
        assert!(!old_enough("2026-12-06T01:02:03.000Z", at(3599), hour).unwrap());
        assert!(old_enough("2026-12-06T01:02:03.000Z", at(3600), hour).unwrap());
        assert!(old_enough("2026-12-06T02:02:03+01:00", at(3600), hour).unwrap());
        assert!(!old_enough("2026-12-06T01:02:04Z", t, Duration::ZERO).unwrap());
        assert!(old_enough("not a date", t, hour).is_err());
    }

    #[test]
    fn query_values_keep_only_unreserved_bytes() {
        assert_eq!(
            encode("a-b_c.d~e/f g+h&é"),
            "a-b_c.d~e%2Ff%20g%2Bh%26%C3%A9"
        );
    }
}
